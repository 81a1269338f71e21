"""What is shown of the judged entries: each entry's report (report.py) and the
leaderboard (leaderboard.py), both read from the queue."""

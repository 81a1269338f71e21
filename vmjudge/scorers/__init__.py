"""Scorers: what a scorer gets and gives (base), how the one a challenge names is found and
versioned (loader, through the vmjudge.scorers entry points), the reading rules the built-ins
share (reference, answers, parts), and the built-in scorers themselves (builtin/). Scoring
runs on the host only: reference answers never enter a VM."""

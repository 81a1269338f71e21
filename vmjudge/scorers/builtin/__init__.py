"""The built-in scorers, one module per official scoring program (accuracy, af2017,
alarms2015, beats2014, heart2016), each registered by name in setup.cfg's vmjudge.scorers
entry points, and what beats2014 needs of WFDB (wfdb_annotations, bxb)."""

#!/bin/sh
# Runs once per record: $1 is the record name; its files ($1.hea, $1.dat) are here.
# Appends the line "$1,LABEL" to answers.txt (LABEL: N, A, O or ~).
python3 classify.py "$1"

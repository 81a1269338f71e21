#!/bin/sh
# Runs once per record: $1 is the record name; its files ($1.hea, $1.dat) are here.
# Writes $1.qrs, a WFDB annotation file with one NORMAL annotation per detected beat.
python3 detect.py "$1"

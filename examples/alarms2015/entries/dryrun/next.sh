#!/bin/sh
# Runs once per record: $1 is the record name; its files ($1.hea, $1.dat) are here.
# sigstat, which the challenge's image builds from its image/sigstat, prints each signal's
# statistics; classify.pl reads them and appends "$1,1" (true alarm) or "$1,0" (false alarm)
# to answers.txt.
set -e
stats=$(sigstat "$1")
printf '%s\n' "$stats" | perl classify.pl "$1"

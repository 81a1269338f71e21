#!/bin/sh
# Runs once in the guest, in the entry's home directory, before any record.
echo "alarms2015 sample entry: checking sigstat and perl"
command -v sigstat >/dev/null || { echo "sigstat is not installed"; exit 1; }
perl -c classify.pl || exit 1

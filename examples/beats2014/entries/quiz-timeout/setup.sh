#!/bin/sh
# Runs once in the guest, in the entry's home directory, before any record.
echo "beats2014 sample entry: checking python3 and numpy"
python3 -c "import numpy" || exit 1

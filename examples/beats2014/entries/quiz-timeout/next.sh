#!/bin/sh
# Hangs on purpose on training record 101: the per-record limit must stop stage 2 there.
if [ "$1" = 101 ]; then
    sleep 1000
fi
python3 detect.py "$1"

#!/bin/sh
# Hangs on purpose on training record A0002: the per-record limit must stop stage 2 there.
if [ "$1" = A0002 ]; then
    sleep 1000
fi
python3 classify.py "$1"

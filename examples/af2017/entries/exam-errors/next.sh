#!/bin/sh
# Fails on purpose on test records B0002 and B0005 (training records are named A...). Stage 3
# must count the failures, never show this output, and still score the entry (those two
# records count as missing answers).
case "$1" in
B0002|B0005)
    echo "SECRET-TEST-OUTPUT $1"
    exit 3
    ;;
esac
python3 classify.py "$1"

#!/bin/sh
# Fails on purpose on test records 201 and 204 (the training records, 100-104, are the ones
# with outputs/$1.qrs). Stage 3 must count the failures, never show this output, and still
# score the entry (those two records count as empty answers).
case "$1" in
201|204)
    echo "SECRET-TEST-OUTPUT $1"
    exit 3
    ;;
esac
python3 detect.py "$1"

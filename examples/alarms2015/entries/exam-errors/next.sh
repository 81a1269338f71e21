#!/bin/sh
# Fails on purpose on test records a202l and b203l (training records are numbered 1..). Stage 3
# must count the failures, never show this output, and still score the entry (those two
# records count as missing answers, which suppress the alarm: 0).
case "$1" in
a202l|b203l)
    echo "SECRET-TEST-OUTPUT $1"
    exit 3
    ;;
esac
set -e
stats=$(sigstat "$1")
printf '%s\n' "$stats" | perl classify.pl "$1"

#!/bin/sh
# Hangs on purpose on training record a102l: the per-record limit must stop stage 2 there.
if [ "$1" = a102l ]; then
    sleep 1000
fi
set -e
stats=$(sigstat "$1")
printf '%s\n' "$stats" | perl classify.pl "$1"

#!/bin/sh
# Builds sigstat, this challenge's own C tool (image/sigstat), into the guest image. It runs
# as root in the new root, offline, with image/ read-only at $VMJUDGE_BUILD_DIR: the source is
# copied to /tmp, which the build discards, and compiled there; only /usr/local/bin/sigstat stays.
set -eu
src=${VMJUDGE_BUILD_DIR:-/run/vmjudge-build}/sigstat
work=$(mktemp -d /tmp/sigstat.XXXXXX)
cp "$src/sigstat.c" "$src/Makefile" "$work/"
make -C "$work" PREFIX=/usr/local
make -C "$work" PREFIX=/usr/local install
/usr/local/bin/sigstat --help >/dev/null
echo "sigstat installed: /usr/local/bin/sigstat"

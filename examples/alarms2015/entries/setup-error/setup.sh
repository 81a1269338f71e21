#!/bin/sh
# Fails on purpose: stage 1 must stop and report this output.
echo "cannot build"
exit 1

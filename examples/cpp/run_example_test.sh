#!/bin/sh
# Runs an example binary with its arguments; passes if it exits 0 and says
# that the meta-loss fell.
set -e
out=$("$@")
echo "$out"
echo "$out" | grep -q "meta-loss fell"

#!/usr/bin/env bash
# The on-disk kernel cache: a second process links the kernels the first
# one compiled instead of compiling them again.
#     bash docs/howto/kernel_cache.sh [CACHE_DIR]
set -euo pipefail
export METAFUSE_CACHE_DIR="${1:-$(mktemp -d)}"   # default: ~/.cache/metafuse/kernels

metafuse cache clear                             # start empty
time python docs/tutorials/first_compiled_loop.py > /dev/null   # cold: compiles every kernel
metafuse cache list | tail -n 3                  # one file per kernel
time python docs/tutorials/first_compiled_loop.py > /dev/null   # warm: kernels from the cache
metafuse cache verify                            # exit status 1 if an entry is corrupted

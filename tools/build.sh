#!/usr/bin/env bash
# The Bazel route against Debian's LibTorch 1.13.1 (the second supported
# torch): installs what is missing, builds the Python extension with Bazel
# (offline; only what metafuse._C needs: the tests' targets are built by
# `bazel test //...` in tools/test_all.sh) and copies it to
# frontend/python/metafuse/_C.so, where /usr/bin/python3 (Debian's torch)
# imports it with PYTHONPATH=frontend/python. Nothing is written into any
# interpreter's site directories: the project venv (tools/setup_venv.sh) is
# where metafuse is installed. Also writes the `metafuse` command-line
# launcher (tools/install_cli.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/install_deps.sh
bazel build //frontend:_C.so

install -m 0755 bazel-bin/frontend/_C.so frontend/python/metafuse/_C.so
# An earlier build wrote metafuse.pth into the user site of /usr/bin/python3,
# which every Python 3.11 of this user reads (pyenv's too, without a torch).
user_site=$(/usr/bin/python3 -m site --user-site)
rm -f "$user_site/metafuse.pth"
bash tools/install_cli.sh
echo "build: metafuse for Debian's torch 1.13.1 in $PWD/frontend/python" \
     "(PYTHONPATH=$PWD/frontend/python /usr/bin/python3)"

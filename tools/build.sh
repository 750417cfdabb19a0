#!/usr/bin/env bash
# Installs what is missing, builds the Python extension with Bazel (offline;
# only what metafuse._C needs: the tests' targets are built by
# `bazel test //...` in tools/test_all.sh), and makes the Python package
# importable by /usr/bin/python3:
#   - copies the extension to frontend/python/metafuse/_C.so
#   - writes metafuse.pth (pointing at frontend/python) into the user site dir
#   - writes the `metafuse` command-line launcher (tools/install_cli.sh:
#     $METAFUSE_BIN_DIR, else /usr/local/bin when writable, else ~/.local/bin)
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/install_deps.sh
bazel build //frontend:_C.so

install -m 0755 bazel-bin/frontend/_C.so frontend/python/metafuse/_C.so
user_site=$(/usr/bin/python3 -m site --user-site)
mkdir -p "$user_site"
echo "$PWD/frontend/python" > "$user_site/metafuse.pth"
bash tools/install_cli.sh
echo "build: metafuse importable by /usr/bin/python3 from $PWD/frontend/python"

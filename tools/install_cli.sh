#!/usr/bin/env bash
# Writes the `metafuse` command-line launcher (called by tools/build.sh):
#   tools/install_cli.sh [BIN_DIR]
# BIN_DIR defaults to $METAFUSE_BIN_DIR, else /usr/local/bin when writable,
# else ~/.local/bin. The launcher runs `/usr/bin/python3 -m metafuse` (the
# interpreter that sees Debian's torch) on this checkout's frontend/python.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
bin_dir="${1:-${METAFUSE_BIN_DIR:-}}"
if [[ -z "$bin_dir" ]]; then
  if [[ -w /usr/local/bin ]]; then bin_dir=/usr/local/bin; else bin_dir="$HOME/.local/bin"; fi
fi
mkdir -p "$bin_dir"
launcher="$bin_dir/metafuse"
tmp="$(mktemp "$bin_dir/.metafuse.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
cat > "$tmp" <<LAUNCHER
#!/bin/sh
# The metafuse command-line tool (docs/cli.md); written by $repo/tools/install_cli.sh.
PYTHONPATH="$repo/frontend/python\${PYTHONPATH:+:\$PYTHONPATH}" exec /usr/bin/python3 -m metafuse "\$@"
LAUNCHER
chmod 0755 "$tmp"
mv -f "$tmp" "$launcher"  # atomic: a concurrent caller sees the old or the new one
trap - EXIT
echo "install_cli: wrote $launcher"

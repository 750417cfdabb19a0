#!/usr/bin/env bash
# Renders the diagrams of docs/ from their graphviz sources (needs `dot`,
# Debian's graphviz, which tools/install_deps.sh installs).
set -euo pipefail
cd "$(dirname "$0")/.."
for src in docs/architecture/*.dot; do
  dot -Tsvg "$src" -o "${src%.dot}.svg"
  dot -Tpng -Gdpi=70 "$src" -o "${src%.dot}.png"
  echo "render_docs: ${src%.dot}.svg, ${src%.dot}.png"
done

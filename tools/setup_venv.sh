#!/usr/bin/env bash
# The project venv (.venv, or $METAFUSE_VENV): PyPI's torch 2.x pinned in
# tools/torch2-requirements.txt and what the tests, benchmarks and docs import, then
# metafuse built into it through the pip route (pip install
# --no-build-isolation .): LLVM where llvm-14-dev is installed, CUDA where
# that torch has CUDA (PyPI's Linux wheel does) and a toolkit is found.
#   --peers   also the peers bench/sweep.py compares with (tools/bench-requirements.txt,
#             and learn2learn where it installs)
# Idempotent: a second run installs nothing new and rebuilds only changed sources.
# The venv is made from Debian's /usr/bin/python3 (3.11, whose headers
# python3-dev provides) without the system site packages, so Debian's torch
# 1.13 never leaks into it.
set -euo pipefail
cd "$(dirname "$0")/.."
peers=0
for arg in "$@"; do
  case "$arg" in
    --peers) peers=1 ;;
    *) echo "setup_venv: unknown argument $arg (expected --peers)" >&2; exit 2 ;;
  esac
done
bash tools/install_deps.sh
venv="${METAFUSE_VENV:-$PWD/.venv}"
if [ ! -x "$venv/bin/python" ]; then
  echo "setup_venv: making the venv $venv"
  /usr/bin/python3 -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
torch_pin=$(grep -E '^torch==' tools/torch2-requirements.txt)
echo "setup_venv: installing $torch_pin and the test and docs requirements (PyPI)"
"${pip[@]}" install -q -r tools/torch2-requirements.txt
if [ "$peers" = 1 ]; then
  echo "setup_venv: installing the peers (tools/bench-requirements.txt), torch held at $torch_pin"
  "${pip[@]}" install -q -r tools/bench-requirements.txt "$torch_pin"
  # learn2learn 0.2.0 ships no wheel for Python 3.11; its source build needs
  # Cython and may fail: say so and go on (the sweep marks its column absent).
  if ! "${pip[@]}" install -q learn2learn "$torch_pin" > "$venv/learn2learn-install.log" 2>&1; then
    echo "setup_venv: learn2learn did not install (see $venv/learn2learn-install.log); its benchmark column is left out"
  fi
fi
unset PYTHONPATH
TIMEFORMAT="setup_venv: pip install of metafuse: %R s wall"
time MAX_JOBS="${MAX_JOBS:-2}" "${pip[@]}" install --no-build-isolation --no-deps -q .
"$venv/bin/python" - <<'PY'
import sys, torch, metafuse
info = metafuse._C.build_info()
print(f"setup_venv: metafuse {metafuse.__version__} on torch {torch.__version__} "
      f"(CUDA {torch.version.cuda}) in {sys.prefix}: LLVM {'on' if info['llvm'] else 'off'}, "
      f"CUDA kernels {'on' if info.get('cuda_torch') else 'off'}")
PY
echo "setup_venv: use it with: source ${venv#$PWD/}/bin/activate   (or run ${venv#$PWD/}/bin/python)"

#!/usr/bin/env bash
# The pip route in CI (tools/test_all.sh, after the Bazel tests): builds
# metafuse with `pip install --no-build-isolation .` into a fresh venv, with
# LLVM switched off as on a machine without LLVM, checks that the venv's
# installed metafuse (not frontend/python) is what Python imports, and runs
# the compiler tests and the CLI's artifact tests against it (the whole
# Python suite already ran against the Bazel build; these are the ones the
# LLVM-free host back end changes, chosen to keep CI well under 30 minutes). MAX_JOBS (default 2) bounds the
# parallel compile jobs; METAFUSE_PIP_VENV names the venv (default: a temp dir).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${METAFUSE_PIP_VENV:-$(mktemp -d)/venv}"
/usr/bin/python3 -m venv --system-site-packages "$venv"
unset PYTHONPATH
TIMEFORMAT="test_pip: pip install: %R s wall, %U s user + %S s system CPU"
time METAFUSE_WITH_LLVM=0 MAX_JOBS="${MAX_JOBS:-2}" \
  "$venv/bin/pip" install --no-build-isolation --no-index --no-deps -q .
"$venv/bin/python" - "$venv" <<'PY'
import os, sys
import metafuse
where = os.path.realpath(metafuse.__file__)
print(f"test_pip: metafuse {metafuse.__version__} imported from {where}")
assert where.startswith(os.path.realpath(sys.argv[1]) + os.sep), \
    f"the venv's python imported metafuse from {where}, not from the venv {sys.argv[1]}"
info = metafuse._C.build_info()
assert not info["llvm"], f"METAFUSE_WITH_LLVM=0 but the extension has LLVM: {info}"
PY
# pytest's summary line ends the run (README).
METAFUSE_TEST_INSTALLED=1 "$venv/bin/python" -m pytest tests/python/compiler \
  tests/python/cli/test_fresh_process.py tests/python/cli/test_cli_commands.py \
  -q -p no:cacheprovider

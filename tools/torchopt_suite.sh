#!/usr/bin/env bash
# TorchOpt's own test suite (its tests/ at a tag, v0.7.3 by default) run twice
# with the project venv's python: once against the real TorchOpt installed in
# the venv, once against metafuse through an import alias (`torchopt` and every
# `torchopt.X` resolve to the modules `metafuse` and `metafuse.X`). Prints each
# run's pytest summary line and its failing test ids; --json writes both counts.
#
# Usage: tools/torchopt_suite.sh [--json PATH] [--source PATH] [--tag TAG]
#                                [--only torchopt|metafuse] [--parallel] [--keep]
#                                [-- PYTEST_ARGS...]
#   --source PATH   where TorchOpt's tests come from: a git directory of
#                   TorchOpt's repository (a mirror or a clone; the tag's tests/
#                   is exported), a work tree of it (its tests/), or a tests/
#                   folder itself. Default: $TORCHOPT_SOURCE, else the mirror
#                   /work/.mirror/metaopt+torchopt/repo.
#   --tag TAG       the tag exported from a git directory (default v0.7.3).
#   --json PATH     write {"runs": {"torchopt": {...}, "metafuse": {...}}} there.
#   --only NAME     run only one of the two.
#   --parallel      run the two pytest processes at the same time (their wall
#                   times then share the machine's cores).
#   --keep          keep the temporary directory (tests, generated plugins, logs).
#   PYTHON=...      the interpreter (default: the repository's .venv/bin/python).
#   THREADS=N       torch's intra-op threads in each run (default 1, set through
#                   OMP_NUM_THREADS and MKL_NUM_THREADS): the suite's tensors are
#                   tiny, and on a busy machine two threads made its MAML tests
#                   about three times slower in wall time.
# Both runs use `-p no:cacheprovider -q -rfE` (plus `-n auto` where pytest-xdist
# is installed) and run at `nice -n 10`. The tests run without TorchOpt's
# pyproject.toml pytest settings (only its tests/ is exported). The metafuse run
# also stubs TorchOpt's private test helper
# `torchopt.alias.utils._set_use_chain_flat` as a no-op when metafuse has none:
# metafuse's chains always run flat. Its last line checks the alias (every
# torchopt.X loaded is a metafuse module, nothing came from the real TorchOpt).
# TorchOpt's JAX-reference tests (test_implicit.py) run where jax, jaxopt and
# optax import, and skip otherwise. Everything written into the temporary
# directory apart from TorchOpt's tests (two pytest plugins, an empty pytest.ini)
# is generated here.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
source_path="${TORCHOPT_SOURCE:-/work/.mirror/metaopt+torchopt/repo}"
tag="v0.7.3"
json=""
only=""
parallel=0
keep=0
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --json) json="$2"; shift 2 ;;
    --source) source_path="$2"; shift 2 ;;
    --tag) tag="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --parallel) parallel=1; shift ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "torchopt_suite: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$only" in ""|torchopt|metafuse) ;; *) echo "torchopt_suite: --only torchopt|metafuse" >&2; exit 2 ;; esac
[ -z "$json" ] || json="$(cd "$(dirname "$json")" && pwd)/$(basename "$json")"

unset PYTHONPATH
export OMP_NUM_THREADS="${THREADS:-1}" MKL_NUM_THREADS="${THREADS:-1}"
python="${PYTHON:-$repo/.venv/bin/python}"
if [ ! -x "$python" ]; then
  echo "torchopt_suite: no interpreter at $python (make the venv: tools/setup_venv.sh, or set PYTHON)" >&2
  exit 2
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/torchopt_suite.XXXXXX")"
if [ "$keep" = 1 ]; then
  echo "torchopt_suite: keeping $work"
else
  trap 'rm -rf "$work"' EXIT
fi

# --- TorchOpt's tests -------------------------------------------------------
if [ -d "$source_path" ] && git --git-dir="$source_path" rev-parse --verify -q "$tag^{commit}" >/dev/null 2>&1; then
  git --git-dir="$source_path" archive "$tag" tests | tar -x -C "$work"
  origin="$source_path at $tag"
elif [ -d "$source_path/.git" ] && git -C "$source_path" rev-parse --verify -q "$tag^{commit}" >/dev/null 2>&1; then
  git -C "$source_path" archive "$tag" tests | tar -x -C "$work"
  origin="$source_path at $tag"
elif [ -f "$source_path/tests/helpers.py" ]; then
  cp -r "$source_path/tests" "$work/tests"
  origin="$source_path/tests (copied as is)"
elif [ -f "$source_path/helpers.py" ]; then
  cp -r "$source_path" "$work/tests"
  origin="$source_path (copied as is)"
else
  cat >&2 <<EOF
torchopt_suite: no TorchOpt tests at $source_path (tag $tag).
  Give a git directory of TorchOpt's repository, a work tree of it or its tests/
  folder with --source PATH or TORCHOPT_SOURCE=PATH, e.g. after
    git clone --mirror https://github.com/metaopt/torchopt.git /tmp/torchopt.git
  run: tools/torchopt_suite.sh --source /tmp/torchopt.git
EOF
  exit 2
fi
[ -f "$work/tests/helpers.py" ] || { echo "torchopt_suite: $origin has no tests/helpers.py" >&2; exit 2; }
echo "torchopt_suite: TorchOpt's tests from $origin ($(find "$work/tests" -maxdepth 1 -name "test_*.py" | wc -l) test files)"

# --- generated pytest plugins -------------------------------------------------
mkdir -p "$work/plugins"
cat > "$work/plugins/torchopt_suite_record.py" <<'EOF'
"""Generated by metafuse's tools/torchopt_suite.sh: writes the run's counts (as
in pytest's summary line) and its failing / erroring test ids to the JSON file
named by TORCHOPT_SUITE_RECORD."""
import json
import os


def _reports(stats, key):
    return [r for r in stats.get(key, ()) if getattr(r, "count_towards_summary", True)]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    stats = terminalreporter.stats
    record = {"exit_status": int(exitstatus)}
    for key, name in (("passed", "passed"), ("failed", "failed"), ("skipped", "skipped"),
                      ("error", "errors"), ("xfailed", "xfailed"), ("xpassed", "xpassed")):
        record[name] = len(_reports(stats, key))
    record["warnings"] = len(stats.get("warnings", ()))
    record["failed_ids"] = [r.nodeid for r in _reports(stats, "failed")]
    record["error_ids"] = [r.nodeid or str(getattr(r, "fspath", "")) for r in _reports(stats, "error")]
    path = os.environ.get("TORCHOPT_SUITE_RECORD")
    if path:
        with open(path, "w") as f:
            json.dump(record, f, indent=1)
EOF
cat > "$work/plugins/torchopt_as_metafuse.py" <<'EOF'
"""Generated by metafuse's tools/torchopt_suite.sh: a pytest plugin, loaded with
`-p torchopt_as_metafuse` before any conftest or test module, that makes
`torchopt` and every `torchopt.X` resolve to the module objects `metafuse` and
`metafuse.X` (a sys.meta_path finder). A `torchopt.X` that metafuse lacks is a
ModuleNotFoundError, never the real TorchOpt installed beside it. TorchOpt's
private test helper `torchopt.alias.utils._set_use_chain_flat` is stubbed as a
no-op where metafuse has none (metafuse's chains always run flat)."""
import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types

ALIAS, TARGET = "torchopt", "metafuse"


def _aliased(name):
    return name == ALIAS or name.startswith(ALIAS + ".")


if any(_aliased(name) for name in sys.modules):
    raise RuntimeError("torchopt was imported before the torchopt_as_metafuse plugin")

_real = importlib.machinery.PathFinder.find_spec(ALIAS)
_REAL_DIR = os.path.dirname(_real.origin) if _real is not None and _real.origin else None


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, module):
        self._module = module

    def create_module(self, spec):
        return None  # a placeholder; exec_module puts the metafuse module in its place

    def exec_module(self, placeholder):
        sys.modules[placeholder.__name__] = self._module


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if not _aliased(fullname):
            return None
        real = TARGET + fullname[len(ALIAS):]
        try:
            module = importlib.import_module(real)
        except ModuleNotFoundError as error:
            if error.name and (real == error.name or real.startswith(error.name + ".")):
                raise ModuleNotFoundError(
                    f"No module named {fullname!r} (no {error.name!r})", name=fullname
                ) from None
            raise
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(module))


sys.meta_path.insert(0, _AliasFinder())
_metafuse = importlib.import_module(TARGET)


def _set_use_chain_flat(use_chain_flat):
    """No-op stand-in for TorchOpt's test helper: metafuse's chains always run flat."""


try:
    _utils = importlib.import_module(TARGET + ".alias.utils")
except ImportError:
    _utils = None
if _utils is None:
    _STUB = "a stub module torchopt.alias.utils with a no-op _set_use_chain_flat"
    _stub = types.ModuleType(ALIAS + ".alias.utils", "stub written by tools/torchopt_suite.sh")
    _stub._set_use_chain_flat = _set_use_chain_flat
    sys.modules[ALIAS + ".alias.utils"] = _stub
elif not hasattr(_utils, "_set_use_chain_flat"):
    _STUB = "metafuse.alias.utils with a no-op _set_use_chain_flat added"
    _utils._set_use_chain_flat = _set_use_chain_flat
else:
    _STUB = "metafuse's own metafuse.alias.utils._set_use_chain_flat"


def pytest_report_header(config):
    return f"torchopt -> {_metafuse.__name__} ({_metafuse.__file__}); test helper: {_STUB}"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    problems = []
    for name, module in list(sys.modules.items()):
        if not _aliased(name) or name == ALIAS + ".alias.utils":
            continue
        if not getattr(module, "__name__", "").startswith(TARGET):
            problems.append(f"{name} is {getattr(module, '__name__', module)!r}")
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None) or ""
        if _REAL_DIR and origin.startswith(_REAL_DIR + os.sep):
            problems.append(f"{name} was loaded from the real TorchOpt ({origin})")
    count = sum(1 for name in sys.modules if _aliased(name))
    verdict = "ok" if not problems else "PROBLEMS: " + "; ".join(problems)
    terminalreporter.write_line(f"torchopt_as_metafuse: {count} torchopt module names; alias check {verdict}")
EOF

# --- the two runs ---------------------------------------------------------------
pytest_args=(-p no:cacheprovider -q -rfE -p torchopt_suite_record)
if "$python" -c "import xdist" >/dev/null 2>&1; then pytest_args+=(-n auto); fi
printf '[pytest]\n' > "$work/pytest.ini"   # no ini file from above the temporary directory

versions="$("$python" - <<'EOF'
import importlib.metadata as m
out = []
for name in ("torch", "numpy", "optree", "pytest", "torchopt", "metafuse", "jax", "jaxlib", "jaxopt", "optax"):
    try:
        out.append(f"{name}={m.version(name)}")
    except m.PackageNotFoundError:
        out.append(f"{name}=-")
print(" ".join(out))
EOF
)"
echo "torchopt_suite: $python: $versions; OMP_NUM_THREADS=$OMP_NUM_THREADS"

pytest_run() {  # pytest_run NAME [more pytest args]: one run; log, counts, exit status and wall time into $work
  local name="$1"; shift
  local start end rc=0
  start=$(date +%s)
  (cd "$work" && PYTHONPATH="$work/plugins" TORCHOPT_SUITE_RECORD="$work/$name.json" \
     nice -n 10 "$python" -m pytest -c "$work/pytest.ini" --rootdir "$work" \
       "${pytest_args[@]}" "$@" tests "${extra[@]}") > "$work/$name.log" 2>&1 || rc=$?
  end=$(date +%s)
  echo "$((end - start))" > "$work/$name.wall"
  echo "$rc" > "$work/$name.rc"
}

report() {  # report NAME: the run's summary line and failing ids
  local name="$1" log="$work/$1.log"
  echo
  local where="log: rerun with --keep"
  if [ "$keep" = 1 ]; then where="log $log"; fi
  echo "torchopt_suite: ==== $name: exit status $(cat "$work/$name.rc"), $(cat "$work/$name.wall") s, $where"
  grep -E '^torchopt_as_metafuse:' "$log" || true
  echo "torchopt_suite: $name summary: $(grep -E ' in [0-9.]+s( \([0-9:]+\))?$' "$log" | tail -1)"
  if [ -f "$work/$name.json" ]; then
    "$python" - "$work/$name.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"torchopt_suite: {len(r['failed_ids'])} failed, {len(r['error_ids'])} errors:")
for i in r["failed_ids"]:
    print("  FAILED", i)
for i in r["error_ids"]:
    print("  ERROR ", i)
EOF
  else
    echo "torchopt_suite: $name recorded no counts (pytest did not finish); the log's end:"
    tail -30 "$log"
  fi
}

names=()
[ "$only" = metafuse ] || names+=(torchopt)
[ "$only" = torchopt ] || names+=(metafuse)
args_of() { if [ "$1" = metafuse ]; then echo "-p torchopt_as_metafuse"; fi; }
for name in "${names[@]}"; do
  echo "torchopt_suite: $name: pytest ${pytest_args[*]} $(args_of "$name") tests ${extra[*]:-}"
done
if [ "$parallel" = 1 ]; then
  for name in "${names[@]}"; do
    # shellcheck disable=SC2046
    pytest_run "$name" $(args_of "$name") &
  done
  wait
  for name in "${names[@]}"; do report "$name"; done
else
  for name in "${names[@]}"; do
    # shellcheck disable=SC2046
    pytest_run "$name" $(args_of "$name")
    report "$name"
  done
fi

if [ -n "$json" ]; then
  "$python" - "$work" "$json" "$origin" "$versions" "${pytest_args[*]} ${extra[*]:-}" <<'EOF'
import json, os, sys
work, out, origin, versions, args = sys.argv[1:6]
result = {"tests": origin, "versions": dict(v.split("=", 1) for v in versions.split()),
          "pytest_args": args.strip(), "runs": {}}
for name in ("torchopt", "metafuse"):
    path = os.path.join(work, name + ".json")
    if not os.path.exists(os.path.join(work, name + ".rc")):
        continue
    run = json.load(open(path)) if os.path.exists(path) else {"error": "pytest did not finish"}
    run["wall_s"] = int(open(os.path.join(work, name + ".wall")).read())
    run["pytest_rc"] = int(open(os.path.join(work, name + ".rc")).read())
    result["runs"][name] = run
with open(out, "w") as f:
    json.dump(result, f, indent=1)
    f.write("\n")
print("torchopt_suite: wrote", out)
EOF
fi

# pytest's exit status 1 (tests failed) is the expected outcome; worse ends the script non-zero
status=0
for name in torchopt metafuse; do
  [ -f "$work/$name.rc" ] || continue
  rc=$(cat "$work/$name.rc")
  if [ "$rc" != 0 ] && [ "$rc" != 1 ]; then status=1; fi
done
exit $status

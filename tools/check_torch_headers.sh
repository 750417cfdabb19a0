#!/usr/bin/env bash
# Compiles every C++ source of the extension (tools/extension_sources.txt,
# the pip route's CPU list: LLVM and no-LLVM files) against the headers of a
# newer LibTorch than this machine's, without installing it: Debian trixie's
# libtorch-dev (torch 2.6) and the header packages it includes are
# downloaded from Debian's archive, unpacked with dpkg -x into a cache
# directory, and each source is compiled with -fsyntax-only (templates
# instantiated, overloads resolved; nothing linked or run: trixie's
# libtorch needs a newer glibc and libstdc++ than bookworm's).
#
#   bash tools/check_torch_headers.sh [-j JOBS] [--suite trixie] [--cuda] [SOURCE ...]
#
# SOURCE: check only these sources of the list (paths from the repository
# root), e.g. after changing one file.
#
# --cuda: the CUDA build instead (Debian contrib's libtorch-cuda-dev, the
# CUDA toolkit's headers from $CUDA_HOME, METAFUSE_HAS_NVRTC and
# METAFUSE_WITH_CUDA_TORCH defined), for the sources that depend on them.
#
# Prints one line per source and a summary; exits 1 if any source fails.
# Needs the network (deb.debian.org) the first time; the cache is
# ${XDG_CACHE_HOME:-~/.cache}/metafuse/torch-headers/<suite>.
set -euo pipefail

jobs=1
suite=trixie
cuda=0
only=()
while [ $# -gt 0 ]; do
  case "$1" in
    -j) jobs="$2"; shift 2 ;;
    --suite) suite="$2"; shift 2 ;;
    --cuda) cuda=1; shift ;;
    -*) echo "check_torch_headers.sh: unknown option '$1' (expected -j JOBS, --suite NAME, --cuda or source paths)" >&2; exit 2 ;;
    *) only+=("$1"); shift ;;
  esac
done

root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/metafuse/torch-headers/$suite"
mirror="http://deb.debian.org/debian"
packages="main:libtorch-dev main:pybind11-dev main:libfmt-dev"
if [ "$cuda" = 1 ]; then
  cache="$cache-cuda"
  packages="contrib:libtorch-cuda-dev main:pybind11-dev main:libfmt-dev"
  cuda_home="${CUDA_HOME:-/usr/local/cuda}"
  [ -f "$cuda_home/include/cuda.h" ] || {
    echo "check_torch_headers.sh: --cuda needs the CUDA toolkit's headers (\$CUDA_HOME/include/cuda.h, CUDA_HOME=$cuda_home)" >&2; exit 1; }
fi
mkdir -p "$cache/debs"

if [ ! -f "$cache/unpacked" ]; then
  echo "check_torch_headers.sh: downloading $packages from Debian $suite"
  for component in main contrib; do
    curl -fsS "$mirror/dists/$suite/$component/binary-amd64/Packages.xz" | xz -d
    echo
  done > "$cache/Packages"
  for entry in $packages; do
    package="${entry#*:}"
    file=$(awk -v p="$package" 'BEGIN{RS=""} $0 ~ "(^|\n)Package: " p "\n" {
             if (match($0, /\nFilename: [^\n]+/)) print substr($0, RSTART + 11, RLENGTH - 11) }' \
           "$cache/Packages" | head -1)
    [ -n "$file" ] || { echo "check_torch_headers.sh: $package is not in Debian $suite" >&2; exit 1; }
    curl -fsS -o "$cache/debs/$(basename "$file")" "$mirror/$file"
    dpkg -x "$cache/debs/$(basename "$file")" "$cache/root"
  done
  touch "$cache/unpacked"
fi

include="$cache/root/usr/include"
generated="$cache/generated"
mkdir -p "$generated/compiler/codegen" "$generated/metafuse"
{ printf 'R"mfsrc(\n'; cat "$root/compiler/codegen/kernel_math.h"; printf ')mfsrc"\n'; } \
  > "$generated/compiler/codegen/kernel_math_text.inc"
ln -sfn "$root/frontend/optim" "$generated/metafuse/optim"  # Bazel's include_prefix

python_include=$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
llvm_include=$(llvm-config-14 --includedir)
includes=(-I "$root" -I "$generated" -I "$include" -I "$include/torch/csrc/api/include"
          -I "$python_include" -isystem "$llvm_include")
if [ "$cuda" = 1 ]; then
  includes+=(-isystem "$cuda_home/include")
fi
common=(-std=c++17 -fsyntax-only -fopenmp -Wno-unused-parameter -Wno-sign-compare
        "${includes[@]}" -D__STDC_CONSTANT_MACROS -D__STDC_FORMAT_MACROS -D__STDC_LIMIT_MACROS)
if [ "$cuda" = 1 ]; then
  common+=(-DMETAFUSE_HAS_NVRTC -DMETAFUSE_WITH_CUDA_TORCH)
fi

# The headers in use are the downloaded ones, not this machine's 1.13.
version=$(printf '#include <torch/version.h>\nTORCH_VERSION_MAJOR.TORCH_VERSION_MINOR\n' |
          g++ -std=c++17 -E -P "${includes[@]}" -x c++ - | tail -1 | tr -d ' ')
case "$version" in
  1.*|"") echo "check_torch_headers.sh: the include path resolves torch $version, not $suite's" >&2; exit 1 ;;
esac
echo "check_torch_headers.sh: torch $version headers ($suite), $jobs job(s)"

# Source and its METAFUSE_WITH_LLVM value, from the pip route's list.
sources=$(cd "$root/tools" && CUDA_CHECK="$cuda" /usr/bin/python3 -c '
import os
import extension_sources as e
entries = e.read()
if os.environ["CUDA_CHECK"] == "1":
    # What the CUDA macros change: the files that test them, and the NVRTC ones.
    for path in e.select(entries, llvm=True, nvrtc=True, nvcc=False):
        text = open(os.path.join("..", path)).read()
        if path.endswith(".cc") and ("METAFUSE_WITH_CUDA_TORCH" in text or
                                     "METAFUSE_HAS_NVRTC" in text or "nvrtc" in path or
                                     "kernels/" in path or "cuda" in path):
            print(path, 1)
else:
    for path in e.select(entries, llvm=True, nvrtc=False, nvcc=False):
        print(path, 1)
    for path in e.select(entries, llvm=False, nvrtc=False, nvcc=False):
        if path not in e.select(entries, llvm=True, nvrtc=False, nvcc=False):
            print(path, 0)
')

if [ ${#only[@]} -gt 0 ]; then
  chosen=""
  for path in "${only[@]}"; do
    line=$(echo "$sources" | awk -v p="$path" '$1 == p' | head -1)
    [ -n "$line" ] || { echo "check_torch_headers.sh: $path is not a source this check compiles (tools/extension_sources.txt$([ "$cuda" = 1 ] && echo ", CUDA-dependent"))" >&2; exit 2; }
    chosen+="$line"$'\n'
  done
  sources="${chosen%$'\n'}"
fi

logs="$cache/logs"
rm -rf "$logs"
mkdir -p "$logs"
printf '%s\n' "${common[@]}" > "$cache/flags"
export root logs cache
compile_one() {
  local path="$1" llvm="$2" log flags
  mapfile -t flags < "$cache/flags"
  log="$logs/$(echo "$path" | tr / _).log"
  if g++ "${flags[@]}" -DMETAFUSE_WITH_LLVM="$llvm" "$root/$path" > "$log" 2>&1; then
    echo "ok      $path"
  else
    echo "FAILED  $path  (log: $log)"
  fi
}
export -f compile_one
results=$(echo "$sources" | xargs -P "$jobs" -L 1 bash -c 'compile_one "$0" "$1"')
echo "$results" | sort -k2
total=$(echo "$results" | grep -c . || true)
failed=$(echo "$results" | grep -c '^FAILED' || true)
echo "check_torch_headers.sh: $((total - failed)) of $total sources compile against torch $version"
[ "$failed" -eq 0 ]

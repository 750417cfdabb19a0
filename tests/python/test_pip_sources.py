"""The pip route's source list (tools/extension_sources.txt, read by setup.py)
names exactly the .cc/.cu files Bazel builds into //frontend:_C.so."""

import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import extension_sources  # noqa: E402

BAZEL = shutil.which("bazel")


def bazel(*args):
    done = subprocess.run([BAZEL, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, f"bazel {' '.join(args)} failed:\n{done.stderr[-3000:]}"
    return done.stdout


def test_every_listed_source_exists():
    entries = extension_sources.read()
    assert len(entries) > 50
    missing = [p for p, _ in entries if not os.path.isfile(os.path.join(ROOT, p))]
    assert not missing, f"tools/extension_sources.txt names missing files: {missing}"


def test_llvm_off_swaps_the_jit_for_its_stand_in():
    entries = extension_sources.read()
    on = set(extension_sources.select(entries, llvm=True, nvrtc=False, nvcc=False))
    off = set(extension_sources.select(entries, llvm=False, nvrtc=False, nvcc=False))
    assert on - off == {"runtime/jit/llvm_jit.cc"}
    assert off - on == {"runtime/jit/llvm_jit_unavailable.cc"}


def test_a_cuda_torch_build_has_every_kernel_that_register_cuda_calls():
    # kernels/cuda/register_cuda.cc calls the nvcc-built kernels; a CUDA
    # build without them fails to load (undefined symbols), as the first
    # build on torch 2.11 did.
    kernels = {os.path.join("kernels", "cuda", name)
               for name in os.listdir(os.path.join(ROOT, "kernels", "cuda"))
               if name.endswith(".cu")}
    entries = extension_sources.read()
    cuda = set(extension_sources.select(entries, llvm=False, nvrtc=True, nvcc=True))
    cpu = set(extension_sources.select(entries, llvm=False, nvrtc=False, nvcc=False))
    assert kernels and kernels <= cuda - cpu, sorted(kernels - cuda)


def test_bad_lines_are_refused_with_their_line(tmp_path):
    bad = tmp_path / "list.txt"
    bad.write_text("a.cc\nb.cc gpu\n")
    with pytest.raises(ValueError, match=r"list.txt:2: condition 'gpu'"):
        extension_sources.read(str(bad))
    bad.write_text("a.cc\n# comment\na.cc llvm\n")
    with pytest.raises(ValueError, match=r"list.txt:3: a.cc is listed twice"):
        extension_sources.read(str(bad))


@pytest.mark.skipif(BAZEL is None, reason="bazel is not on PATH: cannot ask Bazel for "
                    "the sources of //frontend:_C.so (the pip route's list is unchecked)")
def test_the_list_matches_bazels_sources_of_the_extension():
    query = bazel("query", "--noshow_progress",
                  'kind("source file", deps(//frontend:_C.so))')
    from_bazel = set()
    for label in query.split():
        match = re.fullmatch(r"//([^:]*):(.+\.(?:cc|cu))", label)
        if match:  # this repository's C++/CUDA files; @absl etc. are not ours
            from_bazel.add(os.path.join(match.group(1), match.group(2)))
    # Bazel's CUDA switches (third_party/cuda_configure.bzl) on this machine.
    defs_path = os.path.join(bazel("info", "output_base").strip(), "external",
                             "local_cuda", "defs.bzl")
    with open(defs_path) as f:
        defs = f.read()
    nvrtc = "CUDA_AVAILABLE = True" in defs
    # The nvcc entries join only a CUDA torch's extension; Bazel links
    # Debian's CPU-only LibTorch, so its _C.so never has them.
    listed = set(extension_sources.select(extension_sources.read(), llvm=True,
                                          nvrtc=nvrtc, nvcc=False))
    assert from_bazel == listed, (
        f"only in Bazel's //frontend:_C.so: {sorted(from_bazel - listed)}; "
        f"only in tools/extension_sources.txt: {sorted(listed - from_bazel)} "
        f"(Bazel CUDA_AVAILABLE={nvrtc})")

"""The source list of metafuse._C for the pip route (tools/extension_sources.txt).

setup.py builds from it; tests/python/test_pip_sources.py compares it with
Bazel's //frontend:_C.so. One parser for both, so they read the same list.
"""

import os

LIST_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "extension_sources.txt")
CONDITIONS = ("llvm", "no-llvm", "nvrtc", "nvcc")


def read(path=LIST_PATH):
    """[(source path relative to the repository root, condition or None)], in
    file order. Raises ValueError naming the line for an unknown condition,
    extra words or a duplicate path."""
    entries, seen = [], set()
    with open(path) as f:
        for number, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            where = f"{path}:{number}"
            if len(words) > 2:
                raise ValueError(f"{where}: expected `PATH [CONDITION]`, got {line.strip()!r}")
            condition = words[1] if len(words) == 2 else None
            if condition is not None and condition not in CONDITIONS:
                raise ValueError(f"{where}: condition {condition!r} is not one of {CONDITIONS}")
            if words[0] in seen:
                raise ValueError(f"{where}: {words[0]} is listed twice")
            seen.add(words[0])
            entries.append((words[0], condition))
    return entries


def select(entries, llvm, nvrtc, nvcc):
    """The paths of `entries` built in a configuration with or without LLVM,
    NVRTC and nvcc-compiled kernels."""
    enabled = {None: True, "llvm": llvm, "no-llvm": not llvm, "nvrtc": nvrtc, "nvcc": nvcc}
    return [path for path, condition in entries if enabled[condition]]

"""The layering rule of docs/architecture.md, checked on the sources: every
layer points only down. The runtime never includes compiler/ or frontend/
(what it needs from the compiler it asks through an interface the compiler
registers: runtime/jit/kernel_printer_service.h), and inside runtime/ the
subfolders form layers:

    base < program_value < tuning < {compute, jit, cuda} < executor

A file includes headers of its own folder or of a lower layer; a Bazel
target depends on targets of its own package or of a lower layer. tree/ and
kernels/ (the lowest parts) include neither the compiler nor the runtime."""

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RUNTIME_LAYERS = {"base": 0, "program_value": 1, "tuning": 2, "compute": 3, "jit": 3,
                  "cuda": 3, "executor": 4}
# Which top-level parts each part may include (besides itself).
MAY_INCLUDE = {
    "tree": set(),
    "kernels": {"tree"},
    "runtime": {"tree", "kernels"},
    "compiler": {"tree", "kernels", "runtime"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
LABEL = re.compile(r'"//([\w/]+)(?::[\w.-]+)?"')


def sources(part):
    for folder, _, names in os.walk(os.path.join(ROOT, part)):
        for name in names:
            if name.endswith((".h", ".cc", ".cu", ".cuh", ".inc")):
                path = os.path.join(folder, name)
                yield os.path.relpath(path, ROOT), open(path, encoding="utf-8").read()


def build_files(part):
    for folder, _, names in os.walk(os.path.join(ROOT, part)):
        if "BUILD" in names:
            path = os.path.join(folder, "BUILD")
            yield os.path.relpath(folder, ROOT), open(path, encoding="utf-8").read()


def runtime_layer(path):
    """The runtime layer a path (runtime/<layer>/...) is in."""
    parts = path.split("/")
    assert parts[0] == "runtime" and len(parts) >= 3 and parts[1] in RUNTIME_LAYERS, (
        f"{path}: every runtime file lives in one of the layers {sorted(RUNTIME_LAYERS)}")
    return parts[1]


def include_violations():
    found = []
    for part, allowed in MAY_INCLUDE.items():
        for path, text in sources(part):
            for header in INCLUDE.findall(text):
                top = header.split("/")[0]
                if top in MAY_INCLUDE or top == "frontend":
                    if top != part and top not in allowed:
                        found.append(f"{path} includes {header}")
                if part == "runtime" and top == "runtime":
                    mine, theirs = runtime_layer(path), runtime_layer(header)
                    if theirs != mine and RUNTIME_LAYERS[theirs] >= RUNTIME_LAYERS[mine]:
                        found.append(f"{path} (layer {mine}) includes {header} "
                                     f"(layer {theirs}, not below it)")
    return found


def dependency_violations():
    found = []
    for part, allowed in MAY_INCLUDE.items():
        for package, text in build_files(part):
            for label in LABEL.findall(text):
                top = label.split("/")[0]
                if top in MAY_INCLUDE or top == "frontend":
                    if top != part and top not in allowed:
                        found.append(f"{package}/BUILD depends on //{label}")
                if part == "runtime" and top == "runtime" and label != package:
                    mine, theirs = runtime_layer(package + "/x"), runtime_layer(label + "/x")
                    if RUNTIME_LAYERS[theirs] >= RUNTIME_LAYERS[mine]:
                        found.append(f"{package}/BUILD (layer {mine}) depends on //{label} "
                                     f"(layer {theirs}, not below it)")
    return found


def test_every_include_points_down():
    assert include_violations() == []


def test_every_bazel_dependency_points_down():
    assert dependency_violations() == []


def test_the_check_sees_a_runtime_file_that_includes_the_compiler(tmp_path, monkeypatch):
    # The check must be able to fail: a planted include is reported.
    planted = os.path.join(ROOT, "runtime", "jit", "_planted_layering_probe.h")
    with open(planted, "w") as f:
        f.write('#include "compiler/codegen/cpp_printer.h"\n'
                '#include "runtime/executor/program.h"\n')
    try:
        found = include_violations()
    finally:
        os.remove(planted)
    assert any("_planted_layering_probe.h includes compiler/codegen" in v for v in found)
    assert any("(layer jit) includes runtime/executor/program.h" in v for v in found)


@pytest.mark.parametrize("part", sorted(MAY_INCLUDE))
def test_each_part_has_sources(part):
    assert any(True for _ in sources(part)), part

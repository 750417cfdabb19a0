"""The committed type stub metafuse/_C.pyi is the one tools/gen_stubs.py
writes for this build (regenerate it after changing a binding) and is valid
Python naming every binding."""

import ast
import os
import sys

import pytest
import torch

import metafuse

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools"))

import gen_stubs  # noqa: E402


@pytest.mark.skipif(int(torch.__version__.split(".")[0]) < 2,
                    reason="the stub is written from the torch 2.x build (whose pybind11 3 "
                           "spells signatures differently from torch 1.13's 2.10)")
def test_stub_is_current():
    path = os.path.join(os.path.dirname(metafuse.__file__), "_C.pyi")
    with open(path) as f:
        committed = f.read()
    assert committed == gen_stubs.render(), (
        "metafuse/_C.pyi is stale: run `.venv/bin/python tools/gen_stubs.py` after "
        "installing the build (tools/setup_venv.sh)")


def test_stub_parses_and_names_the_compiler_bindings():
    tree = ast.parse(gen_stubs.render())
    names = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    for name in ("compile", "compile_function", "deserialize_program", "CompiledProgram",
                 "ExecutableProgram", "InnerLoopLayout", "OptimizerSpec", "_optim", "_tree"):
        assert name in names

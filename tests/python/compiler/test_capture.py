"""Capture (metafuse/compile/capture.py): the front chosen per torch
version in one place, and what the fx front records on torch 2.x."""

import os

import pytest
import torch

import metafuse as mf
from metafuse.compile import capture
from metafuse.compiler import CompilationFallbackWarning

F64 = torch.float64
TORCH2 = capture.FRONT == "fx"
needs_fx = pytest.mark.skipif(not TORCH2, reason="the fx front needs torch 2.x; torch "
                              f"{torch.__version__} captures with TorchScript's tracer")


def test_the_front_follows_the_torch_version_and_the_override():
    assert capture.choose_front((1, 13), "") == "torchscript"
    assert capture.choose_front((2, 15), "") == "fx"
    assert capture.choose_front((2, 15), "torchscript") == "torchscript"
    with pytest.raises(ValueError, match="METAFUSE_CAPTURE=fx needs torch 2.x"):
        capture.choose_front((1, 13), "fx")
    with pytest.raises(ValueError, match="must be 'fx' or 'torchscript'"):
        capture.choose_front((2, 15), "jit")


def test_this_interpreter_uses_the_front_its_torch_needs():
    want = os.environ.get(capture.FRONT_VARIABLE) or (
        "fx" if int(torch.__version__.split(".")[0]) >= 2 else "torchscript")
    assert capture.FRONT == want


def _kinds(graph):
    return [n.kind() for n in graph.nodes()]


@needs_fx
def test_composites_the_compiler_takes_are_recorded_whole():
    w = torch.randn(3, 4, dtype=F64, requires_grad=True)
    x = torch.randn(5, 4, dtype=F64)
    captured = capture.trace(lambda w, x: torch.softmax(torch.nn.functional.linear(x, w), 1)
                             .sum(), (w, x))
    assert captured.error is None and captured.inexact is None
    kinds = _kinds(captured.graph)
    assert "aten::linear" in kinds and "aten::softmax" in kinds, kinds
    assert "aten::addmm" not in kinds and "aten::_softmax" not in kinds, kinds


@needs_fx
def test_metafuse_grad_is_one_node_and_its_values_are_eager():
    w = torch.randn(4, dtype=F64, requires_grad=True)

    def step(w):
        g = mf.grad((w.sin() ** 2).sum(), w)
        return (w - 0.1 * g).sum()

    captured = capture.trace(step, (w,))
    kinds = _kinds(captured.graph)
    assert kinds.count("metafuse::grad") == 1, kinds
    # the backward of sin and pow is not spelled out: the compiler derives it
    assert "aten::cos" not in kinds, kinds
    compiled = mf.compile(step)
    torch.testing.assert_close(compiled(w), step(w), rtol=1e-14, atol=0)


@needs_fx
def test_types_carry_the_layout_of_the_inputs():
    a = torch.randn(4, 6, dtype=F64).t()
    captured = capture.trace(lambda a: a * 2, (a,))
    first = next(iter(captured.graph.inputs())).type()
    assert first.sizes() == [6, 4] and first.strides() == [1, 6]


@needs_fx
def test_data_dependent_control_flow_is_inexact_naming_the_line():
    def branchy(w):
        y = (w * 2).sum()
        if y > 0:  # the branch taken would be baked in
            return y
        return -y

    captured = capture.trace(branchy, (torch.randn(3, dtype=F64),))
    assert captured.graph is None
    assert "test_capture.py" in captured.inexact and "if y > 0" in captured.inexact
    with pytest.warns(CompilationFallbackWarning, match="if y > 0"):
        mf.compile(branchy)(torch.randn(3, dtype=F64, requires_grad=True))


@needs_fx
def test_torchs_own_argument_checks_are_not_inexact():
    # Normal(validate_args=True) reads whether its arguments are valid
    def log_prob(loc, x):
        return torch.distributions.Normal(loc, 1.0, validate_args=True).log_prob(x).sum()

    captured = capture.trace(log_prob, (torch.zeros(3, dtype=F64), torch.randn(3, dtype=F64)))
    assert captured.inexact is None and captured.error is None


@needs_fx
def test_values_from_constants_are_constants_of_the_program():
    def counted(w):
        n = torch.zeros((), dtype=torch.long) + 3  # made inside, like a step count
        return w * int(n.item())

    captured = capture.trace(counted, (torch.randn(2, dtype=F64),))
    assert captured.inexact is None and captured.error is None
    w = torch.randn(2, dtype=F64, requires_grad=True)
    torch.testing.assert_close(mf.compile(counted)(w), counted(w), rtol=0, atol=0)


@needs_fx
def test_composites_dispatch_as_before_outside_a_capture():
    # the kernels registered for capture defer to PyTorch's own elsewhere,
    # also under make_fx run by someone else
    from torch.fx.experimental.proxy_tensor import make_fx
    w, x = torch.randn(3, 4), torch.randn(5, 4)
    gm = make_fx(lambda w, x: torch.nn.functional.linear(x, w))(w, x)
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert "aten.linear.default" not in targets and "aten.t.default" in targets, targets


@needs_fx
def test_a_first_capture_imports_neither_dynamo_nor_inductor():
    # make_fx's proxy mode imports torch._inductor, and torch wraps a dispatch
    # mode in a Dynamo guard that imports Dynamo on its first dispatch: 0.7 s
    # of a fresh process's first compile that the recorder does without
    import subprocess
    import sys

    from package_under_test import PACKAGE_DIR
    code = ("import sys, torch, metafuse as mf\n"
            "f = mf.compile(lambda w, x: torch.softmax(x @ w, 1).sum())\n"
            "f(torch.randn(3, 3, requires_grad=True), torch.randn(4, 3))\n"
            "assert f.programs(), 'the function did not compile'\n"
            "print(sorted(m for m in ('torch._dynamo', 'torch._inductor') if m in sys.modules))\n")
    env = dict(os.environ, PYTHONPATH=PACKAGE_DIR)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout

"""Flatten caching: parameters enter the compiled program flat, once; the
unrolled loop holds no flatten/unflatten; per call, the only tree work is
one check of each input tree against the cached spec (flatten_as)."""

import pytest
import torch

import metafuse as mf
from metafuse import tree as tree_module


def make():
    torch.manual_seed(0)
    params = {"w": torch.randn(3, 4, dtype=torch.float64, requires_grad=True),
              "b": torch.randn(4, dtype=torch.float64, requires_grad=True)}

    def loss_fn(p, x):
        return torch.tanh(x @ p["w"] + p["b"]).pow(2).mean()

    return params, loss_fn, torch.randn(5, 3, dtype=torch.float64)


class Counting:
    def __init__(self, monkeypatch):
        self.calls = {}
        tree = tree_module
        for name in ("flatten", "unflatten", "flatten_as", "map", "leaves"):
            original = getattr(tree, name)

            def counted(*args, _name=name, _original=original, **kwargs):
                self.calls[_name] = self.calls.get(_name, 0) + 1
                return _original(*args, **kwargs)

            monkeypatch.setattr(tree, name, counted)


def test_calls_under_a_compiled_guard_only_check_the_cached_specs(monkeypatch):
    params, loss_fn, x = make()
    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.1), steps=4)
    first = adapt(params, x)
    counting = Counting(monkeypatch)
    second = adapt(params, x)
    # One flatten_as per input tree (params, batch), no spec built, and the
    # result rebuilt once from the flat outputs.
    assert counting.calls == {"flatten_as": 2, "unflatten": 1}
    for k in first:
        torch.testing.assert_close(first[k], second[k], rtol=0, atol=0)


def test_a_different_structure_or_shape_takes_the_full_guard(monkeypatch):
    params, loss_fn, x = make()
    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.1), steps=2)
    adapt(params, x)
    assert adapt.compile_count == 1
    counting = Counting(monkeypatch)
    adapt(params, torch.randn(7, 3, dtype=torch.float64))  # new batch shape
    assert counting.calls.get("flatten", 0) >= 1 and adapt.compile_count == 2
    with pytest.raises(KeyError):
        adapt({"w": params["w"]}, x)  # missing leaf: the loss itself fails
    compiled = adapt.compile_count
    adapt(params, x)  # back to the first guard: found, not recompiled
    assert adapt.compile_count == compiled


def test_the_unrolled_program_holds_no_tree_operations():
    params, loss_fn, x = make()
    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.1), steps=5)
    adapt(params, x)
    program = adapt.programs()[0]
    forward, backward = program.listing()
    for listing in (forward, backward, *program.fused_listing()):
        for op in ("TupleConstruct", "TupleUnpack", "DictConstruct", "ListUnpack",
                   "DictIndex", "__getitem__"):
            assert op not in listing
    # Parameters enter flat: one program input per leaf (+ the batch).
    assert "prim::" not in forward.split("\n")[0]

"""The compiled program as a value: ``program(...)`` of compile_inner_loop
and metafuse.compile results dumps, serializes, reads back and runs again
with bit-identical outputs and meta-gradients; guards and damaged bytes give
clear errors."""

import pytest
import torch

import metafuse as mf

_core = mf._C._compiler


def make_task():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(1, 40), torch.nn.ReLU(),
                              torch.nn.Linear(40, 40), torch.nn.ReLU(),
                              torch.nn.Linear(40, 1))
    params = {k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}
    x = torch.rand(10, 1) * 10 - 5
    y = torch.sin(x)

    def loss_fn(p, x, y):
        return torch.nn.functional.mse_loss(mf.functional_call(net, p, x), y)
    return net, params, x, y, loss_fn


def meta_gradients(net, params, adapted, x, y):
    loss = torch.nn.functional.mse_loss(mf.functional_call(net, adapted, x), y)
    return torch.autograd.grad(loss, list(params.values()))


@pytest.mark.parametrize("fusion", [True, False])
def test_inner_loop_program_round_trips_bit_for_bit(fusion):
    net, params, x, y, loss_fn = make_task()
    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.01), steps=5)
    adapt(params, x, y)
    for p in adapt.programs():
        p.set_fusion(fusion)
    value = adapt.program(params, x, y)
    assert (value.num_kernels > 0) == fusion
    data = value.serialize()
    loaded = _core.deserialize_program(data)
    assert loaded.dump() == value.dump()
    assert loaded.serialize() == data

    runnable = _core.ExecutableProgram(loaded)
    # Inputs in the compiled order: the flattened params (dict keys sorted),
    # then the batch.
    spec = mf.tree.structure(params)
    got = mf.tree.unflatten(spec, runnable(mf.tree.leaves(params) + [x, y]))
    want = adapt(params, x, y)
    for k in params:
        assert torch.equal(got[k], want[k]), k
    for g, w in zip(meta_gradients(net, params, got, x, y),
                    meta_gradients(net, params, want, x, y)):
        assert torch.equal(g, w)


def test_compiled_function_program_round_trips():
    net, params, x, y, loss_fn = make_task()

    @mf.compile
    def adapt(p, x, y):
        for _ in range(2):
            g = mf.grad(loss_fn(p, x, y), p)
            p = {k: p[k] - 0.1 * g[k] for k in p}
        return p

    value = adapt.program(params, x, y)
    runnable = _core.ExecutableProgram(_core.deserialize_program(value.serialize()))
    got = mf.tree.unflatten(mf.tree.structure(params),
                            runnable(mf.tree.leaves(params) + [x, y]))
    want = adapt(params, x, y)
    for k in want:
        assert torch.equal(got[k], want[k]), k


def test_specialized_program_checks_its_guard():
    net, params, x, y, loss_fn = make_task()
    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.01), steps=2)
    runnable = _core.ExecutableProgram(adapt.program(params, x, y))
    with pytest.raises(RuntimeError, match="specialized for"):
        runnable(mf.tree.leaves(params) + [x[:5], y[:5]])


def test_damaged_bytes_are_refused():
    net, params, x, y, loss_fn = make_task()
    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.01), steps=2)
    data = adapt.program(params, x, y).serialize()
    with pytest.raises(ValueError, match="recompile"):
        _core.deserialize_program(data[:len(data) // 2])
    with pytest.raises(ValueError):
        _core.deserialize_program(b"not a program")


def test_program_of_an_eager_fallback_is_an_error():
    net, params, x, y, loss_fn = make_task()
    adapt = mf.compile_inner_loop(lambda p, x, y: loss_fn(p, x, y).sort()[0].sum(),
                                  mf.sgd(0.01), steps=1)
    with pytest.warns(mf.CompilationFallbackWarning):
        with pytest.raises(RuntimeError, match="runs eagerly"):
            adapt.program(params, x, y)

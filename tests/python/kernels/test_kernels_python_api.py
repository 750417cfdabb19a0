"""metafuse.ops' thin wrappers of the fused optimizer ops."""

import pytest
import torch

from metafuse import ops


def test_wrappers_forward_to_the_operators():
    g, mu, nu, p = torch.randn(5), torch.randn(5), torch.rand(5), torch.randn(5)
    got = ops.adam(g, mu, nu, p, count=2, lr=0.1)
    want = torch.ops.metafuse.adam(g, mu, nu, p, count=2, lr=0.1)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    got = ops.adamw(g, mu, nu, p, count=2, lr=0.1)
    want = torch.ops.metafuse.adam(g, mu, nu, p, count=2, lr=0.1,
                                   weight_decay=1e-2, decoupled_weight_decay=True)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    u, b = ops.sgd_multi([g], [], [], count=1, lr=0.1)
    assert torch.equal(u[0], -0.1 * g) and b == []


def test_every_op_has_a_documented_wrapper():
    for name in ("adam", "sgd", "rmsprop", "adagrad", "adamax", "adadelta",
                 "radam", "adamw"):
        for fn in (getattr(ops, name), getattr(ops, name + "_multi")):
            assert "update" in fn.__doc__


@pytest.mark.parametrize("call, message", [
    (lambda: ops.adam([1.0], torch.zeros(1), torch.zeros(1), None, count=1),
     "`grad` must be a torch.Tensor"),
    (lambda: ops.sgd(torch.zeros(1), "buf", None, count=1, lr=0.1),
     "`momentum_buffer` must be a torch.Tensor or None"),
    (lambda: ops.adam_multi(torch.zeros(2), [], [], [], count=1),
     "`grads` must be a list of torch.Tensor"),
    (lambda: ops.adagrad(torch.zeros(1), torch.zeros(1), None, count=1, lrr=0.1),
     "unexpected argument `lrr`"),
])
def test_bad_arguments_are_named(call, message):
    with pytest.raises(TypeError, match=message):
        call()


def _scripted_adam(g: torch.Tensor, mu: torch.Tensor, nu: torch.Tensor):
    return torch.ops.metafuse.adam_multi([g], [mu], [nu], [], count=3, lr=0.1)


# A user's own TorchScript code (deprecated by torch 2.x, still supported
# there) sees the operators: the test calls torch.jit itself.
@pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")
def test_torchscript_and_tracing_see_the_operator():
    g, mu, nu = torch.randn(5), torch.randn(5), torch.rand(5)
    scripted = torch.jit.script(_scripted_adam)(g, mu, nu)
    eager = torch.ops.metafuse.adam(g, mu, nu, None, count=3, lr=0.1)
    for a, b in zip(scripted, eager):
        assert torch.equal(a[0], b)

    def step(g, mu, nu):
        return torch.ops.metafuse.adam(g, mu, nu, None, count=2, lr=0.1)[0]

    traced = torch.jit.trace(step, (g, mu, nu))
    assert "metafuse::adam" in str(traced.graph)
    assert torch.equal(traced(g, mu, nu), step(g, mu, nu))

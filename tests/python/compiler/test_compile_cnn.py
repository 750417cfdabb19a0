"""compile_inner_loop on nn.Module models with convolutions, max-pooling and
BatchNorm in training mode: equal to metafuse's eager path (float64)."""

import warnings

import pytest
import torch

import metafuse as mf
from metafuse.compiler import CompilationFallbackWarning

# The fused and the unfused compiled program, each (compiler/conftest.py).
pytestmark = pytest.mark.usefixtures("program")

F64 = torch.float64


def cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(4, 4, 3, stride=2), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(4, 3)).double()


def batchnorm_mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8),
                               torch.nn.Tanh(), torch.nn.Linear(8, 3)).double()


@pytest.mark.parametrize("make_model, x_shape", [(cnn, (6, 1, 8, 8)),
                                                (batchnorm_mlp, (6, 4))],
                         ids=["cnn", "batchnorm-train"])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_classifier_matches_eager(make_model, x_shape, optimizer):
    model = make_model()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(*x_shape, dtype=F64, generator=g)
    y = torch.randint(0, 3, (x_shape[0],), generator=g)

    def loss_fn(p, x, y):
        return torch.nn.functional.cross_entropy(mf.functional_call(model, p, x), y)

    params = {k: v.detach().clone().requires_grad_() for k, v in model.named_parameters()}
    tx = mf.sgd(0.1) if optimizer == "sgd" else mf.adam(0.01, eps_root=1e-10)
    adapt = mf.compile_inner_loop(loss_fn, tx, steps=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompilationFallbackWarning)
        warnings.simplefilter("ignore", UserWarning)  # running stats not updated
        fast = adapt(params, x, y)
    eager = adapt._eager(params, (x, y))
    meta = torch.autograd.grad(loss_fn(fast, x, y), list(params.values()))
    expected = torch.autograd.grad(loss_fn(eager, x, y), list(params.values()))
    for k in fast:
        torch.testing.assert_close(fast[k], eager[k], rtol=1e-10, atol=1e-12)
    for a, b in zip(meta, expected):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_wide_float32_layers_run_winograd_and_match_a_float64_truth():
    """32-channel 3x3 layers with enough output pixels that the runtime
    computes them (and their input and weight gradients) by Winograd's F(2x2)
    (runtime/compute/winograd_convolution.h): the compiled float32 meta-gradient
    stays as close to the float64 truth as eager float32's does."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(),      # 12 x 16 x 16
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(),      # 12 x 8 x 8
        torch.nn.Flatten(), torch.nn.Linear(32 * 8 * 8, 3))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(12, 3, 16, 16, generator=g)
    y = torch.randint(0, 3, (12,), generator=g)

    def loss_fn(p, x, y):
        return torch.nn.functional.cross_entropy(mf.functional_call(model, p, x), y)

    def meta_gradient(dtype, compiled):
        params = {k: v.detach().to(dtype).clone().requires_grad_()
                  for k, v in model.named_parameters()}
        adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.05), steps=2)
        with warnings.catch_warnings():
            warnings.simplefilter("error", CompilationFallbackWarning)
            fast = adapt(params, x.to(dtype), y) if compiled else adapt._eager(
                params, (x.to(dtype), y))
        loss = loss_fn(fast, x.to(dtype), y)
        return torch.cat([g.flatten().double()
                          for g in torch.autograd.grad(loss, list(params.values()))])

    truth = meta_gradient(F64, compiled=False)
    compiled = meta_gradient(torch.float32, compiled=True)
    eager = meta_gradient(torch.float32, compiled=False)
    scale = truth.abs().max()
    compiled_error = float((compiled - truth).abs().max() / scale)
    eager_error = float((eager - truth).abs().max() / scale)
    assert compiled_error < 1e-4, (compiled_error, eager_error)
    assert compiled_error < 20 * max(eager_error, 1e-7), (compiled_error, eager_error)


@pytest.mark.parametrize("program", ["fused"], indirect=True)  # what fusion makes
def test_pooled_relu_output_is_recomputed_not_saved():
    """conv - BatchNorm - ReLU - max-pool: the ReLU output is read by the
    pooling (which keeps only indices) and by ReLU's derivative (as a mask).
    The backward recomputes it from the centered activation it keeps anyway
    and the per-channel scale and shift, saved for it
    (compiler/specialize/rematerialize.h), instead of holding a whole activation from
    the forward to the backward; the gradient is unchanged."""
    from metafuse._C import _compiler as core
    core.install_memory_meter()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.BatchNorm2d(8, track_running_stats=False),
        torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
        torch.nn.Linear(8 * 8 * 8, 3)).double()
    g = torch.Generator().manual_seed(3)
    x = torch.randn(20, 1, 16, 16, generator=g, dtype=F64)
    y = torch.randint(0, 3, (20,), generator=g)

    def loss_fn(p, x, y):
        return torch.nn.functional.cross_entropy(mf.functional_call(model, p, x), y)

    params = {k: v.detach().clone().requires_grad_() for k, v in model.named_parameters()}
    compiled = mf.compile(loss_fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompilationFallbackWarning)
        compiled(params, x, y)  # compiles; its result is dropped here
        start = core.memory_stats()["live_bytes"]
        loss = compiled(params, x, y)
        held = core.memory_stats()["live_bytes"] - start
    activation = 20 * 8 * 16 * 16 * 8  # bytes of one [20, 8, 16, 16] float64 tensor
    # Held for the backward: the centered activation, the pooling's indices
    # (a quarter the size, int64) and small tensors; the ReLU output besides
    # would make it 2.5 activations.
    assert held < 2 * activation, (held, activation)
    got = torch.autograd.grad(loss, list(params.values()))
    want = torch.autograd.grad(loss_fn(params, x, y), list(params.values()))
    for c, e in zip(got, want):
        torch.testing.assert_close(c, e, rtol=1e-10, atol=1e-10)
    # With the ReLU output read by the pooling alone, the pooling runs in
    # the BatchNorm-and-ReLU kernel (compiler/fusion/fuse_pool_epilogue.h): that
    # activation is not even written.
    [program] = compiled.programs()
    assert program.fusion_report()["forward"]["pooled_kernels"] == 1
    torch.testing.assert_close(loss, loss_fn(params, x, y), rtol=1e-12, atol=0)

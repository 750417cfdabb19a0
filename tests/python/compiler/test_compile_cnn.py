"""compile_inner_loop on nn.Module models with convolutions, max-pooling and
BatchNorm in training mode: equal to metafuse's eager path (float64)."""

import warnings

import pytest
import torch

import metafuse as mf
from metafuse.compiler import CompilationFallbackWarning

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

import pytest
import torch

import metafuse


def reference(m, u, decay, order):
    return decay * m + (1 - decay) * u ** order


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("n", [1, 7, 100_003])
def test_matches_reference(dtype, order, n):
    g = torch.Generator().manual_seed(n)
    m = torch.randn(n, dtype=dtype, generator=g)
    u = torch.randn(n, dtype=dtype, generator=g)
    out = metafuse.ema_update(m, u, 0.9, order)
    tol = 1e-6 if dtype == torch.float32 else 1e-14
    torch.testing.assert_close(out, reference(m, u, 0.9, order), rtol=tol, atol=tol)


def test_pybind_entry_point_agrees_with_torch_ops():
    m, u = torch.randn(10), torch.randn(10)
    torch.testing.assert_close(metafuse._C.ema_update(m, u, 0.3, 2),
                               torch.ops.metafuse.ema_update(m, u, 0.3, 2))


@pytest.mark.parametrize("order", [1, 2])
def test_gradcheck_and_gradgradcheck_float64(order):
    m = torch.randn(6, dtype=torch.float64, requires_grad=True)
    u = torch.randn(6, dtype=torch.float64, requires_grad=True)
    fn = lambda a, b: metafuse.ema_update(a, b, 0.7, order)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (m, u))
    assert torch.autograd.gradgradcheck(fn, (m, u))


def test_second_moment_gradient_at_zero_is_zero_not_nan():
    u = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    m = torch.zeros(4, dtype=torch.float64)
    (grad,) = torch.autograd.grad(metafuse.ema_update(m, u, 0.999, 2).sum(), u)
    assert torch.equal(grad, torch.zeros_like(grad))


@pytest.mark.parametrize(
    "args, message",
    [
        ((torch.randn(3), torch.randn(4), 0.9, 1), "same shape"),
        ((torch.randn(3), torch.randn(3), 0.9, 5), "`order`"),
        ((torch.randn(3), torch.randn(3), -0.1, 1), "`decay`"),
        ((torch.randn(3), torch.randn(3, dtype=torch.float64), 0.9, 1), "dtype"),
    ],
)
def test_bad_input_names_the_argument(args, message):
    with pytest.raises(RuntimeError, match=message):
        metafuse.ema_update(*args)


def test_non_tensor_argument_is_a_type_error():
    with pytest.raises(TypeError, match="`moment` must be a torch.Tensor"):
        metafuse.ema_update([1.0, 2.0], torch.randn(2), 0.9)

"""Compiled programs on CUDA tensors (issue 18, item 4) and the fused
optimizer operators' CUDA form (item 5).

Without a GPU every CUDA test skips with the reason; what runs everywhere is
the refusal of a device compiled programs cannot take. With a GPU, compiled
results are compared with eager CUDA on the same inputs (float64 to 1e-10),
fused kernels must be CUDA kernels (no fallback, no unfused program), and
the fused Adam operator on CUDA is compared with the CPU operator."""

import warnings

import pytest
import torch

import metafuse as mf
from metafuse.compiler import CompilationFallbackWarning

F64 = torch.float64


def _gpu_reason():
    if not torch.cuda.is_available():
        return ("no CUDA device: torch.cuda.is_available() is False "
                f"(torch {torch.__version__}, CUDA build: {torch.version.cuda})")
    if not mf.build_info()["nvrtc"]:
        return "this metafuse build has no NVRTC (built without the CUDA toolkit)"
    available, reason = mf.cuda_status()
    if not available:
        return reason
    return None


GPU_REASON = _gpu_reason()
needs_gpu = pytest.mark.skipif(GPU_REASON is not None, reason=str(GPU_REASON))


def _has_cuda_kernel(op):
    return torch._C._dispatch_has_kernel_for_dispatch_key(op, "CUDA")


def mlp(device, dtype=F64):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(1, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 1)).to(device=device, dtype=dtype)


def problem(device, dtype=F64, tasks=4, shots=8):
    net = mlp(device, dtype)
    params = {k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}

    def loss_fn(p, x, y):
        return torch.nn.functional.mse_loss(mf.functional_call(net, p, x), y)

    g = torch.Generator().manual_seed(1)
    x = (torch.rand(tasks, 2 * shots, 1, generator=g, dtype=F64) * 6 - 3)
    y = torch.sin(x + torch.rand(tasks, 1, 1, generator=g, dtype=F64))
    data = tuple(t.to(device=device, dtype=dtype)
                 for t in (x[:, :shots], y[:, :shots], x[:, shots:], y[:, shots:]))
    return params, loss_fn, data


def strict():
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("error", CompilationFallbackWarning)
    return ctx


def close(a, b, rtol=1e-10, atol=1e-12):
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=rtol, atol=atol)


def test_a_device_programs_cannot_take_is_refused_by_name():
    # Runs everywhere: meta tensors are a device metafuse compiles nothing for.
    x = torch.empty(4, 3, device="meta")

    @mf.compile
    def f(x):
        return (x * 2).exp().sum()

    with pytest.raises(RuntimeError, match=r"tensor on meta.*\.to\('cpu'\)"):
        f(x)


@needs_gpu
@pytest.mark.parametrize("optimizer", [lambda: mf.sgd(0.05),
                                       lambda: mf.adam(0.01, eps_root=1e-10)],
                         ids=["sgd", "adam"])
def test_compile_inner_loop_on_cuda_equals_eager_cuda(optimizer):
    params, loss_fn, (xs, ys, xq, yq) = problem("cuda")
    adapt = mf.compile_inner_loop(loss_fn, optimizer(), steps=3)
    ctx = strict()
    fast = adapt(params, xs[0], ys[0])
    ctx.__exit__(None, None, None)
    eager = adapt._eager(params, (xs[0], ys[0]))
    for k in params:
        assert fast[k].device.type == "cuda"
        torch.testing.assert_close(fast[k], eager[k], rtol=1e-10, atol=1e-12)
    meta = lambda p: loss_fn(p, xq[0], yq[0])  # noqa: E731
    close(torch.autograd.grad(meta(fast), list(params.values())),
          torch.autograd.grad(meta(eager), list(params.values())))
    dump = adapt.program(params, xs[0], ys[0]).dump()
    assert ", CUDA" in dump, "the fused kernels are not CUDA kernels"


@needs_gpu
def test_guard_includes_the_device():
    params, loss_fn, (xs, ys, _, _) = problem("cpu")
    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.05), steps=2)
    on_cpu = adapt(params, xs[0], ys[0])
    gpu_params = {k: v.detach().cuda().requires_grad_() for k, v in params.items()}
    on_gpu = adapt(gpu_params, xs[0].cuda(), ys[0].cuda())
    assert adapt.compile_count == 2
    for k in params:
        torch.testing.assert_close(on_gpu[k].cpu(), on_cpu[k], rtol=1e-10, atol=1e-12)


@needs_gpu
def test_compile_runs_on_torchs_current_stream():
    params, loss_fn, (xs, ys, xq, yq) = problem("cuda")

    @mf.compile
    def f(p, x, y):
        return loss_fn(p, x, y).exp() * 2

    expected = f(params, xs[0], ys[0]).detach()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        # Work queued on the side stream must be ordered with the kernels.
        x = xs[0] * 1.0
        got = f(params, x, ys[0])
    stream.synchronize()
    torch.testing.assert_close(got.detach(), expected, rtol=1e-12, atol=0)


@needs_gpu
def test_vmap_batched_on_cuda_equals_the_per_task_loop():
    params, loss_fn, (xs, ys, xq, yq) = problem("cuda")
    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.05), steps=3)
    task_loss = mf.vmap(lambda p, a, b, c, d: loss_fn(adapt(p, a, b), c, d),
                        in_dims=(None, 0, 0, 0, 0))
    ctx = strict()
    losses = task_loss(params, xs, ys, xq, yq)
    ctx.__exit__(None, None, None)
    expected = torch.stack([loss_fn(adapt._eager(params, (xs[t], ys[t])), xq[t], yq[t])
                            for t in range(xs.shape[0])])
    torch.testing.assert_close(losses, expected, rtol=1e-10, atol=1e-12)
    close(torch.autograd.grad(losses.sum(), list(params.values())),
          torch.autograd.grad(expected.sum(), list(params.values())))


@needs_gpu
def test_large_elementwise_program_covers_every_element():
    # Sizes past one grid (65536 blocks x 256 threads) and odd tails.
    @mf.compile
    def f(x, w):
        return (torch.sigmoid(x) * w + x.tanh()).sum()

    for n in (1, 1023, 1025, 65536 * 256 + 3):
        x = torch.randn(n, device="cuda", dtype=torch.float32, requires_grad=True)
        w = torch.randn(n, device="cuda", dtype=torch.float32)
        got = f(x, w)
        (gx,) = torch.autograd.grad(got, [x])
        want = (torch.sigmoid(x) * w + x.tanh()).sum()
        (wx,) = torch.autograd.grad(want, [x])
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-3)
        torch.testing.assert_close(gx, wx, rtol=1e-5, atol=1e-6)


@needs_gpu
@pytest.mark.skipif(GPU_REASON is None and not _has_cuda_kernel("metafuse::adam"),
                    reason="metafuse::adam has no CUDA kernel in this build "
                           "(built without METAFUSE_WITH_CUDA_TORCH)")
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_fused_adam_cuda_equals_the_cpu_op(dtype):
    torch.manual_seed(0)
    sizes = [(1025,), (3, 7), (1,), (4097, 3)]
    grads = [torch.randn(s, dtype=dtype) for s in sizes]
    mus = [torch.randn(s, dtype=dtype) for s in sizes]
    nus = [torch.rand(s, dtype=dtype) for s in sizes]
    params = [torch.randn(s, dtype=dtype) for s in sizes]
    opts = dict(count=3, lr=1e-2, b1=0.9, b2=0.99, eps=1e-3, eps_root=1e-6,
                weight_decay=0.1)
    cpu = mf.ops.adam_multi(grads, mus, nus, params, **opts)
    cuda = lambda ts: [t.cuda() for t in ts]  # noqa: E731
    gpu = mf.ops.adam_multi(cuda(grads), cuda(mus), cuda(nus), cuda(params), **opts)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-14)
    for a, b in zip(cpu, gpu):
        for x, y in zip(a, b):
            torch.testing.assert_close(y.cpu(), x, **tol)
    # The exact closed-form backward: gradients through the step agree too.
    g = [t.clone().requires_grad_() for t in grads]
    gg = [t.cuda().requires_grad_() for t in grads]
    out_cpu = mf.ops.adam_multi(g, mus, nus, params, **opts)
    out_gpu = mf.ops.adam_multi(gg, cuda(mus), cuda(nus), cuda(params), **opts)
    w = [torch.randn(s, dtype=dtype) for s in sizes]
    loss_cpu = sum((u * wi).sum() + (m * m).sum() for u, m, wi in zip(out_cpu[0], out_cpu[1], w))
    loss_gpu = sum((u * wi.cuda()).sum() + (m * m).sum()
                   for u, m, wi in zip(out_gpu[0], out_gpu[1], w))
    for a, b in zip(torch.autograd.grad(loss_cpu, g), torch.autograd.grad(loss_gpu, gg)):
        torch.testing.assert_close(b.cpu(), a, **tol)


@needs_gpu
@pytest.mark.skipif(GPU_REASON is None and not _has_cuda_kernel("metafuse::adam_multi_"),
                    reason="metafuse::adam_multi_ has no CUDA kernel in this build "
                           "(built without METAFUSE_WITH_CUDA_TORCH)")
@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_in_place_steps_on_cuda_equal_the_cpu_ops(dtype, weight_decay):
    # One pass on CUDA: the kernels add the update to the param and write the
    # states over themselves (Adam's kernel and the other optimizers' one).
    torch.manual_seed(1)
    sizes = [(1025,), (3, 7), (1,), (4097, 3)]

    def tensors(make):
        return [make(s, dtype=dtype) for s in sizes]

    grads, mus, params, nus = tensors(torch.randn), tensors(torch.randn), tensors(torch.randn), \
        tensors(torch.rand)
    on_gpu = lambda ts: [t.cuda() for t in ts]  # noqa: E731
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-14)
    cpu = [[t.clone() for t in ts] for ts in (mus, nus, params)]
    gpu = [on_gpu(ts) for ts in (mus, nus, params)]
    for count in (1, 2):
        opts = dict(count=count, lr=1e-2, eps=1e-3, weight_decay=weight_decay)
        mf.ops.adam_multi_(grads, *cpu, **opts)
        mf.ops.adam_multi_(on_gpu(grads), *gpu, **opts)
    for a, b in zip(cpu, gpu):
        for x, y in zip(a, b):
            torch.testing.assert_close(y.cpu(), x, **tol)
    buffers, sgd_params = [[t.clone() for t in mus], [t.clone() for t in params]]
    gpu_buffers, gpu_params = on_gpu(buffers), on_gpu(sgd_params)
    opts = dict(count=2, lr=1e-2, momentum=0.9, weight_decay=weight_decay)
    mf.ops.sgd_multi_(grads, buffers, sgd_params, **opts)
    mf.ops.sgd_multi_(on_gpu(grads), gpu_buffers, gpu_params, **opts)
    for x, y in zip(buffers + sgd_params, gpu_buffers + gpu_params):
        torch.testing.assert_close(y.cpu(), x, **tol)

"""metafuse.vmap: a per-task function compiled for the whole meta-batch as one
program. Every result is compared with the per-task loop run eagerly
(float64 to 1e-10; float32 against a float64 truth)."""

import warnings

import pytest
import torch

import metafuse as mf
from metafuse.compiler import CompilationFallbackWarning

from conv_tasks import ConvTasks, cnn_pooled

# The fused and the unfused compiled program, each (compiler/conftest.py).
pytestmark = pytest.mark.usefixtures("program")

F64 = torch.float64
TASKS = 4


def mlp(dtype=F64):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(1, 16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 1)).to(dtype)


def regression_problem(dtype=F64):
    """(params, mse loss of the MLP)."""
    net = mlp(dtype)

    def loss_fn(p, x, y):
        return torch.nn.functional.mse_loss(mf.functional_call(net, p, x), y)

    return params_of(net), loss_fn


def params_of(net):
    return {k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}


def regression_tasks(dtype=F64, shots=6):
    g = torch.Generator().manual_seed(1)
    x = torch.rand(TASKS, 2 * shots, 1, generator=g, dtype=F64) * 6 - 3
    y = torch.sin(x + torch.rand(TASKS, 1, 1, generator=g, dtype=F64))
    return tuple(t.to(dtype) for t in (x[:, :shots], y[:, :shots], x[:, shots:], y[:, shots:]))


def strict():
    """Any compilation fallback fails the test."""
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("error", CompilationFallbackWarning)
    return ctx


def meta_gradient(losses, params):
    return torch.autograd.grad(losses.sum(), list(params.values()))


def assert_all_close(a, b, rtol=1e-10, atol=1e-12):
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=rtol, atol=atol)


@pytest.mark.parametrize("optimizer", [lambda: mf.sgd(0.05),
                                       lambda: mf.adam(0.01, eps_root=1e-10)],
                         ids=["sgd", "adam"])
def test_adapt_inside_vmap_equals_the_per_task_loop(optimizer):
    params, loss_fn = regression_problem()

    adapt = mf.compile_inner_loop(loss_fn, optimizer(), steps=3)
    task_loss = mf.vmap(lambda p, xs, ys, xq, yq: loss_fn(adapt(p, xs, ys), xq, yq),
                        in_dims=(None, 0, 0, 0, 0))
    xs, ys, xq, yq = regression_tasks()
    ctx = strict()
    losses = task_loss(params, xs, ys, xq, yq)
    ctx.__exit__(None, None, None)
    assert losses.shape == (TASKS,)
    expected = torch.stack([loss_fn(adapt._eager(params, (xs[t], ys[t])), xq[t], yq[t])
                            for t in range(TASKS)])
    torch.testing.assert_close(losses, expected, rtol=1e-10, atol=1e-12)
    assert_all_close(meta_gradient(losses, params), meta_gradient(expected, params))
    assert task_loss.compile_count == 1
    task_loss(params, xs + 1, ys, xq, yq)
    assert task_loss.compile_count == 1  # same guard: the program is reused


@pytest.mark.parametrize("program", ["fused"], indirect=True)  # what fusion makes
def test_the_program_uses_batched_products():
    params, loss_fn = regression_problem()

    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.05), steps=2)
    fn = lambda p, xs, ys: loss_fn(adapt(p, xs, ys), xs, ys)  # noqa: E731
    xs, ys, _, _ = regression_tasks()
    batched = mf.vmap(fn, in_dims=(None, 0, 0)).program(params, xs, ys).dump()
    one_task = mf.compile(fn).program(params, xs[0], ys[0]).dump()
    # Every product of the meta-batch is one batched GEMM: as many GEMM
    # instructions as one task's program has, none left to the dispatcher.
    count = lambda text: text.count(" = gemm")  # noqa: E731
    assert count(one_task) > 0
    assert count(batched) == count(one_task)
    assert "aten::bmm(" not in batched


def test_user_loop_with_metafuse_grad():
    params, loss_fn = regression_problem()

    def task(p, xs, ys, xq, yq):
        tx = mf.sgd(0.1)
        state = tx.init(p)
        for _ in range(2):
            g = mf.grad(loss_fn(p, xs, ys), p)
            u, state = tx.update(g, state, params=p, inplace=False)
            p = mf.apply_updates(p, u, inplace=False)
        return loss_fn(p, xq, yq)

    xs, ys, xq, yq = regression_tasks()
    batched = mf.vmap(task, in_dims=(None, 0, 0, 0, 0))
    ctx = strict()
    losses = batched(params, xs, ys, xq, yq)
    ctx.__exit__(None, None, None)

    def eager_task(p, xs, ys, xq, yq):
        for _ in range(2):
            g = torch.autograd.grad(loss_fn(p, xs, ys), list(p.values()), create_graph=True)
            p = {k: v - 0.1 * gi for (k, v), gi in zip(p.items(), g)}
        return loss_fn(p, xq, yq)

    expected = torch.stack([eager_task(params, xs[t], ys[t], xq[t], yq[t])
                            for t in range(TASKS)])
    torch.testing.assert_close(losses, expected, rtol=1e-10, atol=1e-12)
    assert_all_close(meta_gradient(losses, params), meta_gradient(expected, params))


@pytest.mark.parametrize("program", ["fused"], indirect=True)  # what fusion makes
def test_conv_batchnorm_tasks_compile_as_one_program(monkeypatch):
    monkeypatch.setenv("METAFUSE_VMAP_STRATEGY", "batched")
    tasks = ConvTasks(cnn_pooled())
    ctx = strict()
    losses = tasks.losses()
    ctx.__exit__(None, None, None)
    tasks.check(losses)
    # Batched: the convolutions' derivatives are grouped over the tasks.
    report = tasks.fusion_report()
    assert report["forward"]["grouped_convolutions"] + report["backward"]["grouped_convolutions"] > 0


def test_adapt_batched_equals_adapt_per_task():
    params, loss_fn = regression_problem()

    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.05), steps=3)
    xs, ys, _, _ = regression_tasks()
    fast = adapt.batched(params, xs, ys)
    for t in range(TASKS):
        one = adapt(params, xs[t], ys[t])
        for k in params:
            assert fast[k].shape == (TASKS,) + params[k].shape
            torch.testing.assert_close(fast[k][t], one[k], rtol=1e-10, atol=1e-12)


def test_float32_against_a_float64_truth():
    results = {}
    for dt in (torch.float32, F64):
        params, loss_fn = regression_problem(dt)
        adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.05), steps=3)
        task_loss = mf.vmap(lambda p, xs, ys, xq, yq: loss_fn(adapt(p, xs, ys), xq, yq),
                            in_dims=(None, 0, 0, 0, 0))
        losses = task_loss(params, *regression_tasks(dt))
        results[dt] = [g.double() for g in meta_gradient(losses, params)]
    assert_all_close(results[torch.float32], results[F64], rtol=1e-4, atol=1e-5)


def test_chunks_equal_one_call():
    params, loss_fn = regression_problem()

    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.05), steps=2)
    fn = lambda p, xs, ys: loss_fn(adapt(p, xs, ys), xs, ys)  # noqa: E731
    xs, ys, _, _ = regression_tasks()
    whole = mf.vmap(fn, in_dims=(None, 0, 0))(params, xs, ys)
    chunked = mf.vmap(fn, in_dims=(None, 0, 0), chunk_size=3)(params, xs, ys)
    torch.testing.assert_close(chunked, whole, rtol=1e-12, atol=1e-14)


def test_chunked_meta_gradient_equals_one_call():
    # chunk_size runs each chunk again in the backward: the gradients of a
    # shared input (summed over chunks) and of a mapped one (concatenated),
    # weighted per task, equal the one call's; chunks of 3 + 1 tasks.
    params, loss_fn = regression_problem()
    adapt = mf.compile_inner_loop(loss_fn, mf.adam(0.01, eps_root=1e-10), steps=2)
    fn = lambda p, xs, ys, xq, yq: loss_fn(adapt(p, xs, ys), xq, yq)  # noqa: E731
    xs, ys, xq, yq = regression_tasks()
    xq = xq.clone().requires_grad_()
    weights = torch.arange(1.0, TASKS + 1, dtype=F64)
    inputs = list(params.values()) + [xq]
    grads = {}
    ctx = strict()
    for chunk_size in (None, 3):
        losses = mf.vmap(fn, in_dims=(None, 0, 0, 0, 0), chunk_size=chunk_size)(
            params, xs, ys, xq, yq)
        grads[chunk_size] = (losses.detach(), torch.autograd.grad((losses * weights).sum(),
                                                                  inputs))
    ctx.__exit__(None, None, None)
    torch.testing.assert_close(grads[3][0], grads[None][0], rtol=1e-12, atol=1e-14)
    assert_all_close(grads[3][1], grads[None][1])
    assert float(grads[3][1][-1].abs().sum()) > 0  # the mapped input got its gradient


def test_chunked_call_holds_one_chunk_of_saved_values():
    # Exact live-bytes accounting (the allocator meter of the memory
    # benchmarks): a meta-step over 12 tasks one chunk at a time peaks at a
    # fraction of the one call's, which holds every task's saved values.
    from metafuse._C import _compiler as core
    core.install_memory_meter()
    params, loss_fn = regression_problem()
    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.05), steps=5)
    fn = lambda p, xs, ys: loss_fn(adapt(p, xs, ys), xs, ys)  # noqa: E731
    g = torch.Generator().manual_seed(3)
    xs = torch.rand(12, 10, 1, generator=g, dtype=F64)
    ys = torch.sin(xs)

    def peak(chunk_size):
        batched = mf.vmap(fn, in_dims=(None, 0, 0), chunk_size=chunk_size)
        batched(params, xs, ys).sum().backward()  # compiles
        start = core.memory_stats()["live_bytes"]
        core.reset_peak_memory()
        batched(params, xs, ys).sum().backward()
        return core.memory_stats()["peak_bytes"] - start

    whole, one = peak(None), peak(1)
    assert one * 4 < whole, (one, whole)


def test_chunked_backward_replays_the_random_numbers_of_its_forward():
    # randomness='different': each chunk's second run, in the backward,
    # draws the masks its first run drew. Linear in w with w = 1, the
    # gradient's total equals the outputs' total only with the same masks.
    w = torch.ones(6, dtype=F64, requires_grad=True)
    x = torch.rand(5, 6, dtype=F64, generator=torch.Generator().manual_seed(0)) + 1
    fn = lambda w, x: (torch.nn.functional.dropout(x, 0.5) * w).sum()  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompilationFallbackWarning)  # bernoulli: eager
        out = mf.vmap(fn, in_dims=(None, 0), randomness="different", chunk_size=2)(w, x)
        grad, = torch.autograd.grad(out.sum(), [w])
    assert 0 < float(out.sum()) and not torch.allclose(out, 2 * x.sum(1))  # masks drop some
    torch.testing.assert_close(grad.sum(), out.sum(), rtol=1e-12, atol=0)


def test_chunked_meta_gradient_refuses_create_graph():
    params, loss_fn = regression_problem()
    fn = lambda p, xs, ys: loss_fn(p, xs, ys)  # noqa: E731
    xs, ys, _, _ = regression_tasks()
    losses = mf.vmap(fn, in_dims=(None, 0, 0), chunk_size=3)(params, xs, ys)
    with pytest.raises(RuntimeError, match="chunk_size"):
        torch.autograd.grad(losses.sum(), list(params.values()), create_graph=True)


def test_untraceable_function_falls_back_with_one_warning_and_same_result():
    w = torch.tensor([0.5, -1.0], dtype=F64, requires_grad=True)

    def task(w, x):
        if float(x.sum()) > 0:  # data-dependent: the compile cannot trust a trace
            return (w * x).sum()
        return (w * x).prod()

    x = torch.tensor([[1.0, 2.0], [-3.0, 1.0], [2.0, 2.0]], dtype=F64)
    batched = mf.vmap(task, in_dims=(None, 0))
    with pytest.warns(CompilationFallbackWarning) as record:
        out = batched(w, x)
    assert len(record) >= 1
    expected = torch.stack([task(w, x[t]) for t in range(3)])
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("kwargs, message", [
    (dict(in_dims=("a",)), "in_dims"),
    (dict(randomness="sometimes"), "randomness"),
    (dict(chunk_size=0), "chunk_size"),
    (dict(out_dims=1.5), "out_dims"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises((TypeError, ValueError), match=message):
        mf.vmap(lambda x: x, **kwargs)


def test_mismatched_task_counts_are_an_error():
    batched = mf.vmap(lambda a, b: a + b)
    with pytest.raises(ValueError, match="task count"):
        batched(torch.zeros(3, 2), torch.zeros(4, 2))
    with pytest.raises(ValueError, match="in_dims"):
        mf.vmap(lambda a, b: a + b, in_dims=(0,))(torch.zeros(3), torch.zeros(3))


def test_a_vmap_saves_and_loads_as_an_artifact(tmp_path):
    params, loss_fn = regression_problem()
    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.05), steps=2)
    batched = mf.vmap(lambda p, xs, ys, xq, yq: loss_fn(adapt(p, xs, ys), xq, yq),
                      in_dims=(None, 0, 0, 0, 0))
    tasks = regression_tasks()
    path = str(tmp_path / "batched.mfa")
    mf.aot.save(batched, path, params, *tasks)
    loaded = mf.aot.load(path)
    got, want = loaded(params, *tasks), batched(params, *tasks)
    assert torch.equal(got, want)
    assert_all_close(meta_gradient(got, params), meta_gradient(want, params), rtol=0, atol=0)


def test_two_threads_give_the_same_meta_gradient():
    """Regression: the batched GEMM once split its tasks across threads, and
    concurrent calls into Debian's serial OpenBLAS corrupt each other (wrong
    meta-gradients at 2 threads, differently on every call)."""
    params, loss_fn = regression_problem()
    adapt = mf.compile_inner_loop(loss_fn, mf.adam(0.01, eps_root=1e-10), steps=3)
    task_loss = mf.vmap(lambda p, xs, ys, xq, yq: loss_fn(adapt(p, xs, ys), xq, yq),
                        in_dims=(None, 0, 0, 0, 0))
    xs, ys, xq, yq = (torch.cat([t] * 6) for t in regression_tasks())  # 24 tasks
    expected = meta_gradient(torch.stack([
        loss_fn(adapt._eager(params, (xs[t], ys[t])), xq[t], yq[t]) for t in range(24)]), params)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for _ in range(4):
            assert_all_close(meta_gradient(task_loss(params, xs, ys, xq, yq), params), expected)
    finally:
        torch.set_num_threads(threads)


def test_strided_task_data_gives_the_contiguous_results_and_gradients():
    """Mapped task data that are slices of a larger batch (made contiguous
    once per call, so fused kernels do not copy them at every launch): the
    losses and the gradients to the parameters and to the data itself equal
    those of contiguous copies."""
    params, loss_fn = regression_problem()
    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.05), steps=2)
    task_loss = mf.vmap(lambda p, xs, ys, xq, yq: loss_fn(adapt(p, xs, ys), xq, yq),
                        in_dims=(None, 0, 0, 0, 0))
    strided = [t.detach().requires_grad_() for t in regression_tasks()]
    assert not strided[0].is_contiguous()
    dense = [t.detach().contiguous().requires_grad_() for t in strided]
    ctx = strict()
    got = task_loss(params, *strided)
    want = task_loss(params, *dense)
    ctx.__exit__(None, None, None)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    inputs = list(params.values())
    assert_all_close(torch.autograd.grad(got.sum(), inputs + strided),
                     torch.autograd.grad(want.sum(), inputs + dense), rtol=0, atol=0)

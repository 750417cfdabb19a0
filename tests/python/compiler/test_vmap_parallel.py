"""metafuse.vmap's "parallel" strategy (_parallel_chunks): one chunk of
tasks per thread, each chunk's batched program run on its own thread,
forward and backward, opt-in (METAFUSE_VMAP_STRATEGY=parallel). Every
result against the per-task loop (float64, 1e-10)."""

import pytest
import torch

import metafuse as mf
from metafuse.vmap.parallel_chunks import chunk_bounds

from test_vmap import assert_all_close, meta_gradient, regression_problem, regression_tasks

VARIABLE = "METAFUSE_VMAP_STRATEGY"


@pytest.fixture
def two_threads():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


def maml(steps=2):
    params, loss_fn = regression_problem()
    adapt = mf.compile_inner_loop(loss_fn, mf.adam(0.01, eps_root=1e-10), steps=steps)
    task_loss = mf.vmap(lambda p, xs, ys, xq, yq: loss_fn(adapt(p, xs, ys), xq, yq),
                        in_dims=(None, 0, 0, 0, 0))

    def per_task(p, xs, ys, xq, yq):
        return torch.stack([loss_fn(adapt._eager(p, (xs[t], ys[t])), xq[t], yq[t])
                            for t in range(xs.shape[0])])

    return params, task_loss, per_task


def test_chunk_bounds_cover_the_tasks_in_order():
    assert chunk_bounds(25, 2) == [(0, 13), (13, 25)]
    assert chunk_bounds(4, 3) == [(0, 2), (2, 3), (3, 4)]
    assert chunk_bounds(6, 6) == [(i, i + 1) for i in range(6)]


def test_forced_parallel_equals_the_per_task_loop(monkeypatch, two_threads):
    monkeypatch.setenv(VARIABLE, "parallel")
    params, task_loss, per_task = maml()
    xs, ys, xq, yq = (torch.cat([t, t + 0.5]) for t in regression_tasks())  # 8 tasks
    xs.requires_grad_()  # a mapped input with a gradient: chunks concatenated
    losses = task_loss(params, xs, ys, xq, yq)
    expected = per_task(params, xs, ys, xq, yq)
    torch.testing.assert_close(losses, expected, rtol=1e-10, atol=1e-12)
    leaves = [*params.values(), xs]
    got = torch.autograd.grad(losses.sum(), leaves)
    want = torch.autograd.grad(expected.sum(), leaves)
    assert_all_close(got, want)
    # Two chunks of 4 tasks: one program, compiled once, reused by both.
    assert task_loss.compile_count == 1
    assert task_loss.strategies() == []  # forced: nothing timed


def test_parallel_results_are_the_same_bits_every_call(monkeypatch, two_threads):
    monkeypatch.setenv(VARIABLE, "parallel")
    params, task_loss, _ = maml()
    tasks = tuple(torch.cat([t] * 2) for t in regression_tasks())  # 8 tasks
    first = meta_gradient(task_loss(params, *tasks), params)
    for _ in range(3):
        assert all(torch.equal(a, b)
                   for a, b in zip(first, meta_gradient(task_loss(params, *tasks), params)))


def test_parallel_without_grad_and_uneven_chunks(monkeypatch, two_threads):
    monkeypatch.setenv(VARIABLE, "parallel")
    params, task_loss, per_task = maml()
    tasks = tuple(torch.cat([t, t[:1]]) for t in regression_tasks())  # 5 tasks: 3 + 2
    with torch.no_grad():
        losses = task_loss(params, *tasks)
    assert not losses.requires_grad
    torch.testing.assert_close(losses, per_task(params, *tasks).detach(), rtol=1e-10,
                               atol=1e-12)
    assert task_loss.compile_count == 2  # one program per chunk size


def test_the_meta_gradient_of_a_parallel_call_is_first_order(monkeypatch, two_threads):
    monkeypatch.setenv(VARIABLE, "parallel")
    params, task_loss, _ = maml()
    losses = task_loss(params, *regression_tasks())
    with pytest.raises(RuntimeError, match="first-order .* METAFUSE_VMAP_STRATEGY=batched"):
        torch.autograd.grad(losses.sum(), list(params.values()), create_graph=True)


def test_parallel_chunks_are_opt_in(monkeypatch, two_threads):
    # Measured no faster than the one program on 2 cores (bench/vmap_parallel.py):
    # the cost check does not time them.
    monkeypatch.delenv(VARIABLE, raising=False)
    params, task_loss, _ = maml()
    task_loss(params, *(torch.cat([t] * 4) for t in regression_tasks()))  # 16 tasks
    assert task_loss.strategies() == [{"strategy": "batched",
                                       "reason": "no grouped convolution"}]
    assert task_loss.compile_count == 1

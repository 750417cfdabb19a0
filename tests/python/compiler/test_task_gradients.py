"""metafuse.vmap's task loop taking each task's gradient as the task runs
(_task_gradients): the same losses and gradients as the per-task loop
(float64, 1e-10) for any weighting of the tasks, mapped inputs included;
outputs that are not one scalar per task fall back to stacking."""

import pytest
import torch

import metafuse as mf

from test_vmap import assert_all_close, regression_problem, regression_tasks

# The fused and the unfused compiled program, each (compiler/conftest.py).
pytestmark = pytest.mark.usefixtures("program")

VARIABLE = "METAFUSE_VMAP_STRATEGY"


@pytest.fixture
def tasks_strategy(monkeypatch):
    monkeypatch.setenv(VARIABLE, "tasks")


def maml():
    params, loss_fn = regression_problem()
    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.05), steps=2)

    def task(p, xs, ys, xq, yq):
        return loss_fn(adapt(p, xs, ys), xq, yq)

    def per_task(p, xs, ys, xq, yq):
        return torch.stack([loss_fn(adapt._eager(p, (xs[t], ys[t])), xq[t], yq[t])
                            for t in range(xs.shape[0])])

    return params, task, per_task


def test_weighted_tasks_and_a_mapped_input_get_the_per_task_gradients(tasks_strategy):
    params, task, per_task = maml()
    batched = mf.vmap(task, in_dims=(None, 0, 0, 0, 0))
    xs, ys, xq, yq = regression_tasks()
    xs.requires_grad_()
    losses = batched(params, xs, ys, xq, yq)
    assert type(losses.grad_fn).__name__ == "_TasksBackward"  # gradients taken per task
    expected = per_task(params, xs, ys, xq, yq)
    torch.testing.assert_close(losses, expected, rtol=1e-10, atol=1e-12)
    weights = torch.tensor([0.5, -2.0, 3.0, 1.0], dtype=losses.dtype)
    leaves = [*params.values(), xs]
    assert_all_close(torch.autograd.grad((losses * weights).sum(), leaves),
                     torch.autograd.grad((expected * weights).sum(), leaves))


def test_outputs_that_are_not_one_scalar_are_stacked_as_before(tasks_strategy):
    params, task, per_task = maml()
    batched = mf.vmap(lambda p, xs, ys, xq, yq: task(p, xs, ys, xq, yq).reshape(1).expand(2),
                      in_dims=(None, 0, 0, 0, 0))
    data = regression_tasks()
    out = batched(params, *data)
    assert out.shape == (4, 2) and type(out.grad_fn).__name__ != "_TasksBackward"
    expected = per_task(params, *data)
    torch.testing.assert_close(out[:, 0], expected, rtol=1e-10, atol=1e-12)
    assert_all_close(torch.autograd.grad(out.sum(), list(params.values())),
                     torch.autograd.grad(2 * expected.sum(), list(params.values())))
    assert list(batched._scalar_tasks.values()) == [False]  # not tried again


def test_without_grad_nothing_is_differentiated(tasks_strategy):
    params, task, per_task = maml()
    batched = mf.vmap(task, in_dims=(None, 0, 0, 0, 0))
    with torch.no_grad():
        losses = batched(params, *regression_tasks())
    assert losses.grad_fn is None
    torch.testing.assert_close(losses, per_task(params, *regression_tasks()).detach(),
                               rtol=1e-10, atol=1e-12)


def test_create_graph_is_refused(tasks_strategy):
    params, task, _ = maml()
    losses = mf.vmap(task, in_dims=(None, 0, 0, 0, 0))(params, *regression_tasks())
    with pytest.raises(RuntimeError, match="not differentiable \\(create_graph=True\\)"):
        torch.autograd.grad(losses.sum(), list(params.values()), create_graph=True)

"""metafuse.vmap's cost check between the batched program and the two task
loops (the one-task program; the function as written): where the batched
program has grouped convolutions, the first call times all three and keeps
the fastest, and every choice gives the per-task loop's losses and
meta-gradients (float64, 1e-10); programs without grouped convolutions are
never timed; the batched program's fusion check waits until it is kept;
METAFUSE_VMAP_STRATEGY forces a strategy and a bad value is named."""

import pytest
import torch

import metafuse as mf

from conv_tasks import ConvTasks, cnn_pooled

VARIABLE = "METAFUSE_VMAP_STRATEGY"


def test_conv_tasks_are_timed_both_ways_and_the_choice_agrees(monkeypatch):
    monkeypatch.delenv(VARIABLE, raising=False)
    tasks = ConvTasks(cnn_pooled())
    first = tasks.losses()
    [record] = tasks.task_loss.strategies()
    assert record["reason"] == "grouped convolutions, timed", record
    assert record["batched_s"] > 0 and record["tasks_s"] > 0 and record["calls_s"] > 0
    assert record["tasks"] == 4
    loop, loop_s = (("calls", record["calls_s"])
                    if record["calls_s"] * 1.05 < record["tasks_s"]
                    else ("tasks", record["tasks_s"]))
    expected = loop if loop_s * 1.1 < record["batched_s"] else "batched"
    # More than one thread: the one-task programs in parallel chunks too.
    assert ("parallel_tasks_s" in record) == (torch.get_num_threads() > 1)
    parallel_s = record.get("parallel_tasks_s", float("inf"))
    if parallel_s * 1.1 < record["batched_s"] and parallel_s * 1.02 < loop_s:
        expected = "parallel-tasks"
    assert record["strategy"] == expected
    tasks.check(first)
    count = tasks.task_loss.compile_count
    tasks.check(tasks.losses())  # the choice is kept: nothing timed or compiled again
    assert tasks.task_loss.compile_count == count
    assert len(tasks.task_loss.strategies()) == 1


@pytest.fixture
def threads(request):
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


@pytest.mark.parametrize("threads", [1, 2], indirect=True)
def test_parallel_tasks_are_timed_only_with_more_than_one_thread(monkeypatch, threads):
    monkeypatch.delenv(VARIABLE, raising=False)
    tasks = ConvTasks(cnn_pooled())
    tasks.check(tasks.losses())
    [record] = tasks.task_loss.strategies()
    assert ("parallel_tasks_s" in record) == (threads > 1), record
    if threads > 1:
        assert record["parallel_tasks_s"] > 0


@pytest.mark.parametrize("threads", [2, 3], indirect=True)
def test_forced_parallel_tasks_agree_with_the_per_task_loop(monkeypatch, threads):
    monkeypatch.setenv(VARIABLE, "parallel-tasks")
    tasks = ConvTasks(cnn_pooled())  # 4 tasks: chunks of 2 + 2, or 2 + 1 + 1
    losses = tasks.losses()
    tasks.check(losses)
    batched = tasks.task_loss
    assert batched.strategies() == []  # forced: nothing measured
    # The one-task program, compiled once (on the calling thread), run by
    # every chunk; no program for all tasks.
    assert batched.compile_count == 1
    assert len(batched._task_programs) == 1 and len(batched._programs) == 0
    # The same bits on the next call.
    again = tasks.losses()
    assert torch.equal(again, losses)
    # Under no_grad the chunks run the forward-only program, another program
    # with its own timed fusion check (fused or generic, whichever measured
    # faster under this run's load), which may round differently (seen in
    # CI: 4.4e-16 apart): close, not equal.
    with torch.no_grad():
        torch.testing.assert_close(tasks.losses(), losses.detach(), rtol=1e-13, atol=0)


@pytest.mark.parametrize("strategy", ["batched", "tasks", "calls"])
def test_each_forced_strategy_agrees_with_the_per_task_loop(monkeypatch, strategy):
    monkeypatch.setenv(VARIABLE, strategy)
    tasks = ConvTasks(cnn_pooled())
    tasks.check(tasks.losses())
    batched = tasks.task_loss
    assert batched.strategies() == []  # forced: nothing measured
    # The program for all tasks, or the one for one task; the function as
    # written compiles nothing of its own.
    assert batched.compile_count == (0 if strategy == "calls" else 1)
    assert len(batched._task_programs) == (1 if strategy == "tasks" else 0)
    assert len(batched._programs) == (1 if strategy == "batched" else 0)


def test_programs_without_grouped_convolutions_are_not_timed(monkeypatch):
    monkeypatch.delenv(VARIABLE, raising=False)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(1, 8), torch.nn.Tanh(),
                              torch.nn.Linear(8, 1)).double()
    params = {k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}

    def loss_fn(p, x, y):
        return torch.nn.functional.mse_loss(mf.functional_call(net, p, x), y)

    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.1), steps=2)
    batched = mf.vmap(lambda p, x, y: loss_fn(adapt(p, x, y), x, y), in_dims=(None, 0, 0))
    x = torch.randn(5, 4, 1, dtype=torch.float64)
    batched(params, x, torch.sin(x))
    assert batched.strategies() == [{"strategy": "batched",
                                     "reason": "no grouped convolution"}]
    assert batched.compile_count == 1


def test_a_bad_setting_is_named(monkeypatch):
    monkeypatch.setenv(VARIABLE, "fastest")
    tasks = ConvTasks(cnn_pooled())
    with pytest.raises(ValueError, match="METAFUSE_VMAP_STRATEGY must be one of "
                                         "auto, batched, tasks, calls, parallel, parallel-tasks, "
                                         "got 'fastest'"):
        tasks.losses()


@pytest.mark.parametrize("margin, kept", [(1e-9, False), (1e9, True)],
                         ids=["a task loop wins", "the batched program wins"])
def test_the_batched_programs_fusion_check_waits_until_it_is_kept(monkeypatch, margin, kept):
    # Timed strategies run the fused batched program; its fusion cost check
    # (fused against unfused, several calls) runs only once the strategy
    # keeps it, and never while a task loop is kept. The margin decides the
    # choice: a task loop must be `margin` times faster to win.
    from metafuse.vmap import function
    monkeypatch.setattr(function, "TASKS_MARGIN", margin)
    monkeypatch.setenv("METAFUSE_FUSION_CHECK", "1")
    monkeypatch.delenv(VARIABLE, raising=False)
    tasks = ConvTasks(cnn_pooled())
    first = tasks.losses()
    [record] = tasks.task_loss.strategies()
    assert (record["strategy"] == "batched") == kept, record
    [batched] = tasks.task_loss._programs.values()
    assert len(batched.fusion_checks()) == (1 if kept else 0)
    tasks.check(first)
    monkeypatch.setenv(VARIABLE, "batched")  # the batched program runs now: checked first
    tasks.check(tasks.losses())
    assert len(batched.fusion_checks()) == 1


def test_without_grouped_convolutions_the_fusion_check_runs_on_the_first_call(monkeypatch):
    monkeypatch.setenv("METAFUSE_FUSION_CHECK", "1")
    monkeypatch.delenv(VARIABLE, raising=False)
    torch.manual_seed(0)
    w = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    f = mf.vmap(lambda w, x: torch.tanh(x @ w).sum(), in_dims=(None, 0))
    x = torch.randn(5, 7, 3, dtype=torch.float64)
    f(w, x).sum().backward()
    [batched] = f._programs.values()
    assert len(batched.fusion_checks()) == 1

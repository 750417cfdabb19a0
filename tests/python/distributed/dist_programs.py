"""Programs the distributed tests run inside local worlds (spawn or the
launcher). Module-level, so that workers import them by name. Float64:
the example's MAML task (functional, compiled or eager, and TorchOpt's
module-based idiom) on six sinusoid tasks."""

import copy
import os
import sys
import time
import warnings

import torch
import torch.nn.functional as F

import metafuse as mf
import metafuse.distributed as todist
from metafuse.compiler import CompilationFallbackWarning

# Every process that imports these programs (the test and each worker) runs
# the compiled task or fails: a silent fallback to eager would compute the
# same numbers, and a test of the compiled path would pass without it.
warnings.simplefilter("error", CompilationFallbackWarning)

# The example's compiled task (1-40-40-1 MLP, 5 inner SGD steps), run here in
# float64: its parameters and data come as inputs.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "examples"))
from distributed_maml import INNER_LR, INNER_STEPS, NET, query_loss  # noqa: E402
from distributed_maml import task_loss as compiled_task_loss  # noqa: E402

TASKS, SHOTS = 6, 5


def make_net():
    """The example's network as a float64 module (TorchOpt's idiom)."""
    return copy.deepcopy(NET).double()


def task_batch():
    g = torch.Generator().manual_seed(1)
    x = 4 * torch.rand(TASKS, 2 * SHOTS, 1, generator=g, dtype=torch.float64) - 2
    y = torch.sin(x + torch.rand(TASKS, 1, 1, generator=g, dtype=torch.float64))
    return x[:, :SHOTS], y[:, :SHOTS], x[:, SHOTS:], y[:, SHOTS:]


def eager_task_loss(params, xs, ys, xq, yq):
    """The example's task, eagerly (create_graph through the inner steps)."""
    for _ in range(INNER_STEPS):
        grads = torch.autograd.grad(query_loss(params, xs, ys), list(params.values()),
                                    create_graph=True)
        params = {k: p - INNER_LR * g for (k, p), g in zip(params.items(), grads)}
    return query_loss(params, xq, yq)


def meta_params():
    """The example's network's parameters, in float64."""
    return {k: v.detach().double().requires_grad_() for k, v in NET.named_parameters()}


def reference_meta_gradient(tasks=range(TASKS)):
    """The single-process meta-gradient of the mean query loss over
    ``tasks`` (divided by TASKS) and the per-task losses."""
    params = meta_params()
    batch = task_batch()
    losses = [eager_task_loss(params, *(b[i] for b in batch)) for i in tasks]
    grads = torch.autograd.grad(torch.stack(losses).sum() / TASKS, list(params.values()))
    return [g for g in grads], torch.stack(losses).detach()


def relative_error(got, want):
    return max(float((a - b).norm() / b.norm()) for a, b in zip(got, want))


# --- TorchOpt's distributed MAML idiom (its few-shot example's shape) --------

def _transpose_mean(results):
    losses, tags = tuple(zip(*results))
    return torch.mean(torch.stack(losses)), tags


@todist.parallelize(partitioner=todist.dim_partitioner(dim=0, exclusive=True, keepdim=False),
                    reducer=_transpose_mean)
def torchopt_inner_loop(net_rref, x_spt, y_spt, x_qry, y_qry, n_inner_iter):
    original_net = net_rref.to_here()
    net = mf.module_clone(original_net, by="reference", detach_buffers=True)
    inner_opt = mf.MetaSGD(net, lr=INNER_LR)
    for _ in range(n_inner_iter):
        inner_opt.step(F.mse_loss(net(x_spt), y_spt))
    return F.mse_loss(net(x_qry), y_qry), todist.get_world_rank()


def torchopt_idiom_gradient(rref_class):
    """The meta-gradient TorchOpt's idiom computes with ``rref_class(net)``
    (mean over tasks, so rescaled to the reference's 1/TASKS)."""
    net = make_net()
    net_rref = rref_class(net)
    with todist.autograd.context() as context_id:
        loss, ranks = torchopt_inner_loop(net_rref, *task_batch(), INNER_STEPS)
        todist.autograd.backward(context_id, loss)
    return [p.grad for p in net.parameters()], ranks


# --- small functions for the API -------------------------------------------

def rank_and_double(x):
    return x * 2, todist.get_world_rank()


def scaled_sum(x, scale=1.0):
    return (x * scale).sum()


def raise_in_task(params, xs, ys, xq, yq):
    """A task that fails on worker 1 only."""
    if todist.get_world_rank() == 1:
        raise ValueError("task failed on purpose")
    return eager_task_loss(params, xs, ys, xq, yq)


def die_now():
    os._exit(7)


def sleepy_task(params, xs, ys, xq, yq):
    """A task that hangs (for a bounded time) on worker 1."""
    if todist.get_world_rank() == 1:
        time.sleep(20)
    return eager_task_loss(params, xs, ys, xq, yq)


def remote_square(x):
    return x * x


def remote_tree_norm(rref_tree):
    """On a worker: fetch a tree of RRefs and return a differentiable value."""
    tree = mf.pytree.tree_to_here(rref_tree)
    return (tree["a"] * tree["b"]).sum()


# parallelize decorates at import, so that every worker has the published
# undecorated function (as in TorchOpt).
parallel_parts = todist.parallelize(reducer=list)(rank_and_double)
parallel_mean = todist.parallelize()(scaled_sum)
parallel_columns = todist.parallelize_async(
    partitioner=todist.dim_partitioner(dim=1, exclusive=True, keepdim=False),
    reducer=todist.sum_reducer)(scaled_sum)


def api_world():
    """World of 2; rank 0 checks everything and returns the observations."""
    if todist.get_world_rank() != 0:
        return None
    out = {}
    ref, ref_losses = reference_meta_gradient()
    # TorchOpt's idiom: metafuse's RRef, then torch's (the silent failure).
    got, ranks = torchopt_idiom_gradient(todist.rpc.RRef)
    out["idiom_ranks"] = list(ranks)
    out["idiom_metafuse_error"] = relative_error(got, ref)
    got, ranks = torchopt_idiom_gradient(torch.distributed.rpc.RRef)
    rank0_tasks = [i for i, r in enumerate(ranks) if r == 0]
    out["idiom_torch_error"] = relative_error(got, ref)
    out["idiom_torch_vs_rank0_half"] = relative_error(got, reference_meta_gradient(rank0_tasks)[0])
    # parallelize over a function: default partitioner and mean reducer.
    x = torch.arange(8, dtype=torch.float64).reshape(4, 2)
    out["parallelize_parts"] = [(r.tolist(), rank) for r, rank in parallel_parts(x)]
    out["parallelize_mean"] = parallel_mean(x, scale=2.0).tolist()
    out["parallelize_async_sum"] = float(parallel_columns(x).wait())
    out["remote_by_rank"] = todist.remote_sync_call(rank_and_double, args=(x,), partitioner=1)[0][1]
    out["remote_by_name"] = todist.remote_sync_call(rank_and_double, args=(x,),
                                                    partitioner="worker1")[0][1]
    # distributed autograd helpers: grad through a remote call.
    w = torch.tensor([1.5, -2.0], dtype=torch.float64, requires_grad=True)
    with todist.autograd.context() as ctx:
        y = torch.distributed.rpc.rpc_sync("worker1", remote_square, args=(w,)).sum()
        (g,) = todist.autograd.grad(ctx, y, w)
    out["dist_grad"] = g.tolist()
    # pytree.tree_as_rref / tree_to_here: gradients come back to the leaves.
    a = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([3.0, 5.0], dtype=torch.float64, requires_grad=True)
    with todist.autograd.context() as ctx:
        y = torch.distributed.rpc.rpc_sync(
            "worker1", remote_tree_norm, args=(mf.pytree.tree_as_rref({"a": a, "b": b}),))
        ga, gb = todist.autograd.grad(ctx, y, [a, b])
    out["tree_rref_grads"] = [ga.tolist(), gb.tolist()]
    # The scheduler: compiled task (artifact), 2 workers, then 1 remote, 1 local.
    params = meta_params()
    batch = task_batch()
    grads = {}
    for name, workers in (("both", None), ("remote only", [1]), ("local only", [0])):
        scheduler = todist.TaskScheduler(compiled_task_loss, workers=workers, reduction="mean")
        for p in params.values():
            p.grad = None
        losses = scheduler.task_losses(params, *batch)
        (losses.sum() / TASKS).backward()
        grads[name] = [p.grad.clone() for p in params.values()]
        out[f"scheduler_partition_{name}"] = scheduler.last_partition
        out[f"scheduler_losses_error_{name}"] = float((losses.detach() - ref_losses).abs().max())
    out["scheduler_payload_kind"] = scheduler._payload[1]
    out["scheduler_error"] = relative_error(grads["both"], ref)
    out["scheduler_same_bits"] = all(
        torch.equal(a, b) for other in ("remote only", "local only")
        for a, b in zip(grads["both"], grads[other]))
    # Several meta-steps: the second balances by measured cost.
    scheduler = todist.TaskScheduler(eager_task_loss)
    for _ in range(2):
        for p in params.values():
            p.grad = None
        scheduler(params, *batch).backward()
    out["scheduler_callable_error"] = relative_error([p.grad for p in params.values()], ref)
    out["scheduler_costs_measured"] = sorted(scheduler._costs) == [0, 1]
    # One more step from no history: each worker's cost is its compute
    # seconds per task; the remote one's latency what the caller waited for
    # besides, the caller's own 0.
    scheduler._costs, scheduler._latency = {}, {}
    scheduler(params, *batch)
    shares = {name: b - a for name, a, b in scheduler.last_partition}
    out["scheduler_costs_are_compute"] = all(
        abs(scheduler._costs[rank] * shares[name] - scheduler.last_seconds[name])
        <= 1e-12 * scheduler.last_seconds[name] for rank, name in ((0, "worker0"),
                                                                   (1, "worker1")))
    out["scheduler_latencies"] = (scheduler._latency[0], scheduler._latency[1] > 0)
    # An exception inside a worker's task.
    try:
        todist.TaskScheduler(raise_in_task)(params, *batch)
        out["raised"] = None
    except ValueError as exc:
        out["raised"] = str(exc)
    return out


def quick_start(value):
    """spawn's smallest use: every rank returns its rank and the argument."""
    return todist.get_world_rank(), value


def fail_on_rank_one():
    if todist.get_world_rank() == 1:
        raise KeyError("rank one fails")
    return "fine"

"""The scheduler's batched mode in a world of 2 (for
test_batched_scheduler.py; module-level, so that workers import it by
name): the example's task in float64 on dist_programs' six tasks."""

import warnings

import torch

import metafuse.distributed as todist
from metafuse.compiler import CompilationFallbackWarning
from metafuse.distributed import task_runner

from dist_programs import (TASKS, compiled_task_loss, eager_task_loss, meta_params,
                           reference_meta_gradient, relative_error, task_batch)


def loaded_programs(key):
    """On a worker: {size: id of the loaded program} under ``key``."""
    entry = task_runner._REGISTRY.get(key)
    return {} if entry is None else {k: id(v) for k, v in entry[1].items()}


def task_thread_names():
    """On a worker: the names of its threads that run tasks."""
    import threading
    return [t.name for t in threading.enumerate() if t.name.startswith("metafuse-tasks")]


def _meta_gradient(scheduler, params, batch, reduction_sum=False):
    for p in params.values():
        p.grad = None
    losses = scheduler.task_losses(params, *batch)
    (losses.sum() if reduction_sum else losses.sum() / TASKS).backward()
    return [p.grad.clone() for p in params.values()], losses.detach()


def registered_kind(key):
    """On a worker: what runs the task registered under ``key``."""
    entry = task_runner._REGISTRY[key]
    return [type(p).__name__ for p in entry[1].values()] if entry[0] == "batched" \
        else type(entry[1]).__name__


class ElsewhereCompiled(todist.TaskScheduler):
    """As if the caller's artifacts were compiled for a GPU the workers lack:
    each worker must compile the task's function on its own device."""

    def _placement(self, leaves):
        placed = super()._placement(leaves)
        return placed if leaves is None else ("cuda:0", placed[1])


def _reduced_meta_gradient(scheduler, params, batch):
    for p in params.values():
        p.grad = None
    scheduler(params, *batch).backward()
    return [p.grad.clone() for p in params.values()]


def batched_world():
    """World of 2; rank 0 checks and returns the observations."""
    if todist.get_world_rank() != 0:
        return None
    out = {}
    ref, ref_losses = reference_meta_gradient()
    params, batch = meta_params(), task_batch()
    grads, reduced = {}, {}
    partitions = {"equal": (None, None), "remote only": ([1], None), "local only": ([0], None),
                  "4 + 2": (None, {0: 1.0, 1: 2.0}), "1 + 5": (None, {0: 5.0, 1: 1.0})}
    for name, (workers, costs) in partitions.items():
        scheduler = todist.TaskScheduler(compiled_task_loss, workers=workers, batched=True,
                                         balance=costs is not None)
        if costs is not None:  # a measured imbalance decides the first split
            scheduler._costs = dict(costs)
        grads[name], losses = _meta_gradient(scheduler, params, batch)
        out[f"partition {name}"] = [b - a for _, a, b in scheduler.last_partition]
        out[f"error {name}"] = relative_error(grads[name], ref)
        out[f"losses error {name}"] = float((losses - ref_losses).abs().max())
        # __call__ with blocks of 4 tasks: [0, 4) and [4, 6), split or not.
        blocked = todist.TaskScheduler(compiled_task_loss, workers=workers, batched=True,
                                       balance=costs is not None, block=4)
        if costs is not None:
            blocked._costs = dict(costs)
        reduced[name] = _reduced_meta_gradient(blocked, params, batch)
        out[f"reduced error {name}"] = relative_error(reduced[name], ref)
        out[f"reduced rows {name}"] = sorted(blocked.last_gradient_rows.values())
    out["same bits"] = {name: all(torch.equal(a, b) for a, b in zip(grads["equal"], g))
                        for name, g in grads.items()}
    out["reduced same bits"] = {name: all(torch.equal(a, b)
                                          for a, b in zip(reduced["equal"], g))
                                for name, g in reduced.items()}
    # Per-task mode on the same tasks, for comparison.
    per_task = todist.TaskScheduler(compiled_task_loss)
    out["per-task error"] = relative_error(_meta_gradient(per_task, params, batch)[0], ref)
    blocked = todist.TaskScheduler(compiled_task_loss, block=4)
    out["per-task reduced error"] = relative_error(
        _reduced_meta_gradient(blocked, params, batch), ref)
    remote = todist.TaskScheduler(compiled_task_loss, workers=[1], block=4)
    out["per-task reduced same bits"] = all(
        torch.equal(a, b) for a, b in zip(_reduced_meta_gradient(blocked, params, batch),
                                          _reduced_meta_gradient(remote, params, batch)))
    # Three meta-steps with equal shares: programs shipped and loaded once
    # per worker.
    scheduler = todist.TaskScheduler(compiled_task_loss, batched=True, balance=False)
    seen = []
    for _ in range(3):
        step, _ = _meta_gradient(scheduler, params, batch, reduction_sum=True)
        seen.append(torch.distributed.rpc.rpc_sync(1, loaded_programs, args=(scheduler._key,)))
    out["loaded per step"] = seen
    out["task threads"] = torch.distributed.rpc.rpc_sync(1, task_thread_names)
    out["sum error"] = relative_error([g / TASKS for g in step], ref)
    out["shipped sizes"] = {w: sorted(s) for w, s in scheduler._sizes_sent.items()}
    # Workers on another device than the artifacts': they compile the
    # function by name (per task: metafuse.compile; batched: metafuse.vmap).
    for mode in ("per task", "batched"):
        scheduler = ElsewhereCompiled(compiled_task_loss, batched=mode == "batched")
        out[f"elsewhere error {mode}"] = relative_error(
            _reduced_meta_gradient(scheduler, params, batch), ref)
        out[f"elsewhere runs {mode}"] = torch.distributed.rpc.rpc_sync(
            1, registered_kind, args=(scheduler._key,))
    # worker_devices=False: shares run where the tensors arrive (the same
    # program, the same result on a CPU-only machine).
    for mode in ("per task", "batched"):
        scheduler = todist.TaskScheduler(compiled_task_loss, batched=mode == "batched",
                                         worker_devices=False)
        out[f"arrival device error {mode}"] = relative_error(
            _reduced_meta_gradient(scheduler, params, batch), ref)
    # A task that does not compile batched: a clear error, per-task mode still works.
    # The fallback warning on the way is expected here (dist_programs makes
    # it an error everywhere else).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompilationFallbackWarning)
        try:
            todist.TaskScheduler(eager_task_loss, batched=True)(params, *batch)
            out["uncompilable"] = None
        except ValueError as exc:
            out["uncompilable"] = str(exc)
    return out

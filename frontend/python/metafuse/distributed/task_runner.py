"""The worker side of TaskScheduler: tasks registered once per worker and
run on the parameters and task slice each meta-step sends.

Two kinds of registered task:

- per task: one callable (a program loaded from its AOT artifact, or an
  importable function) called once per task of the slice;
- batched: one program per slice size, a ``metafuse.vmap`` of the task over
  its parameters and data (each with a leading task dimension) saved with
  ``metafuse.aot`` and loaded here once; the slice runs as one call.

Both answer the same way: the tasks' losses, each task's gradient with
respect to every parameter leaf ([k, *shape]), and the seconds it took.
The caller sums the per-task gradients in task order, so the result does not
depend on which worker ran which task.
"""

import os
import tempfile
import threading
import time

import torch
import torch.distributed.rpc as rpc

from metafuse import aot
from metafuse import tree as _tree

__all__ = ["register", "register_batched", "forget", "run_tasks", "run_batched"]

# Registered tasks by key: ("task", callable, spec) or ("batched", {size: program}, spec).
_REGISTRY = {}
_LOCK = threading.Lock()


def _load_artifact(data):
    """A LoadedProgram from an artifact's bytes (through a private file)."""
    fd, path = tempfile.mkstemp(suffix=".mfa", prefix="metafuse-task-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return aot.load(path)
    finally:
        os.unlink(path)


def register(key, kind, payload, param_skeleton):
    """Keeps a per-task task under ``key`` for later meta-steps.

    Args:
        key: the scheduler's key.
        kind: "artifact" (``payload`` is an artifact's bytes) or "callable".
        payload: the bytes or the callable.
        param_skeleton: the parameters' pytree with ints for leaves.
    """
    task = _load_artifact(payload) if kind == "artifact" else payload
    with _LOCK:
        _REGISTRY[key] = ("task", task, _tree.structure(param_skeleton))
    return True


def register_batched(key, artifacts, param_skeleton, reset):
    """Adds batched programs under ``key``.

    Args:
        key: the scheduler's key.
        artifacts: {slice size: artifact bytes}.
        param_skeleton: the parameters' pytree with ints for leaves.
        reset: drop the programs ``key`` had (the shapes or dtypes changed).
    """
    spec = _tree.structure(param_skeleton)
    loaded = {size: _load_artifact(data) for size, data in artifacts.items()}
    with _LOCK:
        entry = _REGISTRY.get(key)
        programs = {} if reset or entry is None or entry[0] != "batched" else entry[1]
        _REGISTRY[key] = ("batched", {**programs, **loaded}, spec)
    return True


def forget(key):
    """Drops a registered task."""
    with _LOCK:
        _REGISTRY.pop(key, None)
    return True


def _entry(key, kind):
    # An RPC thread's OpenMP team size is OpenMP's initial one until torch
    # first sets it in that thread; this makes compiled kernels use
    # torch.get_num_threads() here too.
    torch.get_num_threads()
    entry = _REGISTRY.get(key)
    if entry is None or entry[0] != kind:
        raise RuntimeError(f"TaskScheduler: task {key} is not registered on "
                           f"{rpc.get_worker_info().name} (was the worker restarted?)")
    return entry


def _check_loss(loss, count=None):
    """A task returns a one-element tensor; a batched program, ``count``."""
    if isinstance(loss, torch.Tensor) and (
            loss.numel() == 1 if count is None else tuple(loss.shape) == (count,)):
        return
    got = (f"{type(loss).__name__}{tuple(loss.shape)}" if isinstance(loss, torch.Tensor)
           else type(loss).__name__)
    raise TypeError("TaskScheduler: a task must return a scalar tensor, got " + got +
                    ("" if count is None else f" from its batched program of {count} tasks"))


def run_tasks(key, param_leaves, batch, want_grads):
    """Every task of a slice, one call each, in order.

    Returns:
        (losses [k], per-leaf per-task gradients [k, *shape] or [], seconds).
    """
    start = time.perf_counter()
    _, task, spec = _entry(key, "task")
    count = batch[0].shape[0] if batch else 0
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(want_grads) for t in param_leaves]
        params = _tree.unflatten(spec, leaves)
        losses, grads = [], [[] for _ in leaves]
        for i in range(count):
            loss = task(params, *(b[i] for b in batch))
            _check_loss(loss)
            loss = loss.reshape(())
            if want_grads:
                found = torch.autograd.grad(loss, leaves, allow_unused=True)
                for slot, g, leaf in zip(grads, found, leaves):
                    slot.append(torch.zeros_like(leaf) if g is None else g)
            losses.append(loss.detach())
    stacked = [torch.stack(g) for g in grads] if want_grads and count else []
    empty = torch.empty(0, dtype=param_leaves[0].dtype) if param_leaves else torch.empty(0)
    return (torch.stack(losses) if losses else empty), stacked, time.perf_counter() - start


def run_batched(key, param_leaves, batch, want_grads):
    """A slice of k tasks as one call of its batched program: the parameters
    are given every task (a leading dimension of k), so the gradient of the
    summed losses with respect to them is each task's own gradient.

    Returns:
        As run_tasks.
    """
    start = time.perf_counter()
    _, programs, spec = _entry(key, "batched")
    count = batch[0].shape[0]
    program = programs.get(count)
    if program is None:
        raise RuntimeError(f"TaskScheduler: no batched program for {count} tasks on "
                           f"{rpc.get_worker_info().name} (it has {sorted(programs)})")
    with torch.enable_grad():
        leaves = [t.detach().unsqueeze(0).expand(count, *t.shape).contiguous()
                  .requires_grad_(want_grads) for t in param_leaves]
        losses = program(_tree.unflatten(spec, leaves), *batch)
        _check_loss(losses, count)
        grads = (list(torch.autograd.grad(losses.sum(), leaves, allow_unused=True))
                 if want_grads else [])
    grads = [torch.zeros_like(leaf) if g is None else g for g, leaf in zip(grads, leaves)]
    return losses.detach(), grads, time.perf_counter() - start

"""The scheduler for compiled tasks: a meta-batch partitioned over workers.

    @metafuse.compile
    def task_loss(params, x_support, y_support, x_query, y_query): ...

    scheduler = TaskScheduler(task_loss)          # on the caller, RPC started
    loss = scheduler(params, xs, ys, xq, yq)      # tasks along dim 0
    loss.backward()                               # the full meta-gradient

What travels: once per worker, the task (a ``metafuse.compile``d function
as its AOT artifact's bytes, loaded there without tracing or compiling, or
an importable function by reference) and the parameters' structure; then,
once per meta-step, one RPC per worker with the parameters' tensors and
that worker's contiguous slice of the task batch, answered by its tasks'
losses and per-task gradients. The caller's autograd node sums the
per-task gradients in task order (weighted by the incoming gradient), so
the meta-gradient is the same bits whatever the partition, and a plain
``loss.backward()`` reaches the meta-parameters: no distributed-autograd
context is needed.

Balancing: each worker's measured seconds per task (a running average)
sets its share of the next meta-batch. Failures: a worker that does not
answer within ``timeout`` or whose process is gone raises WorkerError
naming it; an exception inside a task arrives with the worker's
traceback. ``remove_worker`` lets the caller go on with the others.
"""

import itertools
import os
import tempfile
import threading
import time

import torch
import torch.distributed.rpc as rpc

from metafuse import aot
from metafuse import tree as _tree
from metafuse.compiler import CompiledFunction
from metafuse.distributed.config import default_timeout
from metafuse.distributed.errors import gather_futures

__all__ = ["TaskScheduler", "partition_sizes"]

# Worker side: registered tasks by key -> (callable, parameter TreeSpec).
_REGISTRY = {}
_REGISTRY_LOCK = threading.Lock()
_KEYS = itertools.count()


def _load_artifact(data):
    """A LoadedProgram from an artifact's bytes (through a private file)."""
    fd, path = tempfile.mkstemp(suffix=".mfa", prefix="metafuse-task-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return aot.load(path)
    finally:
        os.unlink(path)


def _register(key, kind, payload, param_skeleton):
    """Runs on a worker: keeps the task under ``key`` for later meta-steps."""
    task = _load_artifact(payload) if kind == "artifact" else payload
    spec = _tree.structure(param_skeleton)
    with _REGISTRY_LOCK:
        _REGISTRY[key] = (task, spec)
    return True


def _forget(key):
    """Runs on a worker: drops a registered task."""
    with _REGISTRY_LOCK:
        _REGISTRY.pop(key, None)
    return True


def _run_tasks(key, param_leaves, batch, want_grads):
    """Runs on a worker: every task of its slice, in order.

    Returns:
        (losses [k], per-leaf per-task gradients [k, *shape] or [], seconds).
    """
    start = time.perf_counter()
    try:
        task, spec = _REGISTRY[key]
    except KeyError:
        raise RuntimeError(f"TaskScheduler: task {key} is not registered on "
                           f"{rpc.get_worker_info().name} (was the worker restarted?)") from None
    count = batch[0].shape[0] if batch else 0
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(want_grads) for t in param_leaves]
        params = _tree.unflatten(spec, leaves)
        losses, grads = [], [[] for _ in leaves]
        for i in range(count):
            loss = task(params, *(b[i] for b in batch))
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise TypeError(f"TaskScheduler: a task must return a scalar tensor, got "
                                f"{type(loss).__name__}"
                                f"{tuple(loss.shape) if isinstance(loss, torch.Tensor) else ''}")
            if want_grads:
                found = torch.autograd.grad(loss.reshape(()), leaves, allow_unused=True)
                for slot, g, leaf in zip(grads, found, leaves):
                    slot.append(torch.zeros_like(leaf) if g is None else g)
            losses.append(loss.detach().reshape(()))
    stacked = [torch.stack(g) for g in grads] if want_grads and count else []
    empty = torch.empty(0, dtype=param_leaves[0].dtype) if param_leaves else torch.empty(0)
    return (torch.stack(losses) if losses else empty), stacked, time.perf_counter() - start


def partition_sizes(count, costs):
    """How many tasks each worker gets: shares inversely proportional to
    the seconds per task, rounded by largest remainder (ties to the
    earlier worker).

    Args:
        count: the number of tasks.
        costs: seconds per task of each worker (positive floats).

    Returns:
        A list of ints summing to ``count``.
    """
    speeds = [1.0 / c for c in costs]
    total = sum(speeds)
    exact = [count * s / total for s in speeds]
    sizes = [int(e) for e in exact]
    order = sorted(range(len(costs)), key=lambda i: (-(exact[i] - sizes[i]), i))
    for i in order[:count - sum(sizes)]:
        sizes[i] += 1
    return sizes


class _RemoteTasks(torch.autograd.Function):
    """One node for a meta-batch: forward = the losses from the workers,
    backward = the per-task gradients weighted by the incoming gradient."""

    @staticmethod
    def forward(ctx, scheduler, batch, *param_leaves):
        want = any(t.requires_grad for t in param_leaves) and scheduler._grad_mode
        losses, grads = scheduler._dispatch([t.detach() for t in param_leaves], batch, want)
        ctx.save_for_backward(*grads)
        ctx.leaf_count = len(param_leaves)
        return losses

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_losses):
        grads = ctx.saved_tensors
        if not grads:
            return (None, None) + (None,) * ctx.leaf_count
        weighted = [torch.tensordot(grad_losses.to(g.dtype), g, dims=1) for g in grads]
        return (None, None, *weighted)


class TaskScheduler:
    """Runs a meta-batch of tasks on RPC workers (see the module docstring).

    Args:
        task: ``task(params, *task_args) -> scalar loss``: a function made by
            ``metafuse.compile`` (shipped as its AOT artifact), or any
            function the workers can import (e.g. one that calls a module-
            level ``compile_inner_loop``; each worker compiles it once).
        workers: ranks or worker names (default: every worker of the world,
            this one included; its share runs here, without RPC).
        reduction: ``"mean"`` or ``"sum"`` of the task losses (``__call__``).
        timeout: seconds a worker may take per meta-step (default: 30, or
            METAFUSE_RPC_TIMEOUT).
        balance: re-split by measured cost after every meta-step (else equal
            shares).

    Raises:
        TypeError: ``task`` is not callable.
        ValueError: ``reduction`` is unknown, ``workers`` is empty, or RPC
            is not started.
    """

    def __init__(self, task, workers=None, *, reduction="mean", timeout=None, balance=True):
        if not callable(task):
            raise TypeError(f"TaskScheduler: `task` must be callable, got {task!r}")
        if reduction not in ("mean", "sum"):
            raise ValueError(f"TaskScheduler: `reduction` must be 'mean' or 'sum', got "
                             f"{reduction!r}")
        try:
            me = rpc.get_worker_info()
        except RuntimeError:
            raise ValueError("TaskScheduler: RPC is not started in this process; use "
                             "metafuse.distributed.auto_init_rpc, spawn, or the launcher") from None
        infos = (rpc._get_current_rpc_agent().get_worker_infos() if workers is None
                 else [rpc.get_worker_info(w) if isinstance(w, str) else self._info(w)
                       for w in workers])
        if not infos:
            raise ValueError("TaskScheduler: `workers` must name at least one worker")
        self.task, self.reduction, self.balance = task, reduction, balance
        self.timeout = default_timeout() if timeout is None else float(timeout)
        self._me = me
        self._workers = sorted({i.id: i for i in infos}.values(), key=lambda i: i.id)
        self._costs = {}
        self._registered = {}  # worker id -> (key, guard)
        self._key = f"{me.name}:{os.getpid()}:{next(_KEYS)}"
        self._payload = None
        self._grad_mode = True
        self.last_partition = []

    @staticmethod
    def _info(rank):
        for info in rpc._get_current_rpc_agent().get_worker_infos():
            if info.id == rank:
                return info
        raise ValueError(f"TaskScheduler: no worker has rank {rank}")

    @property
    def workers(self):
        """The names of the workers in use, by rank."""
        return [w.name for w in self._workers]

    def remove_worker(self, worker):
        """Stops sending tasks to a worker (after a WorkerError); the next
        meta-step is split over the others.

        Args:
            worker: its name or rank.

        Raises:
            ValueError: it is not in use, or it is the last one.
        """
        keep = [w for w in self._workers if worker not in (w.name, w.id)]
        if len(keep) == len(self._workers):
            raise ValueError(f"TaskScheduler.remove_worker: {worker!r} is not one of "
                             f"{self.workers}")
        if not keep:
            raise ValueError("TaskScheduler.remove_worker: it is the last worker; restart "
                             "the job instead")
        self._workers = keep
        self._costs = {k: v for k, v in self._costs.items() if any(w.id == k for w in keep)}

    def __call__(self, params, *task_batch):
        """The reduced (mean or sum) loss of the tasks; differentiable with
        respect to ``params``' tensors."""
        losses = self.task_losses(params, *task_batch)
        return losses.mean() if self.reduction == "mean" else losses.sum()

    def task_losses(self, params, *task_batch):
        """Each task's loss, in task order ([number of tasks]); differentiable
        with respect to ``params``' tensors.

        Args:
            params: a pytree of tensors (the meta-parameters).
            *task_batch: tensors whose dim 0 indexes the tasks.

        Raises:
            TypeError: an argument leaf is not a tensor.
            ValueError: the task batch is empty or its sizes disagree.
            WorkerError: a worker timed out or died (named).
        """
        leaves, spec = _tree.flatten(params)
        if not leaves or not all(isinstance(t, torch.Tensor) for t in leaves):
            raise TypeError("TaskScheduler: `params` must be a pytree of tensors")
        if not task_batch or not all(isinstance(b, torch.Tensor) for b in task_batch):
            raise TypeError("TaskScheduler: the task batch must be tensors with the tasks "
                            "along dim 0")
        sizes = {b.shape[0] for b in task_batch}
        if len(sizes) != 1 or 0 in sizes:
            raise ValueError(f"TaskScheduler: every task tensor needs the same non-zero "
                             f"dim 0 (the number of tasks), got {[b.shape[0] for b in task_batch]}")
        self._ensure_registered(params, leaves, task_batch)
        self._grad_mode = torch.is_grad_enabled()
        return _RemoteTasks.apply(self, task_batch, *leaves)

    def _guard(self, leaves, task_batch):
        return tuple((tuple(t.shape), t.dtype) for t in leaves) + tuple(
            (tuple(b.shape[1:]), b.dtype) for b in task_batch)

    def _ensure_registered(self, params, leaves, task_batch):
        guard = self._guard(leaves, task_batch)
        pending = [w for w in self._workers if self._registered.get(w.id, (None, None))[1] != guard]
        if not pending:
            return
        if self._payload is None or self._payload[0] != guard:
            self._payload = (guard, *self._make_payload(params, task_batch))
        _, kind, data = self._payload
        skeleton = _tree.unflatten(_tree.structure(params), list(range(len(leaves))))
        futures = [rpc.rpc_async(w.id, _register, args=(self._key, kind, data, skeleton),
                                 timeout=self.timeout) for w in pending]
        gather_futures(futures, [(w.name, w.id) for w in pending]).wait()
        for w in pending:
            self._registered[w.id] = (self._key, guard)

    def _make_payload(self, params, task_batch):
        """("artifact", bytes) for a compiled function, else ("callable", task)."""
        if not isinstance(self.task, CompiledFunction):
            return "callable", self.task
        example = (params, *(b[0] for b in task_batch))
        fd, path = tempfile.mkstemp(suffix=".mfa", prefix="metafuse-task-")
        os.close(fd)
        try:
            aot.save(self.task, path, *example)
            with open(path, "rb") as f:
                return "artifact", f.read()
        except RuntimeError:  # the call runs eagerly: nothing compiled to ship
            return "callable", self.task
        finally:
            os.unlink(path)

    def _split(self, count):
        if self.balance and all(w.id in self._costs for w in self._workers):
            sizes = partition_sizes(count, [self._costs[w.id] for w in self._workers])
        else:
            sizes = partition_sizes(count, [1.0] * len(self._workers))
        bounds, start = [], 0
        for w, size in zip(self._workers, sizes):
            bounds.append((w, start, start + size))
            start += size
        return bounds

    def _dispatch(self, param_leaves, task_batch, want_grads):
        count = task_batch[0].shape[0]
        parts = [p for p in self._split(count) if p[2] > p[1]]
        self.last_partition = [(w.name, a, b) for w, a, b in parts]
        slices = {w.id: [t[a:b].contiguous() for t in task_batch] for w, a, b in parts}
        remote = [p for p in parts if p[0].id != self._me.id]
        futures = [rpc.rpc_async(w.id, _run_tasks,
                                 args=(self._key, param_leaves, slices[w.id], want_grads),
                                 timeout=self.timeout) for w, _, _ in remote]
        gathered = gather_futures(futures, [(w.name, w.id) for w, _, _ in remote])
        results = {}
        local = [p for p in parts if p[0].id == self._me.id]
        for w, _, _ in local:  # this worker's share runs here while the others work
            results[w.id] = _run_tasks(self._key, param_leaves, slices[w.id], want_grads)
        for (w, _, _), value in zip(remote, gathered.wait()):
            results[w.id] = value
        for w, a, b in parts:
            seconds = results[w.id][2] / (b - a)
            old = self._costs.get(w.id)
            self._costs[w.id] = seconds if old is None else 0.5 * old + 0.5 * seconds
        losses = torch.cat([results[w.id][0] for w, _, _ in parts])
        grads = ([torch.cat([results[w.id][1][i] for w, _, _ in parts])
                  for i in range(len(param_leaves))] if want_grads else [])
        return losses, grads

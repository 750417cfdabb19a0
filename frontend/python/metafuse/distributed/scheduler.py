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
losses and gradients. ``task_losses`` gets per-task gradients and its
autograd node weights them by the incoming gradient; ``__call__`` (a mean
or sum, every task weighted alike) gets block sums instead: the meta-batch
is cut into fixed blocks of tasks (``block`` tasks each; default a 32nd of
the meta-batch) and a worker answers with one row per block it holds whole,
so 200 of 400 tasks' gradients travel as 20 to 23 rows. Either way every sum is
taken in an order fixed by the task indices alone, so the meta-gradient is
the same bits whatever the partition, and a plain ``loss.backward()``
reaches the meta-parameters: no distributed-autograd context is needed.

Batched mode (``batched=True``): each worker's share runs as ONE program,
the task ``metafuse.vmap``ped over its parameters and data, compiled here
for that share's size, shipped as its AOT artifact once per worker and
size, and loaded there once; the parameters get a task dimension on the
worker, so the program's gradient is per task and the caller's sum order is
the same as in per-task mode.

Balancing: two running averages per worker set the next meta-batch's
shares (``partition_sizes``): its compute seconds per task, measured where
it ran, and its latency, what the caller waits for besides that compute
(from sending the request to holding the answer: RPC, transfers, queue; 0
for the caller's own share). Each worker then gets as many tasks as make
all of them finish together. In batched mode, where a new share size is a
new program to compile and ship (about a second here), shares move in
whole gradient blocks, only when the predicted step is 10% shorter
(``sticky_sizes``), and a program's first run is never measured; sizes
already shipped cost nothing to return to. Failures: a worker that does not
answer within ``timeout`` or whose process is gone raises WorkerError
naming it; an exception inside a task arrives with the worker's
traceback. ``remove_worker`` lets the caller go on with the others.
"""

import itertools
import os
import sys
import time

import torch
import torch.distributed.rpc as rpc

from metafuse import tree as _tree
from metafuse.compile.compiled import kind_of, uncompiled
from metafuse.vmap.function import vmap
from metafuse.distributed import task_runner
from metafuse.distributed.collective import CollectiveScheduler
from metafuse.distributed.balance import partition_sizes, sticky_sizes
from metafuse.distributed.config import default_timeout
from metafuse.distributed.errors import gather_futures
from metafuse.distributed.meta_batch import (MetaBatchScheduler, _artifact_bytes,
                                             _assemble_blocks, _skeleton)

__all__ = ["TaskScheduler", "MetaBatchScheduler", "partition_sizes", "sticky_sizes"]

_KEYS = itertools.count()


def _backend(backend):
    """"rpc" or "collective" for TaskScheduler's ``backend`` argument (None:
    collectives where torch.distributed's default group is initialised)."""
    if backend is None:
        import torch.distributed as dist
        return "collective" if dist.is_available() and dist.is_initialized() else "rpc"
    if backend not in ("rpc", "collective"):
        raise ValueError(f"TaskScheduler: `backend` must be None, 'rpc' or 'collective', "
                         f"got {backend!r}")
    return backend


class TaskScheduler(MetaBatchScheduler):
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
        balance: re-split by measured cost and latency after every
            meta-step (default True; False: equal shares). Batched, shares
            move in whole gradient blocks and only for a 10% shorter
            predicted step.
        batched: run each worker's share as one batched program (a
            ``metafuse.vmap`` of the task, see the module docstring); the
            task must compile with ``metafuse.compile`` (a plain function or
            a ``metafuse.compile`` result), or the first call raises.
        worker_devices: run each worker's share on its own device
            (``worker_device()``: ``cuda:LOCAL_RANK`` where the worker has
            GPUs, else its CPU; default True); False: where the tensors
            arrive (the CPU for a remote worker). An artifact compiled here
            for another device is not used there: the worker compiles the
            task's function itself (it must be importable by name).
        block: tasks per gradient block of ``__call__`` (a positive int;
            default: a 32nd of the meta-batch, rounded up). Any value gives
            the same meta-gradient whatever the partition; larger blocks,
            smaller answers.

    Attributes:
        last_partition: [(worker name, first task, end)] of the last step.
        last_seconds: {worker name: seconds its share took} in the last
            step, measured where it ran (RPC and waiting excluded).
        last_gradient_rows: {worker name: gradient rows it sent} in the
            last step: its task count (per leaf) for ``task_losses``; for
            ``__call__`` one flat row (all leaves) per block it held whole
            and one per task of a block it shared.

    Raises:
        TypeError: ``task`` is not callable.
        ValueError: ``reduction`` is unknown, ``workers`` is empty, or RPC
            is not started.
    """

    def __new__(cls, task=None, workers=None, *, backend=None, **options):
        if cls is TaskScheduler and _backend(backend) == "collective":
            if workers is not None:
                raise ValueError("TaskScheduler: `workers` is for the RPC back end; with "
                                 "torch.distributed collectives every rank of `group` "
                                 "takes tasks (pass group=, or backend='rpc')")
            return CollectiveScheduler(task, **options)
        return super().__new__(cls)

    def __init__(self, task, workers=None, *, backend=None, reduction="mean", timeout=None,
                 balance=None, batched=False, block=None, worker_devices=True):
        del backend  # chosen in __new__
        self._init_common(task, reduction, balance, batched, block)
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
        self.worker_devices = bool(worker_devices)
        self.timeout = default_timeout() if timeout is None else float(timeout)
        self._me = me
        self._workers = sorted({i.id: i for i in infos}.values(), key=lambda i: i.id)
        self._registered = {}  # worker id -> (key, guard)
        self._key = f"{me.name}:{os.getpid()}:{next(_KEYS)}"
        self._payload = None
        self._batched_fn = None  # batched mode: the vmap of the task
        self._artifacts = {}  # batched mode: share size -> artifact bytes (this guard)
        self._sizes_sent = {}  # batched mode: worker id -> sizes it has loaded

    @staticmethod
    def _info(rank):
        for info in rpc._get_current_rpc_agent().get_worker_infos():
            if info.id == rank:
                return info
        raise ValueError(f"TaskScheduler: no worker has rank {rank}")

    @property
    def _costs(self):  # worker id -> its compute seconds per task (running average)
        return self._balancer.costs

    @_costs.setter
    def _costs(self, value):
        self._balancer.costs = value

    @property
    def _latency(self):  # worker id -> seconds it adds besides its tasks (RPC; 0 here)
        return self._balancer.latency

    @_latency.setter
    def _latency(self, value):
        self._balancer.latency = value

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
        self._balancer.keep({w.id for w in keep})

    def _ensure_registered(self, params, leaves, task_batch):
        guard = self._guard(leaves, task_batch)
        pending = [w for w in self._workers if self._registered.get(w.id, (None, None))[1] != guard]
        if not pending:
            return
        if self.batched:  # programs per share size, shipped when a size is first used
            if self._payload is None or self._payload[0] != guard:
                self._payload = (guard, "batched", None)
                self._artifacts, self._balancer.sizes = {}, None
            for w in pending:
                self._registered[w.id] = (self._key, guard)
                self._sizes_sent[w.id] = set()
                self._balancer.new_programs(w.id)
            return
        if self._payload is None or self._payload[0] != guard:
            self._payload = (guard, *self._make_payload(params, task_batch))
        _, kind, data = self._payload
        placement = self._placement(leaves if kind == "artifact" else None)
        futures = [rpc.rpc_async(w.id, task_runner.register,
                                 args=(self._key, kind, data, _skeleton(params), placement),
                                 timeout=self.timeout) for w in pending]
        gather_futures(futures, [(w.name, w.id) for w in pending]).wait()
        for w in pending:
            self._registered[w.id] = (self._key, guard)

    def _placement(self, leaves):
        """What a worker needs to run on its own device (task_runner._placed):
        None without ``worker_devices``, else (the device an artifact was
        compiled for, or None; the task function's (module, name) if it
        can be imported by name there)."""
        if not self.worker_devices:
            return None
        function = uncompiled(self.task)
        module = sys.modules.get(getattr(function, "__module__", None) or "")
        name = getattr(function, "__qualname__", "<")
        found = module
        for part in name.split("."):
            found = getattr(found, part, None)
        importable = found is self.task or found is function
        return (None if leaves is None else str(leaves[0].device),
                (module.__name__, name) if importable else None)

    def _make_payload(self, params, task_batch):
        """("artifact", bytes) for a compiled function, else ("callable", task)."""
        if kind_of(self.task) != "function":
            return "callable", self.task
        try:
            return "artifact", _artifact_bytes(self.task, params, *(b[0] for b in task_batch))
        except RuntimeError:  # the call runs eagerly: nothing compiled to ship
            return "callable", self.task

    def _ship_batched(self, param_leaves, task_batch, parts):
        """Batched mode: every worker gets the programs for the share sizes
        it lacks (compiled here once per size), in one RPC per worker."""
        missing = {}
        for w, a, b in parts:
            if b - a not in self._sizes_sent[w.id]:
                missing.setdefault(w.id, (w, []))[1].append(b - a)
        if not missing:
            return
        if self._batched_fn is None:  # the per-task Python function, vmapped
            self._batched_fn = vmap(uncompiled(self.task))
        spec = self._spec
        for size in sorted({k for _, sizes in missing.values() for k in sizes}):
            if size not in self._artifacts:
                expanded = [t.detach().unsqueeze(0).expand(size, *t.shape).contiguous()
                            .requires_grad_() for t in param_leaves]
                try:
                    self._artifacts[size] = _artifact_bytes(
                        self._batched_fn, _tree.unflatten(spec, expanded),
                        *(b[:size].contiguous() for b in task_batch))
                except RuntimeError as exc:
                    raise ValueError(f"TaskScheduler(batched=True): the task cannot be "
                                     f"compiled as one program for {size} tasks ({exc}); "
                                     "use batched=False") from None
        skeleton = _tree.unflatten(spec, list(range(len(param_leaves))))
        targets = list(missing.values())
        placement = self._placement(param_leaves)
        futures = [rpc.rpc_async(w.id, task_runner.register_batched,
                                 args=(self._key, {k: self._artifacts[k] for k in sizes},
                                       skeleton, not self._sizes_sent[w.id], placement),
                                 timeout=self.timeout)
                   for w, sizes in targets]
        gather_futures(futures, [(w.name, w.id) for w, _ in targets]).wait()
        for w, sizes in targets:
            self._sizes_sent[w.id].update(sizes)

    def _split(self, count):
        sizes = self._balancer.split(count, [w.id for w in self._workers],
                                     self._block_size(count))
        bounds, start = [], 0
        for w, size in zip(self._workers, sizes):
            bounds.append((w, start, start + size))
            start += size
        return bounds

    def _dispatch(self, param_leaves, task_batch, want_grads, block=None):
        """Runs the meta-batch; (losses, per-task gradients per leaf), or
        with ``block`` (losses, each leaf's total gradient)."""
        count = task_batch[0].shape[0]
        parts = [p for p in self._split(count) if p[2] > p[1]]
        self.last_partition = [(w.name, a, b) for w, a, b in parts]
        run = task_runner.run_batched if self.batched else task_runner.run_tasks
        if self.batched:
            self._ship_batched(param_leaves, task_batch, parts)
        remote = [p for p in parts if p[0].id != self._me.id]
        # Over RPC tensors travel on the CPU (no device maps); the caller's
        # own share keeps its tensors where they are.
        slices = {w.id: [(t[a:b] if w.id == self._me.id else t[a:b].cpu()).contiguous()
                         for t in task_batch] for w, a, b in parts}
        shipped_leaves = [t.cpu() for t in param_leaves]
        blocks = {w.id: None if block is None else (a, block, count) for w, a, _ in parts}
        waited = {}  # worker id -> seconds from its request to its answer
        futures = []
        for w, _, _ in remote:
            sent_at = time.perf_counter()
            future = rpc.rpc_async(w.id, run, args=(self._key, shipped_leaves, slices[w.id],
                                                    want_grads, blocks[w.id]),
                                   timeout=self.timeout)
            future.add_done_callback(
                lambda _, i=w.id, t=sent_at: waited.setdefault(i, time.perf_counter() - t))
            futures.append(future)
        gathered = gather_futures(futures, [(w.name, w.id) for w, _, _ in remote])
        results = {}
        local = [p for p in parts if p[0].id == self._me.id]
        for w, _, _ in local:  # this worker's share runs here while the others work
            results[w.id] = run(self._key, param_leaves, slices[w.id], want_grads, blocks[w.id])
        home = param_leaves[0].device
        for (w, _, _), (losses, grads, seconds) in zip(remote, gathered.wait()):
            results[w.id] = losses.to(home), [g.to(home) for g in grads], seconds
        self.last_seconds = {w.name: results[w.id][2] for w, _, _ in parts}
        for w, a, b in parts:
            compute = results[w.id][2]
            self._balancer.record(w.id, b - a, compute, waited.get(w.id, compute) - compute)
        self.last_gradient_rows = {w.name: (results[w.id][1][0].shape[0] if want_grads else 0)
                                   for w, _, _ in parts}
        losses = torch.cat([results[w.id][0] for w, _, _ in parts])
        if not want_grads:
            return losses, []
        if block is not None:  # one flat row per block: the leaves concatenated
            total = _assemble_blocks(torch.cat([results[w.id][1][0] for w, _, _ in parts]),
                                     parts, block, count)
            sizes = [t.numel() for t in param_leaves]
            return losses, [g.view(t.shape).to(t.dtype)
                            for g, t in zip(total.split(sizes), param_leaves)]
        grads = [torch.cat([results[w.id][1][i] for w, _, _ in parts])
                 for i in range(len(param_leaves))]
        return losses, grads

"""The worker side of TaskScheduler: tasks registered once per worker and
run on the parameters and task slice each meta-step sends.

Two kinds of registered task:

- per task: one callable (a program loaded from its AOT artifact, or an
  importable function) called once per task of the slice;
- batched: one program per slice size, a ``metafuse.vmap`` of the task over
  its parameters and data (each with a leading task dimension) saved with
  ``metafuse.aot`` and loaded here once; the slice runs as one call.

Both answer the same way: the tasks' losses, gradient rows for every
parameter leaf, and the seconds it took. The rows are each task's gradient
([k, *shape]) when the caller weights tasks itself (``task_losses``); when
it only reduces them (``__call__``) they are block sums (``blocks``): the
meta-batch is cut into fixed blocks of tasks, numbered from the batch's
first task, and a worker sends one row per block it holds whole and one row
per task of a block it shares with a neighbour. Every block sum is the same
pairwise sum of that block's task rows wherever it is taken
(``block_sums``), so the caller's total is the same bits whatever the
partition, and a share of 200 of 400 tasks answers with 20 to 23 rows
instead of 200.

Where the work runs: on one long-lived thread per process (the main thread
when called there), never on the RPC thread that received the request, and
with glibc told to keep freed memory. Measured on a worker (batched program
of 200 sinusoid tasks, 15 ms on a warm main thread): a fresh thread's first
call took 220-340 ms and later calls on it 15-150 ms, because every thread
gets its own malloc arena, which starts empty and gives its freed top back
to the kernel after each call, so the next call page-faults its buffers in
again. TensorPipe hands each request to any of its 16 RPC threads, so every
meta-step paid that: the remote share ran 4-7x slower than the same share
on the caller.
"""

import concurrent.futures
import ctypes
import importlib
import os
import queue
import tempfile
import threading
import time

import torch
import torch.distributed.rpc as rpc

from metafuse import aot
from metafuse import tree as _tree

__all__ = ["register", "register_batched", "register_local", "load_artifact", "forget",
           "run_tasks", "run_batched", "block_segments", "block_row_count",
           "pairwise_rows_sum", "block_sums"]

# Registered tasks by key: ("task", callable, spec, device) or
# ("batched", {size: program}, spec, device); device None: where tensors arrive.
_REGISTRY = {}
_ANY_SIZE = "any"  # batched: one metafuse.vmap for every slice size
_LOCK = threading.Lock()
_TASK_THREAD = []  # the queue of the process's one task thread, made on first use
_TASK_THREAD_NAME = "metafuse-tasks"

# glibc's mallopt parameters: freed memory stays with the process (up to
# the trim threshold), and blocks up to 32 MiB (glibc's largest allowed
# mmap threshold) come from the arena instead of fresh mmaps.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_KEEP_BYTES, _ARENA_BLOCK_BYTES = 1 << 30, 32 << 20


def _keep_freed_memory():
    """Tells glibc not to hand freed memory back to the kernel after every
    meta-step (see the module docstring); METAFUSE_KEEP_FREED_MEMORY=0
    leaves the allocator alone. Does nothing without glibc."""
    if os.environ.get("METAFUSE_KEEP_FREED_MEMORY", "1") == "0":
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_TRIM_THRESHOLD, _KEEP_BYTES)
        libc.mallopt(_M_MMAP_THRESHOLD, _ARENA_BLOCK_BYTES)
    except (OSError, AttributeError):
        pass


def _serve(calls):
    while True:
        future, fn, args = calls.get()
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the RPC thread
            future.set_exception(exc)


def _task_queue():
    """The queue of the process's task thread, started on first use; None
    where no thread can start (Python 3.12+ at interpreter shutdown, when a
    launched worker serves RPCs from atexit; a ThreadPoolExecutor cannot
    start there even on 3.11)."""
    with _LOCK:
        if not _TASK_THREAD:
            _keep_freed_memory()
            calls = queue.SimpleQueue()
            try:
                threading.Thread(target=_serve, args=(calls,), name=_TASK_THREAD_NAME,
                                 daemon=True).start()
            except RuntimeError:
                calls = None
            _TASK_THREAD.append(calls)
        return _TASK_THREAD[0]


def _on_task_thread(fn, *args):
    """``fn(*args)`` on the main thread if called there, else on the
    process's one task thread (warm across meta-steps); in place on the
    task thread itself (a task that runs a scheduler must not wait on its
    own queue)."""
    here = threading.current_thread()
    calls = (None if here is threading.main_thread() or here.name == _TASK_THREAD_NAME
             else _task_queue())
    if calls is None:
        return fn(*args)
    future = concurrent.futures.Future()
    calls.put((future, fn, args))
    return future.result()


def load_artifact(data):
    """A LoadedProgram from an artifact's bytes (through a private file)."""
    fd, path = tempfile.mkstemp(suffix=".mfa", prefix="metafuse-task-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return aot.load(path)
    finally:
        os.unlink(path)


def _placed(placement):
    """Where this worker runs a registered task, and whether an artifact
    compiled on the caller fits it.

    Args:
        placement: None: where the tensors arrive, the artifact as it is.
            Else (the device the caller compiled the artifact for, as a
            string, or None for no artifact; the task function's (module,
            name) or None): on this worker's device
            (``world.worker_device()``: its GPU where it has one).

    Returns:
        (device or None, the function to compile here instead of the
        artifact, or None when the artifact fits).

    Raises:
        RuntimeError: the artifact does not fit and there is no function.
    """
    if placement is None:
        return None, None
    from metafuse.distributed.world import worker_device
    device = worker_device()
    compiled_for, function = placement
    if compiled_for is None or torch.device(compiled_for) == device:
        return device, None
    if function is None:  # (module, name) of the task's function, see the scheduler
        raise RuntimeError(f"TaskScheduler: the task was compiled for {compiled_for} and "
                           f"{_worker_name()} runs on {device}; pass a "
                           "module-level function (or its metafuse.compile) so that the "
                           "worker can compile it there")
    return device, _import_function(*function)


def _worker_name():
    try:
        return rpc.get_worker_info().name
    except RuntimeError:  # RPC not started: a process alone
        return "this process"


def _import_function(module, name):
    """A task's Python function by name (a ``metafuse.compile`` result's
    own function)."""
    from metafuse.compile.compiled import uncompiled
    found = importlib.import_module(module)
    for part in name.split("."):
        found = getattr(found, part)
    return uncompiled(found)


def register(key, kind, payload, param_skeleton, placement=None):
    """Keeps a per-task task under ``key`` for later meta-steps.

    Args:
        key: the scheduler's key.
        kind: "artifact" (``payload`` is an artifact's bytes) or "callable".
        payload: the bytes or the callable.
        param_skeleton: the parameters' pytree with ints for leaves.
        placement: see ``_placed`` (for a callable, the device it runs on).
    """
    # (A callable's placement names no artifact: it runs where it is moved.)
    device, function = _placed(placement)
    if function is not None:
        from metafuse.compile.function import compile as compile_task
        task = compile_task(function)
    else:
        task = load_artifact(payload) if kind == "artifact" else payload
    with _LOCK:
        _REGISTRY[key] = ("task", task, _tree.structure(param_skeleton), device)
    return True


def register_batched(key, artifacts, param_skeleton, reset, placement=None):
    """Adds batched programs under ``key``.

    Args:
        key: the scheduler's key.
        artifacts: {slice size: artifact bytes}.
        param_skeleton: the parameters' pytree with ints for leaves.
        reset: drop the programs ``key`` had (the shapes or dtypes changed).
        placement: see ``_placed``; where the artifacts were compiled for
            another device, the task's ``metafuse.vmap`` is made here once
            and serves every size (compiled here per size on first use).
    """
    spec = _tree.structure(param_skeleton)
    device, function = _placed(placement)
    if function is not None:
        from metafuse.vmap.function import vmap
        loaded = {_ANY_SIZE: vmap(function)}
    else:
        loaded = {size: load_artifact(data) for size, data in artifacts.items()}
    with _LOCK:
        entry = _REGISTRY.get(key)
        programs = {} if reset or entry is None or entry[0] != "batched" else entry[1]
        if _ANY_SIZE in programs and function is not None:
            loaded = {}
        _REGISTRY[key] = ("batched", {**programs, **loaded}, spec, device)
    return True


def register_local(key, task, param_skeleton, batched=False):
    """Keeps a task made in this process under ``key`` (the collective
    scheduler: every rank holds its own program).

    Args:
        key: the scheduler's key.
        task: per task, the callable; batched, a ``metafuse.vmap`` of the
            task, which serves every slice size.
        param_skeleton: the parameters' pytree with ints for leaves.
        batched: whether ``task`` is batched.
    """
    entry = (("batched", {_ANY_SIZE: task}) if batched else ("task", task))
    with _LOCK:
        _REGISTRY[key] = (*entry, _tree.structure(param_skeleton), None)
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
                           f"{_worker_name()} (was the worker restarted?)")
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


def block_segments(start, end, block, total):
    """The pieces of the task slice [start, end) cut at the blocks of a
    meta-batch of ``total`` tasks (block j is tasks [j*block, min((j+1)*block,
    total))).

    Returns:
        [(first, end, whole)]: ``whole`` when the piece is its entire block.
    """
    pieces, first = [], start
    while first < end:
        block_start = first - first % block
        block_end = min(block_start + block, total)
        last = min(end, block_end)
        pieces.append((first, last, first == block_start and last == block_end))
        first = last
    return pieces


def block_row_count(start, end, block, total):
    """How many gradient rows ``block_sums`` gives for the slice [start,
    end): one per whole block, one per task of a shared one."""
    return sum(1 if whole else last - first
               for first, last, whole in block_segments(start, end, block, total))


def pairwise_rows_sum(rows):
    """The sum over dim 1 of ``rows`` ([b, n, *shape] -> [b, *shape]) by
    halving: rows i and i + n//2 are added, an odd last row is carried. Only
    elementwise additions, so the bits depend on n alone, not on threads or
    vector width (a reduction kernel's order may)."""
    while rows.shape[1] > 1:
        half = rows.shape[1] // 2
        head = rows[:, :half] + rows[:, half:2 * half]
        rows = torch.cat([head, rows[:, 2 * half:]], 1) if rows.shape[1] % 2 else head
    return rows[:, 0]


def block_sums(grads, start, block, total):
    """Per-task gradient rows of the slice starting at task ``start`` ->
    the rows a worker answers with (see the module docstring): whole blocks
    summed (``pairwise_rows_sum``; a run of equal blocks in one call),
    shared blocks' tasks as they are."""
    out, offset, run = [], 0, 0  # run: tasks of whole blocks of ``block`` pending

    def flush():
        if run:
            rows = grads[offset - run:offset]
            out.append(pairwise_rows_sum(rows.reshape(run // block, block, *rows.shape[1:])))

    for first, end, whole in block_segments(start, start + grads.shape[0], block, total):
        if whole and end - first == block:
            run += block
        else:
            flush()
            run = 0
            rows = grads[offset:offset + end - first]
            out.append(pairwise_rows_sum(rows.unsqueeze(0)) if whole else rows)
        offset += end - first
    flush()
    return torch.cat(out) if len(out) > 1 else out[0]


def run_tasks(key, param_leaves, batch, want_grads, blocks=None):
    """Every task of a slice, one call each, in order (on the task thread).

    Args:
        blocks: None (per-task gradient rows) or (index of the slice's first
            task in the meta-batch, tasks per block, tasks in the meta-batch)
            for block sums.

    Returns:
        (losses [k], per-leaf gradient rows ([k, *shape]) or with
        ``blocks`` one tensor of rows ([rows, parameters], the leaves
        flattened and concatenated), or [] without gradients, seconds).
    """
    return _on_task_thread(_run_tasks, key, param_leaves, batch, want_grads, blocks)


def run_batched(key, param_leaves, batch, want_grads, blocks=None):
    """A slice of k tasks as one call of its batched program (on the task
    thread).

    Returns:
        As run_tasks.
    """
    return _on_task_thread(_run_batched, key, param_leaves, batch, want_grads, blocks)


def _answer(losses, grads, blocks, start_time, home):
    # Block sums of all leaves at once: one [rows, parameters] tensor; the
    # answer goes back on the device the tensors came on (the CPU over RPC).
    if blocks is not None and grads:
        grads = [block_sums(torch.cat([g.reshape(g.shape[0], -1) for g in grads], 1), *blocks)]
    if home is not None:
        losses, grads = losses.to(home), [g.to(home) for g in grads]
    return losses, grads, time.perf_counter() - start_time


def _run_tasks(key, param_leaves, batch, want_grads, blocks):
    start = time.perf_counter()
    _, task, spec, device = _entry(key, "task")
    home = param_leaves[0].device if param_leaves else None
    if device is not None:
        param_leaves = [t.to(device) for t in param_leaves]
        batch = [b.to(device) for b in batch]
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
    return _answer(torch.stack(losses) if losses else empty, stacked, blocks, start, home)


def _run_batched(key, param_leaves, batch, want_grads, blocks):
    # The parameters are given every task (a leading dimension of k), so the
    # gradient of the summed losses with respect to them is per task.
    start = time.perf_counter()
    _, programs, spec, device = _entry(key, "batched")
    home = param_leaves[0].device
    if device is not None:
        param_leaves = [t.to(device) for t in param_leaves]
        batch = [b.to(device) for b in batch]
    count = batch[0].shape[0]
    program = programs.get(count, programs.get(_ANY_SIZE))
    if program is None:
        raise RuntimeError(f"TaskScheduler: no batched program for {count} tasks on "
                           f"{_worker_name()} (it has {sorted(programs)})")
    with torch.enable_grad():
        leaves = [t.detach().unsqueeze(0).expand(count, *t.shape).contiguous()
                  .requires_grad_(want_grads) for t in param_leaves]
        losses = program(_tree.unflatten(spec, leaves), *batch)
        _check_loss(losses, count)
        grads = (list(torch.autograd.grad(losses.sum(), leaves, allow_unused=True))
                 if want_grads else [])
    grads = [torch.zeros_like(leaf) if g is None else g for g, leaf in zip(grads, leaves)]
    return _answer(losses.detach(), grads, blocks, start, home)

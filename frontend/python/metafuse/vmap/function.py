"""metafuse.vmap: a function over one task, compiled for a whole meta-batch.

    task_loss = lambda params, xs, ys, xq, yq: loss_fn(adapt(params, xs, ys), xq, yq)
    losses = metafuse.vmap(task_loss, in_dims=(None, 0, 0, 0, 0))(params, XS, YS, XQ, YQ)
    losses.mean().backward()          # the meta-gradient, through one compiled program

The signature is torch.func.vmap's. The function is traced once per guard
under functorch's vmap, whose batching rules turn per-task operators into
operators on tensors with a task dimension (matrix products into batched
ones, convolutions into grouped ones, BatchNorm per task), and the trace is
compiled by metafuse.compile into one program: fused kernels span all tasks,
the inner loop's updates are one launch for every task and parameter, and the
meta-backward is symbolic.

Arguments that require grad and are shared by the tasks (``in_dims`` None,
typically the meta-parameters) are expanded to every task inside the
program, so each task adapts its own copy and the meta-gradient sums over
tasks. ``metafuse.grad`` inside the function is per task; an adapt function
from compile_inner_loop called inside becomes part of the program.

Fallbacks, each after one CompilationFallbackWarning naming the reason, never
a wrong result: what metafuse.compile cannot compile runs functorch.vmap
eagerly; what functorch cannot batch runs as a loop over the tasks.

A cost check keeps batching from making a call slower: task batching turns
a task's convolutions into convolutions grouped over the tasks, which
LibTorch 1.13 runs several times slower than one convolution per task. Where the batched program has grouped convolutions, the
first call with a set of shapes times it against two task loops: the same
function compiled for one task ("tasks"), and the function called as
written ("calls": an adapt function inside is still compiled, the rest is
eager PyTorch). Each is a call and its backward (the fastest of up to 3
timed calls), and the fastest is kept (``strategies()`` reports the times;
METAFUSE_VMAP_STRATEGY=batched|tasks|calls overrides the measurement).
With more than one intra-op thread a fourth side is timed,
"parallel-tasks": the one-task program run task after task in one chunk
of tasks per thread, the chunks at once (``parallel_chunks``; CPU,
first-order).

METAFUSE_VMAP_STRATEGY=parallel splits the meta-batch into one chunk of
tasks per thread, each chunk's batched program run on its own thread,
forward and backward (``parallel_chunks``; CPU, first-order: a backward
with create_graph=True raises). It is opt-in: on a 2-core machine it
measured no faster than the one batched program (bench/vmap_parallel.py).
"""

import contextlib
import numbers
import warnings

import torch

from metafuse import _cost_timing
from metafuse import _torch_func
from metafuse import tree as _tree
from metafuse.compile import capture as _capture
from metafuse.compile.compiled import CompilationFallbackWarning
from metafuse.compile.function import CompiledFunction
from metafuse.vmap import parallel_chunks as _parallel_chunks
from metafuse.vmap import recomputed_chunks as _recomputed_chunks
from metafuse.vmap import task_gradients as _task_gradients
from metafuse.vmap.strategy import (CALLS_MARGIN, PARALLEL_MARGIN,
                                    TASKS_MARGIN, gradient_may_follow,
                                    has_grouped_convolutions, parallel_tasks_apply,
                                    strategy_setting)

__all__ = ["vmap", "BatchedFunction"]

_RANDOMNESS = ("error", "different", "same")

def _shapes_of(leaves):
    """(shape, dtype, device) of every tensor among the arguments' leaves:
    with the program key, what a measured strategy or a prepared chunk is
    kept for."""
    return tuple((tuple(t.shape), t.dtype, t.device) for arg_leaves in leaves
                 for t in arg_leaves if isinstance(t, torch.Tensor))


def _check_dim(dim, what):
    if dim is not None and (isinstance(dim, bool) or not isinstance(dim, numbers.Integral)):
        raise TypeError(f"metafuse.vmap: `{what}` must be an int or None for each "
                        f"argument, got {dim!r}")



def _contiguous_mapped(args, leaves, dims):
    """The mapped arguments with their non-contiguous tensors (task data is
    often a slice of a larger batch: support rows of [T, S + Q, ...]) made
    contiguous once per call: fused kernels index their inputs densely and
    would otherwise copy such an input at every launch that reads it."""
    def dense(t):
        return not isinstance(t, torch.Tensor) or t.is_contiguous()

    if all(d is None or all(dense(t) for t in arg_leaves)
           for arg_leaves, d in zip(leaves, dims)):
        return args, leaves
    args = [arg if d is None else _tree.map(
        lambda t: t if dense(t) else t.contiguous(), arg) for arg, d in zip(args, dims)]
    return args, [_tree.leaves(arg) for arg in args]

class BatchedFunction:
    """The callable metafuse.vmap returns (see the module docstring); a
    CompiledCallable of kind "batched"."""

    kind = "batched"

    def __init__(self, fn, in_dims, out_dims, randomness, chunk_size):
        if not callable(fn):
            raise TypeError(f"metafuse.vmap: `fn` must be callable, got {type(fn).__name__}")
        if randomness not in _RANDOMNESS:
            raise ValueError(f"metafuse.vmap: `randomness` must be one of {_RANDOMNESS}, "
                             f"got {randomness!r}")
        if chunk_size is not None and (isinstance(chunk_size, bool) or
                                       not isinstance(chunk_size, numbers.Integral) or
                                       chunk_size < 1):
            raise ValueError(f"metafuse.vmap: `chunk_size` must be None or an integer "
                             f">= 1, got {chunk_size!r}")
        for dim in (in_dims if isinstance(in_dims, tuple) else (in_dims,)):
            _check_dim(dim, "in_dims")
        for dim in (out_dims if isinstance(out_dims, tuple) else (out_dims,)):
            _check_dim(dim, "out_dims")
        self.fn, self.in_dims, self.out_dims = fn, in_dims, out_dims
        self.randomness, self.chunk_size = randomness, chunk_size
        # The user's closed-over tensors become program inputs; for an adapt
        # function, those of its loss.
        self._closure_owner = getattr(fn, "loss_fn", fn)
        self._programs = {}  # (in_dims, args that require grad) -> CompiledFunction
        self._loop_reason = None  # why functorch could not batch fn, once known
        self._unbatchable = False  # functorch failed while a batched program traced
        self._strategies = {}  # (program key, shapes) -> the cost check's record
        self._task_programs = {}  # program key -> CompiledFunction of fn for one task
        self._scalar_tasks = {}  # program key -> False once a task returned no single scalar
        self._prepared_chunks = set()  # (program key, shapes) of chunks compiled and measured

    @property
    def compile_count(self):
        """How many guards were compiled (each a new trace and compile), for
        the meta-batch and for one task."""
        return sum(f.compile_count for f in
                   list(self._programs.values()) + list(self._task_programs.values()))

    def _dims_per_argument(self, args):
        if isinstance(self.in_dims, tuple):
            if len(self.in_dims) != len(args):
                raise ValueError(f"metafuse.vmap: `in_dims` has {len(self.in_dims)} "
                                 f"entries for {len(args)} argument(s)")
            return self.in_dims
        return (self.in_dims,) * len(args)

    def _batch_size(self, args, dims):
        return self._batch_size_of([_tree.leaves(arg) for arg in args], dims)

    @staticmethod
    def _batch_size_of(leaves, dims):
        """The task count, from each argument's leaves."""
        sizes = set()
        for i, (arg_leaves, dim) in enumerate(zip(leaves, dims)):
            if dim is None:
                continue
            for leaf in arg_leaves:
                if not isinstance(leaf, torch.Tensor):
                    raise TypeError(f"metafuse.vmap: argument {i} is mapped (in_dims "
                                    f"{dim}) but holds a {type(leaf).__name__}")
                if not -leaf.dim() <= dim < leaf.dim():
                    raise ValueError(f"metafuse.vmap: argument {i} has a tensor of "
                                     f"shape {tuple(leaf.shape)}, no dimension {dim} "
                                     "to map over")
                sizes.add(leaf.shape[dim])
        if not sizes:
            raise ValueError("metafuse.vmap: no argument is mapped (every in_dims is "
                             "None or the mapped arguments hold no tensors)")
        if len(sizes) > 1:
            raise ValueError(f"metafuse.vmap: mapped dimensions have different sizes "
                             f"{sorted(sizes)}; expected one task count")
        return sizes.pop()

    def __call__(self, *args):
        if not _capture.active() and _torch_func.user_transforms_active():
            _torch_func.refuse(
                f"metafuse.vmap ({self._subject()})",
                "it runs compiled programs and task nodes whose autograd is C++ or "
                "first-order, with no batching or functorch rule. Call it outside the "
                "transform: it is itself the batching route (in place of torch.func.vmap), "
                "its outputs are differentiable by torch.autograd.grad / .backward(), and "
                "metafuse.grad inside the function takes per-task gradients; or apply "
                "torch.func to the function itself")
        dims = self._dims_per_argument(args)
        leaves = [_tree.leaves(arg) for arg in args]  # once per call: read below
        size = self._batch_size_of(leaves, dims)
        if self.chunk_size is not None and self.chunk_size < size:
            return self._in_chunks(args, dims, size, self.chunk_size)  # dense per chunk
        args, leaves = _contiguous_mapped(args, leaves, dims)
        return self._whole(args, dims, leaves, size)

    def _whole(self, args, dims, leaves, size):
        """One call of all ``size`` tasks, by the strategy set or measured."""
        setting = strategy_setting()
        if size == 1 or setting == "batched":
            return self._program_for(args, dims)(*args)
        if setting in ("tasks", "calls"):
            return self._task_loop(args, dims, compiled=setting == "tasks")
        if setting == "parallel":
            return self._parallel(args, dims, size)
        if setting == "parallel-tasks":
            return self._parallel_tasks(args, dims, size)
        program_key = self._program_key_of(leaves, dims)
        key = (program_key, _shapes_of(leaves))
        record = self._strategies.get(key)
        if record is not None:
            if record["strategy"] == "parallel-tasks":
                return self._parallel_tasks(args, dims, size)
            if record["strategy"] in ("tasks", "calls"):
                return self._task_loop(args, dims, compiled=record["strategy"] == "tasks")
            return self._program_for_key(program_key, dims)(*args)
        return self._choose_strategy(key, args, dims, size)

    def _choose_strategy(self, key, args, dims, size):
        """The first call with these shapes: the batched program, and where
        it has grouped convolutions also the two task loops, each run with
        its backward once to compile and up to 3 times timed (once when
        clearly slower than the candidate it must beat: the compiled task
        loop is timed first); the fastest's result is returned."""
        batched = self._program_for(args, dims)
        # The batched program's fusion cost check waits until it is kept (it
        # runs on the program's next call, below or at the caller's).
        with batched.fusion_checks_deferred():
            out = batched(*args)
        if not has_grouped_convolutions(batched, args):
            self._strategies[key] = {"strategy": "batched", "reason": "no grouped convolution"}
            batched.check_deferred_fusion(*args)  # kept: checked now, as any compile
            return out
        del out
        inputs = [t for arg in args for t in _tree.leaves(arg)
                  if isinstance(t, torch.Tensor) and t.requires_grad]

        def seconds(run, must_beat=None):
            # Timing stops early once the candidate is clearly slower than
            # `must_beat` (the rival's time divided by the candidate's margin).
            give_up = None if must_beat is None else must_beat * _cost_timing.CLEARLY_SLOWER
            return _cost_timing.seconds_of_call_and_backward(run, inputs, give_up_above=give_up)

        # The one-task loop first: the others are timed against it.
        tasks_s = seconds(lambda: self._task_loop(args, dims, compiled=True))
        calls_s = seconds(lambda: self._task_loop(args, dims, compiled=False),
                          must_beat=tasks_s / CALLS_MARGIN)
        loop, loop_s = (("calls", calls_s) if calls_s * CALLS_MARGIN < tasks_s
                        else ("tasks", tasks_s))
        with batched.fusion_checks_deferred():
            batched_s = seconds(lambda: batched(*args), must_beat=loop_s * TASKS_MARGIN)
        strategy = loop if loop_s * TASKS_MARGIN < batched_s else "batched"
        record = {"strategy": strategy, "reason": "grouped convolutions, timed",
                  "batched_s": batched_s, "tasks_s": tasks_s, "calls_s": calls_s,
                  "tasks": size}
        if parallel_tasks_apply(args, size):
            # More than one core: the one-task programs (compiled by the
            # timing above, on this thread) also in one chunk per thread.
            parallel_s = seconds(lambda: self._parallel_tasks(args, dims, size),
                                 must_beat=min(loop_s / PARALLEL_MARGIN,
                                               batched_s / TASKS_MARGIN))
            record["parallel_tasks_s"] = parallel_s
            if parallel_s * TASKS_MARGIN < batched_s and parallel_s * PARALLEL_MARGIN < loop_s:
                record["strategy"] = strategy = "parallel-tasks"
        self._strategies[key] = record
        _cost_timing.record_choice(
            "vmap_strategy", f"{getattr(self.fn, '__name__', 'fn')} {size} tasks {str(key[1])[:120]}",
            strategy, ", ".join(f"{name[:-2]} {record[name] * 1e3:.2f} ms" for name in
                                ("batched_s", "tasks_s", "calls_s", "parallel_tasks_s")
                                if name in record))
        if strategy == "batched":
            return batched(*args)
        if strategy == "parallel-tasks":
            return self._parallel_tasks(args, dims, size)
        return self._task_loop(args, dims, compiled=strategy == "tasks")

    def _parallel_tasks(self, args, dims, size):
        """The one-task program, task after task, in one contiguous chunk of
        tasks per thread, the chunks at once (_parallel_chunks): a meta-batch
        whose tasks are too big to batch well (grouped convolutions) spread
        over the cores instead of each task's operations split over them.
        The one-task program is compiled here first, on this thread (tracing
        is not thread-safe)."""
        bounds = _parallel_chunks.chunk_bounds(size, min(torch.get_num_threads(), size))
        program = self._task_program(self._program_key(args, dims))
        # (has_program answers for this grad mode: recording or not)
        if not program.has_program(*self._task_args(args, dims, 0)):
            self._task_loop(self._narrow(args, dims, 0, 1), dims, compiled=True)
        return _parallel_chunks.run_in_parallel(
            lambda *chunk: self._task_loop(chunk, dims, compiled=True), args, dims, bounds,
            self._out_dims)

    def _parallel(self, args, dims, size):
        """The batched program on one chunk of tasks per thread, the chunks
        at once (_parallel_chunks); each chunk size compiled first, here."""
        program = self._program_for(args, dims)
        bounds = _parallel_chunks.chunk_bounds(size, min(torch.get_num_threads(), size))
        for start, stop in {stop - start: (start, stop) for start, stop in bounds}.values():
            chunk = self._narrow(args, dims, start, stop)
            if not program.has_program(*chunk):
                program(*chunk)  # compiles: tracing runs on one thread only
        return _parallel_chunks.run_in_parallel(program, args, dims, bounds, self._out_dims)

    @staticmethod
    def _narrow(args, dims, start, stop):
        return [arg if d is None else _tree.map(lambda x, d=d: x.narrow(d, start, stop - start), arg)
                for arg, d in zip(args, dims)]

    def _task_loop(self, args, dims, compiled=True):
        """``fn`` compiled for one task (metafuse.compile), or with
        ``compiled`` False called as written, run task after task; outputs
        stacked. Where each task returns one differentiable scalar and a
        gradient may follow, each task's gradient is taken as it runs and
        its graph freed (_task_gradients)."""
        key = self._program_key(args, dims)
        run = self._task_program(key) if compiled else self.fn
        wants_grad = gradient_may_follow(args)
        if wants_grad and self._scalar_tasks.get(key, True):
            try:
                return _task_gradients.run_tasks_with_gradients(
                    run, args, dims, self._batch_size(args, dims), self._out_dims)
            except _task_gradients.NotOneScalar:
                self._scalar_tasks[key] = False
        return self._each_task(run, args, dims)

    def _task_program(self, key):
        """``fn`` compiled for one task (made on first use)."""
        run = self._task_programs.get(key)
        if run is None:
            run = CompiledFunction(self.fn, key[2], closure_owner=self._closure_owner)
            self._task_programs[key] = run
        return run

    def strategies(self):
        """What the cost check chose per set of argument shapes: a list of
        dicts with ``strategy`` ('batched': one program for the meta-batch;
        'tasks': the one-task program, task after task; 'calls': the
        function as written, task after task; 'parallel-tasks': the
        one-task program in one chunk of tasks per thread), ``reason`` and,
        where timed, ``batched_s``, ``tasks_s``, ``calls_s`` and, with more
        than one thread, ``parallel_tasks_s`` (seconds of one call and its
        backward, each)."""
        return [dict(record) for record in self._strategies.values()]

    def _program_key(self, args, dims):
        return self._program_key_of([_tree.leaves(arg) for arg in args], dims)

    @staticmethod
    def _program_key_of(leaves, dims):
        """(dims, shared arguments that require grad, arguments that require
        grad), from each argument's leaves."""
        grad = tuple(i for i, arg_leaves in enumerate(leaves)
                     if any(isinstance(t, torch.Tensor) and t.requires_grad
                            for t in arg_leaves))
        return (dims, tuple(i for i in grad if dims[i] is None), grad)

    def _program_for(self, args, dims):
        """The CompiledFunction for these arguments' mapping and the
        arguments that require grad (made on first use)."""
        return self._program_for_key(self._program_key(args, dims), dims)

    def _program_for_key(self, key, dims):
        program = self._programs.get(key)
        if program is None:
            program = self._make_program(dims, shared_grad=key[1], argnums=key[2])
            self._programs[key] = program
        return program

    def _make_program(self, dims, shared_grad, argnums):
        inner_dims = tuple(0 if i in shared_grad else d for i, d in enumerate(dims))

        def batched(*args):
            with _capture.untraced():  # the task count is fixed by the guard
                size = self._batch_size(args, dims)
            expanded = [_tree.map(lambda t: t.expand(size, *t.shape), arg)
                        if i in shared_grad else arg for i, arg in enumerate(args)]
            try:
                # (its level is metafuse's own: what runs inside is not refused
                # as under a caller's torch.func transform)
                return _torch_func.vmap()(_torch_func.owned(self.fn), in_dims=inner_dims,
                                          out_dims=self.out_dims,
                                          randomness=self.randomness)(*expanded)
            except (RuntimeError, ValueError, TypeError) as exc:
                if _capture.active():
                    # compile falls back to this function, run eagerly,
                    # which warns once from _loop
                    self._unbatchable = True
                    raise
                return self._loop(args, dims, exc)

        return CompiledFunction(batched, argnums, closure_owner=self._closure_owner,
                                tracing_context=_capture.batched_sizes,
                                quiet_fallback=lambda reason: self._unbatchable)

    def _loop(self, args, dims, exc):
        """What functorch cannot batch (torch 1.13 has no batching rule for
        nn.GRU's aten::gru, say) runs task after task, each task compiled
        (the cost check's "tasks" loop; a function that does not compile
        for one task either runs as written)."""
        if self._loop_reason is None:
            self._loop_reason = str(exc).strip().splitlines()[0]
            warnings.warn(f"metafuse.vmap: functorch cannot batch {self._subject()} "
                          f"({self._loop_reason}); running it as a loop over the tasks, "
                          "each compiled for one task",
                          CompilationFallbackWarning, stacklevel=4)
        return self._task_loop(args, dims, compiled=True)

    def _each_task(self, fn, args, dims):
        """``fn`` on each task's slice of the mapped arguments, outputs
        stacked along out_dims."""
        size = self._batch_size(args, dims)
        results = []
        for t in range(size):
            results.append(fn(*self._task_args(args, dims, t)))
        return self._stack(results)

    @staticmethod
    def _task_args(args, dims, t):
        """Task t's arguments: each mapped one's slice t, shared ones whole."""
        return [arg if d is None else _tree.map(lambda x, d=d: x.select(d, t), arg)
                for arg, d in zip(args, dims)]

    def _out_dims(self, count):
        return self.out_dims if isinstance(self.out_dims, tuple) else (self.out_dims,) * count

    def _stack(self, results):
        leaves = [_tree.flatten(r)[0] for r in results]
        spec = _tree.flatten(results[0])[1]
        return _tree.unflatten(spec, [torch.stack([task[j] for task in leaves], dim=d)
                                      for j, d in enumerate(self._out_dims(len(leaves[0])))])

    def compiled_for(self, *args):
        """The metafuse.compile function that runs a call with ``args`` (what
        metafuse.aot.save saves for a vmap).

        Raises:
            ValueError: ``chunk_size`` splits this call into several programs."""
        dims = self._dims_per_argument(args)
        if self.chunk_size is not None and self.chunk_size < self._batch_size(args, dims):
            raise ValueError("metafuse.vmap: a call split by chunk_size runs several programs; "
                             "save a vmap without chunk_size")
        return self._program_for(args, dims)

    def _in_chunks(self, args, dims, size, chunk_size):
        """chunk_size tasks per call, outputs concatenated in task order.
        Each chunk runs as a call of its tasks would (_chunk); where a
        gradient may follow, one chunk's saved values at a time: each chunk
        runs again in the backward (_recomputed_chunks)."""
        bounds = [(start, min(size, start + chunk_size)) for start in range(0, size, chunk_size)]
        if not gradient_may_follow(args):
            pieces = [_tree.flatten(self._chunk(*self._narrow(args, dims, start, stop)))
                      for start, stop in bounds]
            spec = pieces[0][1]
            count = len(pieces[0][0])
            return _tree.unflatten(spec, [torch.cat([p[0][j] for p in pieces], dim=d)
                                          for j, d in enumerate(self._out_dims(count))])
        for start, stop in {stop - start: (start, stop) for start, stop in bounds}.values():
            chunk = self._narrow(args, dims, start, stop)
            chunk_leaves = [_tree.leaves(arg) for arg in chunk]
            key = (self._program_key_of(chunk_leaves, dims), _shapes_of(chunk_leaves))
            if key not in self._prepared_chunks:
                # Compiled (and the strategy measured) before the chunks run,
                # the recording programs and the forward-only ones the
                # forward runs: tracing and timing draw random numbers,
                # which the backward must draw again as the forward did.
                self._chunk(*chunk)
                with torch.no_grad():
                    self._chunk(*chunk)
                self._prepared_chunks.add(key)
        return _recomputed_chunks.run_recomputed(
            self._chunk, args, dims, bounds, self._out_dims,
            keeps_random=self.randomness != "error")

    def _chunk(self, *args):
        """One chunk of tasks: a single task through the one-task program
        (the batched program of one task only adds the task dimension's
        layout changes: 377 MiB against 74 MiB on the conv net),
        more as a call of that many tasks."""
        dims = self._dims_per_argument(args)
        leaves = [_tree.leaves(arg) for arg in args]
        # (dense copies of this chunk only: copies of the whole call's
        # arguments would live as long as the call's backward)
        args, leaves = _contiguous_mapped(args, leaves, dims)
        size = self._batch_size_of(leaves, dims)
        if size == 1:  # its graph is the chunk's: no gradient to take early
            return self._each_task(self._task_program(self._program_key_of(leaves, dims)),
                                   args, dims)
        return self._whole(args, dims, leaves, size)

    def _subject(self):
        return getattr(self._closure_owner, "__name__", "the function")

    # (TorchOpt-era name of compiled_for)
    compiled_function = compiled_for

    def programs(self):
        """The C++ compiled objects of every guard that compiled, of every
        batched program (the one-task programs of the task loops are not
        included)."""
        return [c for f in self._programs.values() for c in f.programs()]

    def guards(self):
        """(argument mapping, arguments that require grad, argnums) of every
        batched program made so far."""
        return list(self._programs)

    @contextlib.contextmanager
    def recording_programs(self):
        """Calls inside run the programs that record gradients (see
        CompiledFunction.recording_programs)."""
        with contextlib.ExitStack() as stack:
            for program in self._programs.values():
                stack.enter_context(program.recording_programs())
            yield

    def program_for(self, *args):
        """The C++ compiled object a call with ``args`` runs, or None."""
        return self.compiled_for(*args).program_for(*args)

    def program_inputs(self, *args):
        """The flat inputs of the program a call with ``args`` runs."""
        return self.compiled_for(*args).program_inputs(*args)

    def stages(self):
        """[(stage, IR text)] of every compiled guard (metafuse.compile's)."""
        return [stage for f in self._programs.values() for stage in f.stages()]

    def program(self, *args):
        """The compiled program a call with ``args`` runs, as a value."""
        dims = self._dims_per_argument(args)
        self(*args)
        for key, program in self._programs.items():
            if key[0] == dims:
                return program.program(*args)
        raise RuntimeError("metafuse.vmap: no compiled program for these arguments")


def vmap(fn, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    """torch.func.vmap for meta-learning: ``fn`` over one task becomes one
    compiled program over the whole meta-batch (see the module docstring).

    Args:
        fn: a function of pytrees of tensors that metafuse.compile can compile
            (it may call ``metafuse.grad``, ``metafuse.functional_call`` and an
            adapt function from ``compile_inner_loop``).
        in_dims: the task dimension of each argument (an int, or None for an
            argument shared by all tasks), one for all arguments or a tuple
            with one entry per argument.
        out_dims: the task dimension of the outputs (an int or a tuple, one per
            output leaf).
        randomness: as functorch.vmap ('error', 'different', 'same').
        chunk_size: at most this many tasks per program call (None: all).

    Returns:
        A BatchedFunction with ``fn``'s arguments, each mapped argument with
        its task dimension; differentiable with respect to every argument
        that requires grad.

    Raises:
        TypeError, ValueError: bad ``in_dims``, ``out_dims``, ``randomness``,
            ``chunk_size``, or arguments whose task dimensions disagree."""
    return BatchedFunction(fn, in_dims, out_dims, randomness, chunk_size)

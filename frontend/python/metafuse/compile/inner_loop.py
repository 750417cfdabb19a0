"""compile_inner_loop: an inner loop compiled into one autograd node.

    adapt = metafuse.compile_inner_loop(loss_fn, metafuse.sgd(0.4), steps=5)
    fast_params = adapt(params, x_support, y_support)
    loss_fn(fast_params, x_query, y_query).backward()   # meta-gradient

``loss_fn(params, *batch)`` returns the scalar inner loss; ``params`` is any
pytree of tensors. The per-step loss is captured (capture.py), decomposed
into metafuse's primitive ops, differentiated symbolically (the inner
gradients, and the meta-gradient through them), and run by the C++ runtime
as a single autograd node whose backward is the compiled meta-backward
(docs/compiler.md). A short loop (``steps`` <= UNROLL_MAX_STEPS) is
unrolled: one program of ``steps`` copies of the step, fused across steps.
A longer one, or one given a ``memory`` budget, is looped: the step is
compiled once and the runtime runs it ``steps`` times, then the reverse
loop in the backward; with ``memory`` it keeps only snapshots of the inner
state on a binomial (revolve) schedule and recomputes the steps between
them (docs/long_horizon.md).

Compiled programs are cached per guard: the tree structures of params and
batch plus every leaf's shape, dtype and device (and the optimizer). A new
guard compiles again; the same guard reuses the program, and a call under
the last guard only checks its inputs against the cached specs (flatten
caching). Differentiable inputs: ``params``, tensors the loss function
closes over, and a tensor learning rate of ``metafuse.sgd``. Anything the
compiler cannot handle exactly makes the call run eagerly with the same
metafuse optimizer, after one CompilationFallbackWarning that says why.

Under a torch.func transform the caller opened, the inner loop runs eagerly
(the loss's gradients by torch.func.grad, metafuse's optimizer as torch
operations), after one CompilationFallbackWarning.
"""

import numbers
import warnings

import torch

from metafuse import _C
from metafuse import _batched_tensors
from metafuse import _torch_func
from metafuse import tree as _tree
from metafuse.base import GradientTransformation, apply_updates
from metafuse.compile import capture as _capture
from metafuse.compile.closure import Rebind, closed_over_tensors
from metafuse.compile.compiled import (CompilationFallbackWarning, Compiled, CompiledBase,
                                       describe, under_user_transform)
from metafuse.compile.gradient import grad
from metafuse.compile.optimizer_spec import optimizer_spec
from metafuse.vmap.function import vmap

_core = _C._compiler

__all__ = ["compile_inner_loop", "CompiledInnerLoop", "UNROLL_MAX_STEPS"]

#: The longest loop compile_inner_loop unrolls by default (without
#: ``memory``): up to here the unrolled program and the loop run within about
#: 10% of each other and the unrolled program still compiles quickly
#: (docs/long_horizon.md, bench/loop_vs_unrolled.py); longer loops are looped.
UNROLL_MAX_STEPS = 16


def _memory_budget(memory):
    """The C++ layout's memory_budget for ``memory``: -1 keeps every step,
    0 is "auto", else bytes."""
    if memory is None:
        return -1
    if memory == "auto":
        return 0
    if isinstance(memory, bool) or not isinstance(memory, numbers.Integral) or memory <= 0:
        raise ValueError("compile_inner_loop: `memory` must be None (keep every step), "
                         f"\"auto\" or a number of bytes > 0, got {memory!r}")
    return int(memory)


def _leaves_like(spec, tree, what="lr"):
    try:
        return list(_tree.flatten_as(spec, tree))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"compile_inner_loop: per-parameter `{what}` must have "
                         f"the structure of `params`: {exc}") from None


class _FastPath:
    """What a call under an already-compiled guard needs: the program, the
    cached specs, the closure keys and the metadata of every leaf."""

    __slots__ = ("program", "param_spec", "batch_spec", "keys", "described",
                 "described_lr", "num_params", "spec", "return_losses")

    def __init__(self, program, param_spec, batch_spec, keys, described, described_lr,
                 num_params, spec, return_losses):
        self.program, self.param_spec, self.batch_spec = program, param_spec, batch_spec
        self.keys, self.described, self.described_lr = keys, described, described_lr
        self.num_params, self.spec, self.return_losses = num_params, spec, return_losses

    def inputs(self, loop, params, batch):
        """The program's inputs, or None if this call needs the full guard."""
        try:
            leaves = (_tree.flatten_as(self.param_spec, params) +
                      _tree.flatten_as(self.batch_spec, batch))
        except (ValueError, TypeError):
            return None
        closed = closed_over_tensors(loop.loss_fn)
        if tuple(k for k, _ in closed) != self.keys:
            return None
        leaves.extend(t for _, t in closed)
        for t, (shape, dtype, device) in zip(leaves, self.described):
            if (not isinstance(t, torch.Tensor) or t.shape != shape or t.dtype != dtype
                    or t.device != device):
                return None
        if self.spec["lr_is_input"]:
            rate = loop.optimizer._config[1]["lr"]
            lr = [rate] if not self.spec["lr_per_param"] else _leaves_like(self.param_spec,
                                                                           rate)
            if describe(lr) != self.described_lr:
                return None
            leaves.extend(lr)
        return leaves

    def finish(self, outputs):
        adapted = _tree.unflatten(self.param_spec, outputs[:self.num_params])
        if self.return_losses:
            return adapted, torch.stack(outputs[self.num_params:])
        return adapted


class CompiledInnerLoop(CompiledBase):
    """The callable returned by compile_inner_loop."""

    _api = "metafuse.compile_inner_loop"
    kind = "inner_loop"

    def __init__(self, loss_fn, optimizer, steps, return_losses, memory=None, unroll=None):
        super().__init__()
        if not callable(loss_fn):
            raise TypeError("compile_inner_loop: `loss_fn` must be callable")
        if not isinstance(optimizer, GradientTransformation):
            raise TypeError("compile_inner_loop: `optimizer` must be a metafuse "
                            f"GradientTransformation, got {type(optimizer).__name__}")
        if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < 1:
            raise ValueError(f"compile_inner_loop: `steps` must be an integer >= 1, "
                             f"got {steps!r}")
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.steps = int(steps)
        self.return_losses = bool(return_losses)
        self.memory = memory
        self.memory_budget = _memory_budget(memory)
        if unroll not in (None, True, False):
            raise ValueError(f"compile_inner_loop: `unroll` must be None, True or False, "
                             f"got {unroll!r}")
        if unroll and memory is not None:
            raise ValueError("compile_inner_loop: `memory` bounds a looped inner loop; "
                             "unroll=True keeps every step (drop one of them)")
        self.looped = (not unroll) if unroll is not None else (
            memory is not None or self.steps > UNROLL_MAX_STEPS)
        self._fast = None  # the last guard's _FastPath

    def __call__(self, params, *batch):
        if under_user_transform():
            return self._under_transform(params, batch)
        if _capture.active() or (
                _batched_tensors.transforms_active() and
                any(_batched_tensors.is_batched(t) for t in _tree.leaves((params, batch)))):
            # Inside a function being compiled (metafuse.compile, metafuse.vmap):
            # the loop becomes part of that program, its gradients symbolic.
            return self._unroll(params, self._step_gradients(batch, _symbolic_gradients))
        # Flatten caching: under the last guard, the inputs are checked
        # against its cached specs while their leaves are read; no spec is
        # built, nothing else is traversed.
        fast = self._fast
        if fast is not None:
            leaves = fast.inputs(self, params, batch)
            if leaves is not None:
                return fast.finish(fast.program(leaves))
        return self._call(params, batch)

    def _call(self, params, batch):
        param_leaves, param_spec = _tree.flatten(params)
        batch_leaves, batch_spec = _tree.flatten(batch)
        for what, leaves in (("params", param_leaves), ("batch", batch_leaves)):
            for i, leaf in enumerate(leaves):
                if not isinstance(leaf, torch.Tensor):
                    raise TypeError(f"compile_inner_loop: `{what}` must be a pytree "
                                    f"of tensors; leaf {i} is a {type(leaf).__name__}")
        if not param_leaves:
            raise ValueError("compile_inner_loop: `params` has no tensors")
        closed = closed_over_tensors(self.loss_fn)
        keys = [k for k, _ in closed]
        extras = [t for _, t in closed]
        spec, reason = optimizer_spec(self.optimizer)
        lr = []
        if spec and spec["lr_is_input"]:
            rate = self.optimizer._config[1]["lr"]
            lr = [rate] if not spec["lr_per_param"] else _leaves_like(param_spec, rate)
        guard = (param_spec, batch_spec, tuple(keys), describe(param_leaves),
                 describe(batch_leaves), describe(extras), describe(lr))
        entry = self._programs.get(guard)
        if entry is None:
            entry = self._compile(param_leaves, param_spec, batch_leaves,
                                  batch_spec, keys, extras, spec, reason)
            self._programs[guard] = entry
            if isinstance(entry, Compiled):
                leaves = param_leaves + batch_leaves + extras + lr
                if self.looped:  # the body is what fusion changes: time one step
                    self._check_fusion(entry.program.body(), entry.program.body_inputs(leaves))
                else:
                    self._check_fusion(entry.program, leaves)
        if not isinstance(entry, Compiled):
            return self._eager(params, batch)
        program = entry.program
        self._fast = _FastPath(program, param_spec, batch_spec, tuple(keys),
                               guard[3] + guard[4] + guard[5], guard[6],
                               len(param_leaves), spec, self.return_losses)
        return self._fast.finish(program(param_leaves + batch_leaves + extras + lr))

    def _compile(self, param_leaves, param_spec, batch_leaves, batch_spec, keys,
                 extras, spec, reason):
        self.compile_count += 1
        if spec is None:
            return self._fallback(reason)
        if spec["momentum"] and not self.looped:
            return self._fallback("sgd with momentum is compiled as a loop only (unroll=False, "
                                  f"or more than {UNROLL_MAX_STEPS} steps)")
        n_params, n_batch = len(param_leaves), len(batch_leaves)

        def flat_loss(*flat):
            p = _tree.unflatten(param_spec, list(flat[:n_params]))
            b = _tree.unflatten(batch_spec, list(flat[n_params:n_params + n_batch]))
            with Rebind(self.loss_fn, keys, flat[n_params + n_batch:]):
                return self._loss(p, b)

        examples = tuple(t.detach() for t in param_leaves + batch_leaves + extras)
        captured = _capture.trace(flat_loss, examples)
        self._rewarn(captured)
        if captured.error is not None:
            return self._fallback(f"the loss could not be traced ({captured.error})")
        if captured.inexact is not None:
            return self._fallback(captured.inexact)
        graph = captured.graph
        outputs = list(graph.outputs())
        if len(outputs) != 1 or not outputs[0].type().isSubtypeOf(torch._C.TensorType.get()):
            raise ValueError("compile_inner_loop: `loss_fn` must return one scalar tensor")
        try:
            layout = _core.InnerLoopLayout(num_params=n_params, num_batch=n_batch,
                                           num_extra=len(extras), steps=self.steps,
                                           return_losses=self.return_losses,
                                           looped=self.looped,
                                           memory_budget=self.memory_budget)
            return Compiled(_core.compile(graph, layout, _core.OptimizerSpec(**spec)), None)
        except _core.UnsupportedOp as exc:
            return self._fallback(f"op {exc} is outside the compiler's primitive set")

    def _subject(self):
        return "the inner loop"

    def schedule(self):
        """The last looped call's schedule (a dict: ``store_all``,
        ``snapshots``, ``state_bytes``, ``saved_bytes_per_step``,
        ``planned_recomputed_steps``, ``recomputed_steps`` (counted by the
        last backward), ``kept_bytes``, ``description``), or None."""
        fast = self._fast
        if not self.looped or fast is None:
            return None
        return fast.program.schedule()

    def _entry_and_leaves(self, args):
        params, batch = args[0], args[1:]
        self._call(params, batch)  # makes self._fast for this guard when compiled
        entry = next(reversed(self._programs.values()))
        fast = self._fast
        if not isinstance(entry, Compiled) or fast is None:
            return entry, None
        return entry, fast.inputs(self, params, batch)

    def batched(self, params, *batch):
        """The inner loop of a whole meta-batch as one task-batched program:
        ``metafuse.vmap(adapt, in_dims=(None, 0, ...))``, every ``batch``
        tensor with a leading task dimension, ``params`` shared by the tasks.

        Returns:
            The adapted params of every task: each leaf with a leading task
            dimension (and the losses, [tasks, steps], with return_losses)."""
        if self.looped:
            return self._batched_loop(params, batch)
        key = len(batch)
        if getattr(self, "_batched", None) is None or self._batched[0] != key:
            self._batched = (key, vmap(self, in_dims=(None,) + (0,) * key))
        return self._batched[1](params, *batch)

    def _batched_loop(self, params, batch):
        """A looped loop over a meta-batch: one looped loop whose params are
        the tasks' copies (the shared params expanded along a task
        dimension) and whose per-step loss is the sum of the tasks' losses,
        each task's by functorch's vmap of ``loss_fn``. The tasks do not
        interact, so the gradient of the sum is each task's own gradient,
        every supported optimizer's update is elementwise, and the
        meta-gradient of the shared params sums over the tasks through the
        expansion."""
        if self.return_losses:
            raise ValueError("compile_inner_loop: `return_losses` is not supported by "
                             "batched() of a looped inner loop (its per-step loss is the "
                             "sum over tasks); call the loop per task, or unroll=True")
        sizes = {int(t.shape[0]) for t in _tree.leaves(batch)}
        if len(sizes) != 1:
            raise ValueError("compile_inner_loop: batched() needs every `batch` tensor with "
                             f"the same leading task dimension, got sizes {sorted(sizes)}")
        tasks = sizes.pop()
        loop = getattr(self, "_task_loop", None)
        if loop is None:
            loop = CompiledInnerLoop(self.loss_fn, self.optimizer, self.steps, False,
                                     memory=self.memory, unroll=False)
            loop._tasks_batched = True
            self._task_loop = loop
        expanded = _tree.map(lambda p: p.unsqueeze(0).expand(tasks, *p.shape), params)
        return loop(expanded, *batch)

    def _loss(self, params, batch):
        """The per-step loss the compiled program computes."""
        if getattr(self, "_tasks_batched", False):
            dims = (0,) * (1 + len(batch))
            per_task = _torch_func.vmap()(_torch_func.owned(self.loss_fn), in_dims=dims)
            return per_task(params, *batch).sum()
        return self.loss_fn(params, *batch)

    def _under_transform(self, params, batch):
        """The loop under a torch.func transform the caller opened: eager,
        each step's gradients by torch.func.grad (differentiable by every
        transform outside), metafuse's optimizer out of place."""
        if not getattr(self, "_said_transform", False):
            self._said_transform = True
            warnings.warn(f"{self._api}: called under a torch.func transform, which cannot "
                          "run a compiled program; running the inner loop eagerly "
                          "(same results, not compiled). The compiled routes are "
                          "metafuse.vmap in place of torch.func.vmap and "
                          "torch.autograd.grad / .backward() outside the transform",
                          CompilationFallbackWarning, stacklevel=3)
        grad_and_value = _torch_func.grad_and_value()

        def torch_func_step(params):
            leaves, spec = _tree.flatten(params)

            def loss_of(*step_leaves):
                return self.loss_fn(_tree.unflatten(spec, list(step_leaves)), *batch)
            grads, loss = grad_and_value(loss_of, argnums=tuple(range(len(leaves))))(*leaves)
            return loss, list(grads), spec
        return self._unroll(params, torch_func_step)

    def _eager(self, params, batch):
        """The reference semantics: metafuse's own optimizer, out of place."""
        return self._unroll(params, self._step_gradients(batch, _autograd_gradients))

    def _step_gradients(self, batch, gradients):
        """A step's (loss, gradients of the params' leaves, params' spec),
        taking gradients with ``gradients(loss, leaves)``."""
        def step(params):
            loss = self._loss(params, batch)
            leaves, spec = _tree.flatten(params)
            return loss, gradients(loss, leaves), spec
        return step

    def _unroll(self, params, step_gradients):
        """The K steps with metafuse's own optimizer, out of place; each
        step's loss and gradients from ``step_gradients(params)``."""
        state = self.optimizer.init(params)
        losses = []
        for _ in range(self.steps):
            loss, grads, spec = step_gradients(params)
            updates, state = self.optimizer.update(_tree.unflatten(spec, grads), state,
                                                   params=params, inplace=False)
            params = apply_updates(params, updates, inplace=False)
            losses.append(loss)
        if self.return_losses:
            return params, torch.stack(losses)
        return params


def _autograd_gradients(loss, leaves):
    """Eager, differentiable; zeros where the loss does not depend on a leaf."""
    grads = torch.autograd.grad(loss, leaves, create_graph=True, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for p, g in zip(leaves, grads)]


def _symbolic_gradients(loss, leaves):
    """metafuse.grad: a symbolic gradient inside a compiled function."""
    return grad(loss, leaves)


def compile_inner_loop(loss_fn, optimizer, steps, *, return_losses=False, memory=None,
                       unroll=None):
    """Compiles an inner loop into one autograd node (see the module
    docstring).

    Args:
        loss_fn: ``loss_fn(params, *batch) -> scalar tensor``, the per-step
            inner loss; ``params`` is any pytree of tensors.
        optimizer: a metafuse GradientTransformation (``metafuse.sgd``,
            ``adam`` or ``adamw``; others run eagerly with a warning).
        steps: the number of inner updates, an integer >= 1.
        return_losses: also return the K inner losses.
        memory: what the meta-backward may keep: None keeps every step's
            saved values (fastest); "auto" keeps about sqrt(2 steps)
            snapshots of the inner state (params and optimizer state) and
            recomputes the steps between them, at most about one extra
            forward step per step; a number of bytes keeps as many snapshots
            as fit (an error if not even one does). The meta-gradient has
            the same bits whatever is kept. Implies a looped loop.
        unroll: True: one program of ``steps`` copies of the step (its
            compile time and size grow with ``steps``); False: the step
            compiled once and run as a loop; None (default): unrolled up to
            UNROLL_MAX_STEPS steps without ``memory``, looped otherwise.

    Returns:
        A CompiledInnerLoop ``adapt``: ``adapt(params, *batch)`` returns the
        adapted params (a pytree like ``params``), and with
        ``return_losses`` a ``(adapted, losses)`` pair, differentiable with
        respect to ``params``, closed-over tensors and a tensor learning
        rate through the compiled meta-backward."""
    return CompiledInnerLoop(loss_fn, optimizer, steps, return_losses, memory, unroll)

"""Compile an unrolled inner loop into one autograd node.

    adapt = metafuse.compile_inner_loop(loss_fn, metafuse.sgd(0.4), steps=5)
    fast_params = adapt(params, x_support, y_support)
    loss_fn(fast_params, x_query, y_query).backward()   # meta-gradient

``loss_fn(params, *batch)`` returns the scalar inner loss; ``params`` is any
pytree of tensors. The per-step loss is captured (compile/capture.py: make_fx
on torch 2.x, the TorchScript tracer on 1.13),
decomposed into metafuse's primitive ops, differentiated symbolically (the
inner gradients, and the meta-gradient through them), unrolled for
``steps`` optimizer updates and run by the C++ runtime as a single autograd
node whose backward is the compiled meta-backward (docs/compiler.md).

Compiled programs are cached per guard: the tree structures of params and
batch plus every leaf's shape, dtype and device (and the optimizer). A new
guard compiles again; the same guard reuses the program, and a call under
the last guard only checks its inputs against the cached specs (flatten
caching). On its first run the program is specialized to the input shapes,
fused into LLVM-compiled kernels and direct GEMM calls, and its buffers
planned (docs/fusion.md); ``program.set_fusion(False)`` or
METAFUSE_DISABLE_FUSION=1 runs the generic program instead, and
``metafuse.profile`` times both.

Differentiable inputs: ``params``, tensors the loss function closes over
(its closure cells and the module globals it names), and a tensor learning
rate of ``metafuse.sgd``. Anything the compiler cannot handle exactly (an op
outside the primitive set, data-dependent control flow the tracer warns
about, an unsupported optimizer option) makes the call run eagerly with the
same metafuse optimizer instead, after one CompilationFallbackWarning that
says why: never a wrong result.

torch.func transforms (vmap, grad, vjp, jacrev, ...) cannot run a compiled
program: its autograd node is C++, with no batching or functorch rule. Under
one that the caller opened (metafuse.vmap's own are not), a function
compiled by ``compile`` raises TorchFuncUnsupportedError naming
metafuse.vmap and metafuse.grad, the compiled routes; an inner loop from
``compile_inner_loop`` runs eagerly instead (its semantics are known: the
loss's gradients by torch.func.grad, metafuse's optimizer as torch
operations), after one CompilationFallbackWarning.
"""

import contextlib
import functools
import numbers
import os
import re
import threading
import warnings

import torch

from metafuse import _C
from metafuse import _batched_tensors
from metafuse import _fusion_check
from metafuse import _torch_func
from metafuse.compile import capture as _capture
from metafuse import tree as _tree
from metafuse.alias import _is_rate_tree
from metafuse.base import GradientTransformation, apply_updates

_core = _C._compiler

__all__ = ["compile_inner_loop", "compile", "grad", "profile", "CompiledInnerLoop",
           "CompiledFunction", "CompilationFallbackWarning"]


class CompilationFallbackWarning(UserWarning):
    """The inner loop runs eagerly instead of compiled; the message says why."""


def _optimizer_spec(optimizer):
    """The compiler's description of an alias, or (None, reason)."""
    config = getattr(optimizer, "_config", None)
    if config is None:
        return None, "the optimizer is not a metafuse alias (sgd, adam, adamw)"
    name, h = config
    if name not in ("sgd", "adam", "adamw"):
        return None, f"the compiler does not support metafuse.{name} yet"
    if h.get("moment_requires_grad"):
        return None, "moment_requires_grad=True is not compiled"
    lr = h["lr"]
    spec = {"kind": name, "lr": 0.0, "lr_is_input": False, "lr_per_param": False,
            "weight_decay": float(h.get("weight_decay", 0.0)),
            "maximize": bool(h.get("maximize", False)),
            "b1": 0.9, "b2": 0.999, "eps": 1e-8, "eps_root": 0.0}
    if isinstance(lr, torch.Tensor) or (name == "sgd" and _is_rate_tree(lr)):
        if name != "sgd":
            return None, "a tensor learning rate is compiled for sgd only"
        spec["lr_is_input"] = True
        spec["lr_per_param"] = not isinstance(lr, torch.Tensor)
    elif isinstance(lr, numbers.Real):
        spec["lr"] = float(lr)
    else:
        return None, "a learning-rate schedule is not compiled"
    if name == "sgd" and float(h.get("momentum", 0.0)) != 0.0:
        return None, "sgd with momentum is not compiled yet"
    if name != "sgd":
        if h.get("amsgrad"):
            return None, "amsgrad is not compiled"
        spec["b1"], spec["b2"] = (float(b) for b in h["betas"])
        spec["eps"] = float(h["eps"])
        spec["eps_root"] = float(h["eps_root"])
    return spec, None


def _closed_over_tensors(fn):
    """(kind, key) and tensor for each tensor the function closes over
    directly: closure cells and the module globals its code names."""
    found = []
    code = getattr(fn, "__code__", None)
    for i, cell in enumerate(getattr(fn, "__closure__", None) or ()):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(value, torch.Tensor):
            found.append((("cell", i), value))
    if code is not None:
        namespace = getattr(fn, "__globals__", {})
        for name in code.co_names:
            value = namespace.get(name)
            if isinstance(value, torch.Tensor):
                found.append((("global", name), value))
    return found


class _Rebind:
    """Temporarily points a function's closure cells / globals at tensors."""

    def __init__(self, fn, keys, tensors):
        self.fn, self.keys, self.tensors, self.saved = fn, keys, tensors, []

    def __enter__(self):
        for key, tensor in zip(self.keys, self.tensors):
            kind, name = key
            if kind == "cell":
                cell = self.fn.__closure__[name]
                self.saved.append((key, cell.cell_contents))
                cell.cell_contents = tensor
            else:
                self.saved.append((key, self.fn.__globals__[name]))
                self.fn.__globals__[name] = tensor

    def __exit__(self, *exc):
        for (kind, name), value in reversed(self.saved):
            if kind == "cell":
                self.fn.__closure__[name].cell_contents = value
            else:
                self.fn.__globals__[name] = value
        return False


def _leaves_like(spec, tree, what="lr"):
    try:
        return list(_tree.flatten_as(spec, tree))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"compile_inner_loop: per-parameter `{what}` must have "
                         f"the structure of `params`: {exc}") from None


def _describe(leaves):
    return tuple((tuple(t.shape), t.dtype, t.device) for t in leaves)


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
        closed = _closed_over_tensors(loop.loss_fn)
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
            if _describe(lr) != self.described_lr:
                return None
            leaves.extend(lr)
        return leaves

    def finish(self, outputs):
        adapted = _tree.unflatten(self.param_spec, outputs[:self.num_params])
        if self.return_losses:
            return adapted, torch.stack(outputs[self.num_params:])
        return adapted


class _CompiledBase:
    """What the results of compile_inner_loop and compile share: compiled
    programs cached per guard (a C++ object, or the reason the guard runs
    eagerly), the one fallback warning, the tracer-warning filter, the IR of
    the compile stages and the compiled program as a value."""

    _api = "metafuse"

    def __init__(self):
        self.compile_count = 0
        self._programs = {}  # guard -> compiled C++ object (+ extra) or fallback reason
        self._fusion_checks = []  # the fusion cost check's records, in compile order

    def fusion_checks(self):
        """What the fusion cost check measured on each guard's first call
        (_fusion_check): dicts with ``fusion`` (whether the specialized,
        fused program was kept), ``fused_s`` and ``unfused_s`` (seconds of
        a call and its backward, each)."""
        return [dict(record) for record in self._fusion_checks]

    def _check_fusion(self, program, leaves):
        """Runs the fusion cost check for a just-compiled guard, before its
        first real call."""
        record = _fusion_check.choose_fusion(program, leaves)
        if record is not None:
            self._fusion_checks.append(record)

    def _compiled(self):
        """The C++ compiled objects of every guard that compiled."""
        return [entry[0] if isinstance(entry, tuple) else entry
                for entry in self._programs.values() if not isinstance(entry, str)]

    def _fallback(self, reason):
        quiet = getattr(self, "_quiet_fallback", None)
        if quiet is not None and quiet(reason):
            return reason  # the caller says it once, in its own words
        warnings.warn(f"{self._api}: {reason}; running {self._subject()} eagerly "
                      "(same results, not compiled)", CompilationFallbackWarning,
                      stacklevel=4)
        return reason

    @staticmethod
    def _rewarn(captured):
        """Issues again the warnings the function raised while captured."""
        for w in captured.caught:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)

    def stages(self):
        """[(stage, IR text)] of every compiled guard, in compile order: the
        compile pipeline's stages, then each specialization's."""
        return [stage for program in self._compiled() for stage in program.stages()]

    def program(self, *args):
        """The compiled program a call with ``args`` runs, as a value.

        Args:
            *args: the arguments of a call (compiles for their guard first
                if needed).

        Returns:
            A ``metafuse._C._compiler.CompiledProgram``: ``dump()`` (text),
            ``serialize()`` (bytes; ``deserialize_program`` reads them back,
            ``ExecutableProgram`` runs them).

        Raises:
            RuntimeError: the call runs eagerly (a compilation fallback)."""
        # (the saved kind of program, also for a call recording no gradient)
        with getattr(self, "recording_programs", contextlib.nullcontext)():
            self(*args)
            entry, leaves = self._entry_and_leaves(args)
        if isinstance(entry, str):
            raise RuntimeError(f"{self._api}: this call runs eagerly ({entry}); "
                               "there is no compiled program")
        program = entry[0] if isinstance(entry, tuple) else entry
        return program.program(leaves)


class CompiledInnerLoop(_CompiledBase):
    """The callable returned by compile_inner_loop."""

    _api = "metafuse.compile_inner_loop"

    def __init__(self, loss_fn, optimizer, steps, return_losses):
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
        self._fast = None  # the last guard's _FastPath

    def __call__(self, params, *batch):
        if _under_user_transform():
            return self._under_transform(params, batch)
        if _capture.active() or (
                _batched_tensors.transforms_active() and
                any(_batched_tensors.is_batched(t) for t in _tree.leaves((params, batch)))):
            # Inside a function being compiled (metafuse.compile, metafuse.vmap):
            # the loop becomes part of that program, its gradients symbolic.
            return self._unroll(params, batch, _symbolic_gradients)
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
        closed = _closed_over_tensors(self.loss_fn)
        keys = [k for k, _ in closed]
        extras = [t for _, t in closed]
        spec, reason = _optimizer_spec(self.optimizer)
        lr = []
        if spec and spec["lr_is_input"]:
            rate = self.optimizer._config[1]["lr"]
            lr = [rate] if not spec["lr_per_param"] else _leaves_like(param_spec, rate)
        guard = (param_spec, batch_spec, tuple(keys), _describe(param_leaves),
                 _describe(batch_leaves), _describe(extras), _describe(lr))
        program = self._programs.get(guard)
        if program is None:
            program = self._compile(param_leaves, param_spec, batch_leaves,
                                    batch_spec, keys, extras, spec, reason)
            self._programs[guard] = program
            if not isinstance(program, str):
                self._check_fusion(program, param_leaves + batch_leaves + extras + lr)
        if isinstance(program, str):
            return self._eager(params, batch)
        self._fast = _FastPath(program, param_spec, batch_spec, tuple(keys),
                               guard[3] + guard[4] + guard[5], guard[6],
                               len(param_leaves), spec, self.return_losses)
        return self._fast.finish(program(param_leaves + batch_leaves + extras + lr))

    def _compile(self, param_leaves, param_spec, batch_leaves, batch_spec, keys,
                 extras, spec, reason):
        self.compile_count += 1
        if spec is None:
            return self._fallback(reason)
        n_params, n_batch = len(param_leaves), len(batch_leaves)

        def flat_loss(*flat):
            p = _tree.unflatten(param_spec, list(flat[:n_params]))
            b = _tree.unflatten(batch_spec, list(flat[n_params:n_params + n_batch]))
            with _Rebind(self.loss_fn, keys, flat[n_params + n_batch:]):
                return self.loss_fn(p, *b)

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
                                           return_losses=self.return_losses)
            return _core.compile(graph, layout, _core.OptimizerSpec(**spec))
        except _core.UnsupportedOp as exc:
            return self._fallback(f"op {exc} is outside the compiler's primitive set")

    def _subject(self):
        return "the inner loop"

    def _entry_and_leaves(self, args):
        params, batch = args[0], args[1:]
        self._call(params, batch)  # makes self._fast for this guard when compiled
        entry = next(reversed(self._programs.values()))
        fast = self._fast
        if isinstance(entry, str) or fast is None:
            return entry, None
        return fast.program, fast.inputs(self, params, batch)

    def batched(self, params, *batch):
        """The inner loop of a whole meta-batch as one task-batched program:
        ``metafuse.vmap(adapt, in_dims=(None, 0, ...))``, every ``batch``
        tensor with a leading task dimension, ``params`` shared by the tasks.

        Returns:
            The adapted params of every task: each leaf with a leading task
            dimension (and the losses, [tasks, steps], with return_losses)."""
        from metafuse.batching import vmap  # batching builds on this module
        key = len(batch)
        if getattr(self, "_batched", None) is None or self._batched[0] != key:
            self._batched = (key, vmap(self, in_dims=(None,) + (0,) * key))
        return self._batched[1](params, *batch)

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
        state = self.optimizer.init(params)
        losses = []
        for _ in range(self.steps):
            leaves, spec = _tree.flatten(params)

            def loss_of(*step_leaves, spec=spec):
                return self.loss_fn(_tree.unflatten(spec, list(step_leaves)), *batch)
            grads, loss = grad_and_value(loss_of, argnums=tuple(range(len(leaves))))(*leaves)
            updates, state = self.optimizer.update(_tree.unflatten(spec, list(grads)), state,
                                                   params=params, inplace=False)
            params = apply_updates(params, updates, inplace=False)
            losses.append(loss)
        if self.return_losses:
            return params, torch.stack(losses)
        return params

    def _eager(self, params, batch):
        """The reference semantics: metafuse's own optimizer, out of place."""
        return self._unroll(params, batch, _autograd_gradients)

    def _unroll(self, params, batch, gradients):
        """The K steps with metafuse's own optimizer, out of place, taking
        gradients with ``gradients(loss, leaves)``."""
        state = self.optimizer.init(params)
        losses = []
        for _ in range(self.steps):
            loss = self.loss_fn(params, *batch)
            leaves, spec = _tree.flatten(params)
            grads = gradients(loss, leaves)
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


def compile_inner_loop(loss_fn, optimizer, steps, *, return_losses=False):
    """Compiles an unrolled inner loop into one autograd node (see the
    module docstring).

    Args:
        loss_fn: ``loss_fn(params, *batch) -> scalar tensor``, the per-step
            inner loss; ``params`` is any pytree of tensors.
        optimizer: a metafuse GradientTransformation (``metafuse.sgd``,
            ``adam`` or ``adamw``; others run eagerly with a warning).
        steps: the number of inner updates, an integer >= 1.
        return_losses: also return the K inner losses.

    Returns:
        A CompiledInnerLoop ``adapt``: ``adapt(params, *batch)`` returns the
        adapted params (a pytree like ``params``), and with
        ``return_losses`` a ``(adapted, losses)`` pair, differentiable with
        respect to ``params``, closed-over tensors and a tensor learning
        rate through the compiled meta-backward."""
    return CompiledInnerLoop(loss_fn, optimizer, steps, return_losses)


def grad(output, inputs):
    """Gradient of a scalar with respect to a pytree of tensors.

    Inside a function compiled with metafuse.compile it becomes a symbolic
    gradient of the program; outside, it is torch.autograd.grad with
    create_graph.

    Args:
        output: a scalar tensor.
        inputs: a tensor or a pytree of tensors.

    Returns:
        A pytree shaped like ``inputs``: the differentiable gradient, zeros
        where ``output`` does not depend on a leaf."""
    leaves, spec = _tree.flatten(inputs)
    if not leaves or not all(isinstance(t, torch.Tensor) for t in leaves):
        raise TypeError("metafuse.grad: `inputs` must be a tensor or a pytree of "
                        "tensors")
    if not isinstance(output, torch.Tensor):
        raise TypeError(f"metafuse.grad: `output` must be a tensor, got "
                        f"{type(output).__name__}")
    if _batched_tensors.is_batched(output):  # inside metafuse.vmap / functorch.vmap
        return _tree.unflatten(spec, _batched_tensors.physical_grad(
            output, leaves, _capture.grad_op))
    return _tree.unflatten(spec, _capture.grad_op(output, leaves))


def _under_user_transform():
    """Whether this call runs under a torch.func transform the caller opened
    (not one of metafuse.vmap's, not while metafuse traces)."""
    return not _capture.active() and _torch_func.user_transforms_active()


def _records_gradient(leaves):
    """Whether a call on ``leaves`` records a graph: grad mode is on and
    some input requires grad."""
    return torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in leaves)


def _check_devices(leaves):
    """Refuses, before anything is traced, a tensor on a device compiled
    programs cannot take (meta, mps, ...); the program's own check says the
    same when it runs (runtime/kernel_target.cc, CheckProgramDevice)."""
    for i, t in enumerate(leaves):
        if isinstance(t, torch.Tensor) and t.device.type not in ("cpu", "cuda"):
            raise RuntimeError(
                f"compiled function, input {i}: metafuse compiles programs for CPU and CUDA "
                f"tensors; got a tensor on {t.device}: move the inputs with .to('cpu') or "
                f".to('cuda'), or call the function eagerly")


class CompiledFunction(_CompiledBase):
    """A user function compiled by metafuse.compile (see compile)."""

    _api = "metafuse.compile"

    def __init__(self, fn, argnums, *, closure_owner=None, tracing_context=None,
                 quiet_fallback=None):
        super().__init__()
        self.fn = fn
        self.argnums = argnums
        # reason -> True where the caller warns about this fallback itself
        # (metafuse.vmap, when functorch cannot batch the function).
        self._quiet_fallback = quiet_fallback
        # Whose closed-over tensors become inputs (metafuse.vmap compiles a
        # wrapper around the user's function), and what the trace runs under.
        self._closure_owner = fn if closure_owner is None else closure_owner
        self._tracing_context = tracing_context or contextlib.nullcontext
        functools.update_wrapper(self, self._closure_owner, updated=())
        # Guards compiled while fusion checks are deferred, not yet checked.
        self._defer_fusion_checks = False
        self._unchecked = set()
        # guard -> the forward-only program (no saved values, no backward)
        # that calls recording no gradient run, or None where the guard
        # falls back
        self._forward_only = {}
        self._forward_only_on = True  # off inside recording_programs()

    def __call__(self, *args):
        if _under_user_transform():
            _torch_func.refuse(
                f"{self._api} ({self._subject()})",
                "a compiled program's autograd node is C++, with no batching or "
                "functorch rule. The compiled routes: metafuse.vmap in place of "
                "torch.func.vmap (one program for the batch), metafuse.grad inside the "
                "compiled function in place of torch.func.grad, and torch.autograd.grad "
                "/ .backward() on its outputs outside the transform; or apply torch.func "
                "to the uncompiled function (`.fn`)")
        flat, specs, keys, extras, guard = self._flatten(args)
        if self._runs_forward_only(flat + extras):
            entry = self._forward_only_entry(args, specs, flat, keys, extras, guard)
            if entry is not None:
                program, out_spec = entry
                return _tree.unflatten(out_spec, program(flat + extras))
        entry = self._programs.get(guard)
        if entry is None:
            _check_devices(flat + extras)
            entry = self._compile(args, specs, flat, keys, extras)
            self._programs[guard] = entry
            if not isinstance(entry, str):
                if self._defer_fusion_checks:
                    self._unchecked.add(guard)
                else:
                    self._check_fusion(entry[0], flat + extras)
        elif self._unchecked:
            self._check_deferred(guard, entry, flat + extras)
        if isinstance(entry, str):
            return self.fn(*args)
        program, out_spec = entry
        return _tree.unflatten(out_spec, program(flat + extras))

    def _forward_only_entry(self, args, specs, flat, keys, extras, guard):
        """The program of a call that records no gradient (grad mode off,
        or no input requiring grad): the function compiled with nothing to
        differentiate, so its forward keeps no values for a backward (the
        MAML sinusoid's batched program under no_grad: 0.44 MiB of tensors
        at its peak instead of 1.45, 8% faster). The same operations; only a
        reduction fused another way could round differently. Compiled on
        the first such call of a guard; None where the guard falls back
        (the caller then runs what a recording call would)."""
        if guard in self._forward_only:
            return self._forward_only[guard]
        if isinstance(self._programs.get(guard), str):
            return None  # known to fall back: the same trace would
        if threading.current_thread() is not threading.main_thread():
            return None  # tracing (and catching its warnings) is for the main thread
        _check_devices(flat + extras)
        # A fallback here is said by the recording program's compile, which
        # runs next (its trace is the same).
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            entry = self._compile(args, specs, flat, keys, extras, forward_only=True)
        if isinstance(entry, str):
            entry = None
        else:
            for w in caught:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        if entry is not None and not self._defer_fusion_checks:
            self._check_fusion(entry[0], [t.detach() for t in flat + extras])
        self._forward_only[guard] = entry
        return entry

    def _runs_forward_only(self, leaves):
        """Whether a call on ``leaves`` runs the forward-only program: it
        records no gradient, outside recording_programs()."""
        return self._forward_only_on and not _records_gradient(leaves)

    @contextlib.contextmanager
    def recording_programs(self):
        """Calls inside run the recording programs also where they record
        no gradient: what metafuse.aot saves, and so what its round-trip
        check compares with (a forward-only program may fuse a reduction
        another way, and round differently)."""
        self._forward_only_on = False
        try:
            yield
        finally:
            self._forward_only_on = True

    @contextlib.contextmanager
    def fusion_checks_deferred(self):
        """Guards compiled inside run without the fusion cost check, which
        runs on their first call afterwards on the main thread: metafuse.vmap
        times its strategies with the fused programs and checks only the one
        it keeps (the batched conv program's check alone took 10 of a
        21-second first meta-step, also when the task loop won)."""
        self._defer_fusion_checks = True
        try:
            yield
        finally:
            self._defer_fusion_checks = False

    def check_deferred_fusion(self, *args):
        """Runs now the deferred fusion check of the guard these arguments
        select, if it has one (on the main thread only)."""
        if self._unchecked:
            flat, _, _, extras, guard = self._flatten(args)
            entry = self._programs.get(guard)
            if entry is not None:
                self._check_deferred(guard, entry, flat + extras)

    def _check_deferred(self, guard, entry, leaves):
        # Never inside parallel chunks: only the main thread times programs.
        if (guard in self._unchecked and not self._defer_fusion_checks
                and threading.current_thread() is threading.main_thread()):
            self._unchecked.discard(guard)
            self._check_fusion(entry[0], leaves)

    def _flatten(self, args):
        """(leaves, [(spec, count)], closed-over keys and tensors, guard)."""
        if self.argnums and max(self.argnums) >= len(args):
            raise ValueError(f"metafuse.compile: argnums {self.argnums} out of range "
                             f"for {len(args)} argument(s)")
        flat, specs = [], []
        for i, arg in enumerate(args):
            leaves, spec = _tree.flatten(arg)
            if not all(isinstance(t, torch.Tensor) for t in leaves):
                raise TypeError(f"metafuse.compile: argument {i} must be a pytree of "
                                "tensors")
            specs.append((spec, len(leaves)))
            flat.extend(leaves)
        closed = _closed_over_tensors(self._closure_owner)
        keys = [k for k, _ in closed]
        extras = [t for _, t in closed]
        guard = (tuple(s for s, _ in specs), tuple(keys), _describe(flat),
                 _describe(extras))
        return flat, specs, keys, extras, guard

    def has_program(self, *args):
        """Whether a call with ``args``, in the current grad mode, has been
        compiled (or has fallen back) already: its guard is known."""
        flat, _, _, extras, guard = self._flatten(args)
        if self._runs_forward_only(flat + extras):
            return guard in self._forward_only or isinstance(self._programs.get(guard), str)
        return guard in self._programs

    def _entry_and_leaves(self, args):
        """(what a call with ``args`` runs in the current grad mode, as far
        as compiled: its entry or fallback reason; its leaves); KeyError
        before the first call of the guard."""
        flat, _, _, extras, guard = self._flatten(args)
        if self._runs_forward_only(flat + extras):
            entry = self._forward_only.get(guard)
            if entry is not None:
                return entry, flat + extras
        return self._programs[guard], flat + extras

    def _compile(self, args, specs, flat, keys, extras, forward_only=False):
        self.compile_count += 1
        out_spec = []

        def flat_fn(*leaves):
            call, k = [], 0
            for spec, n in specs:
                call.append(_tree.unflatten(spec, list(leaves[k:k + n])))
                k += n
            with _Rebind(self._closure_owner, keys, leaves[k:]):
                result = self.fn(*call)
            out_leaves, spec = _tree.flatten(result)
            if not out_leaves or not all(isinstance(t, torch.Tensor) for t in out_leaves):
                raise TypeError("metafuse.compile: the function must return a "
                                "pytree of tensors")
            out_spec.append(spec)
            return tuple(out_leaves)

        differentiable, k = [], 0
        for i, (spec, n) in enumerate(specs):
            if i in self.argnums:
                differentiable.extend(range(k, k + n))
            elif torch.is_grad_enabled() and any(t.requires_grad for t in flat[k:k + n]):
                # Data by contract, but the caller may expect a gradient.
                warnings.warn(f"{self._api}: argument {i} of {self._subject()} holds tensors "
                              f"that require grad, but argnums is {self.argnums}: the "
                              f"compiled function treats it as data and no gradient "
                              f"reaches it (add {i} to argnums to differentiate it)",
                              UserWarning, stacklevel=4)
            k += n
        differentiable.extend(range(k, k + len(extras)))
        # metafuse.grad runs eagerly while tracing: differentiable examples
        # must require grad, and grad mode must be on even when the first
        # call happens under torch.no_grad().
        examples = tuple(t.detach().requires_grad_(i in differentiable and
                                                    t.is_floating_point())
                         for i, t in enumerate(flat + extras))
        with torch.enable_grad(), self._tracing_context():
            captured = _capture.trace(flat_fn, examples)
        if captured.error is not None:
            return self._fallback(f"the function could not be traced ({captured.error})")
        if captured.inexact is not None:
            return self._fallback(captured.inexact)
        try:
            program = _core.compile_function(captured.graph,
                                             [] if forward_only else differentiable)
        except _core.UnsupportedOp as exc:
            return self._fallback(f"op {exc} is outside the compiler's primitive set")
        return program, out_spec[0]

    def _subject(self):
        return getattr(self._closure_owner, "__name__", "the function")



def compile(fn=None, *, argnums=(0,)):  # noqa: A001 (the public name)
    """Decorator: compiles a function that writes its own inner loop with
    metafuse's optimizer API and ``metafuse.grad``. Cached per guard, with
    the same fallback rules as compile_inner_loop.

    Args:
        fn: the function; its arguments and results are pytrees of tensors.
        argnums: index or indices of the arguments to differentiate (default:
            the first); the tensors the function closes over are
            differentiated too, other arguments are data.

    Returns:
        A CompiledFunction with ``fn``'s call signature (or, without ``fn``,
        a decorator that makes one)."""
    argnums = (argnums,) if isinstance(argnums, numbers.Integral) else tuple(argnums)
    if not argnums or any(not isinstance(a, numbers.Integral) or a < 0 for a in argnums):
        raise ValueError(f"metafuse.compile: `argnums` must be non-negative integers, "
                         f"got {argnums!r}")

    def decorate(f):
        if not callable(f):
            raise TypeError("metafuse.compile: expected a function")
        return CompiledFunction(f, argnums)
    return decorate(fn) if fn is not None else decorate


class ProfileResult:
    """What profile() measured. ``summary``: the fused program's table (per
    program and op or fused kernel); ``unfused_summary``: the same program
    with fusion off; ``fused_us`` / ``unfused_us``: their total instruction
    times; ``chrome_trace``: JSON of the fused run for chrome://tracing or
    Perfetto; ``num_events``: instructions timed in the fused run;
    ``reports``: per compiled guard, what specialization and fusion did."""

    def __init__(self, fused, unfused, reports):
        self.summary = fused.summary
        self.unfused_summary = unfused.summary
        self.chrome_trace = fused.chrome_trace
        self.num_events = fused.num_events
        self.unfused_num_events = unfused.num_events
        self.fused_us = _total_us(fused.summary)
        self.unfused_us = _total_us(unfused.summary)
        self.reports = reports

    def __repr__(self):
        ratio = self.unfused_us / self.fused_us if self.fused_us else float("nan")
        return (f"fused {self.fused_us:.1f} us ({self.num_events} instructions) versus "
                f"unfused {self.unfused_us:.1f} us ({self.unfused_num_events} "
                f"instructions): {ratio:.2f}x\n"
                f"--- fused ---\n{self.summary}\n--- unfused ---\n{self.unfused_summary}")


def _total_us(summary):
    match = re.search(r"total ([0-9.]+) us", summary)
    return float(match.group(1)) if match else 0.0


def profile(fn, *args, backward=True, trace_path=None, quiet=False):
    """Times every runtime instruction of a compiled function, fused versus
    unfused: once with fusion off (the generic program) and once with it on
    (specialized, fused kernels), after one untimed call of each so that
    neither holds compilation.

    Args:
        fn: a result of compile_inner_loop, compile or vmap.
        *args: the arguments of one call.
        backward: also time the compiled meta-backward (seeded with ones).
        trace_path: where to write the fused run's Chrome trace (optional).
        quiet: do not print the two tables.

    Returns:
        A ProfileResult (tables, totals, trace, per-guard fusion reports)."""
    if not callable(getattr(fn, "_compiled", None)):
        raise TypeError("metafuse.profile: `fn` must be a function returned by "
                        "compile_inner_loop, compile or vmap")

    def run_once():
        out = fn(*args)
        if backward:
            leaves = [t for t in _tree.leaves(out)
                      if isinstance(t, torch.Tensor) and t.requires_grad]
            if leaves:
                torch.autograd.backward(leaves, [torch.ones_like(t) for t in leaves])

    def timed():
        handle = _core.Profile()
        handle.start()
        try:
            run_once()
        finally:
            handle.stop()
        return handle

    run_once()  # compiles for these arguments' guard if needed
    programs = fn._compiled()
    enabled = [p.fusion() for p in programs]
    try:
        for p in programs:
            p.set_fusion(False)
        run_once()
        unfused = timed()
        for p in programs:
            p.set_fusion(True)
        run_once()
        fused = timed()
    finally:
        for p, on in zip(programs, enabled):
            p.set_fusion(on)
    result = ProfileResult(fused, unfused, [p.fusion_report() for p in programs])
    if fused.num_events == 0:
        warnings.warn("metafuse.profile: no compiled instruction ran (did the "
                      "call fall back to eager execution?)", stacklevel=2)
    if trace_path is not None:
        with open(trace_path, "w") as f:
            f.write(result.chrome_trace)
    if not quiet:
        print(repr(result))
    return result

"""metafuse.compile: a function that writes its own inner loop with
metafuse's optimizer API and ``metafuse.grad``, compiled per guard; calls
that record no gradient run a forward-only program of the same guard."""

import contextlib
import functools
import numbers
import threading
import warnings

import torch

from metafuse import _C
from metafuse import _torch_func
from metafuse import tree as _tree
from metafuse.compile import capture as _capture
from metafuse.compile.closure import Rebind, closed_over_tensors
from metafuse.compile.compiled import (Compiled, CompiledBase, check_devices, describe,
                                       records_gradient, under_user_transform)

_core = _C._compiler

__all__ = ["compile", "CompiledFunction"]


class CompiledFunction(CompiledBase):
    """A user function compiled by metafuse.compile (see compile)."""

    _api = "metafuse.compile"
    kind = "function"

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
        if under_user_transform():
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
            check_devices(flat + extras)
            entry = self._compile(args, specs, flat, keys, extras)
            self._programs[guard] = entry
            if isinstance(entry, Compiled):
                if self._defer_fusion_checks:
                    self._unchecked.add(guard)
                else:
                    self._check_fusion(entry.program, flat + extras)
        elif self._unchecked:
            self._check_deferred(guard, entry, flat + extras)
        if not isinstance(entry, Compiled):
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
        check_devices(flat + extras)
        # A fallback here is said by the recording program's compile, which
        # runs next (its trace is the same).
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            entry = self._compile(args, specs, flat, keys, extras, forward_only=True)
        if not isinstance(entry, Compiled):
            entry = None
        else:
            for w in caught:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        if entry is not None and not self._defer_fusion_checks:
            self._check_fusion(entry.program, [t.detach() for t in flat + extras])
        self._forward_only[guard] = entry
        return entry

    def _runs_forward_only(self, leaves):
        """Whether a call on ``leaves`` runs the forward-only program: it
        records no gradient, outside recording_programs()."""
        return self._forward_only_on and not records_gradient(leaves)

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
            self._check_fusion(entry.program, leaves)

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
        closed = closed_over_tensors(self._closure_owner)
        keys = [k for k, _ in closed]
        extras = [t for _, t in closed]
        guard = (tuple(s for s, _ in specs), tuple(keys), describe(flat),
                 describe(extras))
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
            with Rebind(self._closure_owner, keys, leaves[k:]):
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
        return Compiled(program, out_spec[0])

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

"""What every compiled callable is: the declared protocol that metafuse.aot,
the command line and the task scheduler use (CompiledCallable), and the base
that compile_inner_loop's and compile's results share (CompiledBase): a
cache of programs per guard, the one fallback warning, the compiled program
as a value."""

import collections
import contextlib
import typing
import warnings

import torch

from metafuse import _fusion_check
from metafuse import _torch_func
from metafuse.compile import capture as _capture

__all__ = ["CompilationFallbackWarning", "CompiledCallable", "CompiledBase", "Compiled",
           "kind_of", "uncompiled",
           "describe", "records_gradient", "check_devices", "under_user_transform"]


class CompilationFallbackWarning(UserWarning):
    """The inner loop runs eagerly instead of compiled; the message says why."""


@typing.runtime_checkable
class CompiledCallable(typing.Protocol):
    """A compiled callable: the result of ``compile_inner_loop``, ``compile``
    or ``vmap``. ``kind`` is "inner_loop", "function" or "batched"."""

    kind: str

    def __call__(self, *args): ...

    def program(self, *args):
        """The compiled program a call with ``args`` runs, as a value."""

    def programs(self):
        """The C++ compiled objects so far, in compile order."""

    def guards(self):
        """The guards (input signatures) seen so far."""

    def recording_programs(self):
        """A context in which calls run the programs that record gradients."""

    def compiled_for(self, *args):
        """The one-program compiled callable a call with ``args`` runs."""

    def program_for(self, *args):
        """The C++ compiled object a call with ``args`` runs, or None."""

    def program_inputs(self, *args):
        """The program's flat inputs for a call with ``args``."""


def kind_of(value):
    """"inner_loop", "function" or "batched" for a compiled callable (what
    metafuse.aot, the command line and the task scheduler switch on), else
    None."""
    return value.kind if isinstance(value, CompiledCallable) else None


def uncompiled(value):
    """The Python function a ``metafuse.compile`` result compiles; any other
    value as it is."""
    return value.fn if kind_of(value) == "function" else value


# One guard's compiled program: the C++ object and the structure of the
# function's outputs (None for an inner loop, whose outputs are its params').
Compiled = collections.namedtuple("Compiled", ["program", "out_spec"])


def describe(leaves):
    return tuple((tuple(t.shape), t.dtype, t.device) for t in leaves)


def under_user_transform():
    """Whether this call runs under a torch.func transform the caller opened
    (not one of metafuse.vmap's, not while metafuse traces)."""
    return not _capture.active() and _torch_func.user_transforms_active()


def records_gradient(leaves):
    """Whether a call on ``leaves`` records a graph: grad mode is on and
    some input requires grad."""
    return torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in leaves)


def check_devices(leaves):
    """Refuses, before anything is traced, a tensor on a device compiled
    programs cannot take (meta, mps, ...); the program's own check says the
    same when it runs (runtime/executor/kernel_target.cc, CheckProgramDevice)."""
    for i, t in enumerate(leaves):
        if isinstance(t, torch.Tensor) and t.device.type not in ("cpu", "cuda"):
            raise RuntimeError(
                f"compiled function, input {i}: metafuse compiles programs for CPU and CUDA "
                f"tensors; got a tensor on {t.device}: move the inputs with .to('cpu') or "
                f".to('cuda'), or call the function eagerly")


class CompiledBase:
    """What the results of compile_inner_loop and compile share: compiled
    programs cached per guard (a Compiled entry, or the reason the guard
    runs eagerly), the one fallback warning, the tracer-warning filter, the IR of
    the compile stages and the compiled program as a value."""

    _api = "metafuse"

    def __init__(self):
        self.compile_count = 0
        self._programs = {}  # guard -> Compiled, or the reason it runs eagerly (a str)
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

    def programs(self):
        """The C++ compiled object of every guard that compiled, in compile
        order (``fusion_report()``, ``set_fusion()``, ``stages()``, ...)."""
        return [entry.program for entry in self._programs.values()
                if isinstance(entry, Compiled)]

    def guards(self):
        """The guards seen so far, in order: each a key of the structures,
        shapes, dtypes and devices of a call's inputs."""
        return list(self._programs)

    def compiled_for(self, *args):
        """The one-program compiled callable a call with ``args`` runs: this
        one (metafuse.vmap's picks its program per argument mapping)."""
        return self

    @contextlib.contextmanager
    def recording_programs(self):
        """Calls inside run the programs that record a gradient (what
        metafuse.aot saves); only metafuse.compile has others."""
        yield

    def program_for(self, *args):
        """The C++ compiled object a call with ``args`` runs, or None: the
        call runs eagerly, or its guard has not been called yet."""
        try:
            entry, _ = self._entry_and_leaves(args)
        except KeyError:
            return None
        return entry.program if isinstance(entry, Compiled) else None

    def program_inputs(self, *args):
        """The program's flat inputs for a call with ``args``: the
        arguments' leaves, then the tensors the function closes over."""
        return self._entry_and_leaves(args)[1]

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
        return [stage for program in self.programs() for stage in program.stages()]

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
        with self.recording_programs():
            self(*args)
            entry, leaves = self._entry_and_leaves(args)
        if not isinstance(entry, Compiled):
            raise RuntimeError(f"{self._api}: this call runs eagerly ({entry}); "
                               "there is no compiled program")
        return entry.program.program(leaves)

"""Capture: a user's Python function, run once on example tensors, recorded
as the compiler's IR (a graph of ``aten::`` operators).

Two fronts, chosen here and nowhere else:

- ``fx`` (torch 2.x, the default there): the function runs on the real
  example tensors under recorder.py's dispatch mode, which writes the ATen
  operators it dispatches, below autograd and below functorch's vmap (so a
  batched function is recorded with its physical, batched operators), into
  a torch.fx graph; fx_graph.py converts that graph. This is make_fx's
  real-tensor mode without make_fx itself, whose proxy machinery a capture
  does not need and which cost: make_fx imports torch._inductor, snapshots
  every value as a fake tensor made by a new FakeTensorMode, and would have
  to be patched through its private internals to keep the values light.
  Not torch.export: it traces with fake tensors and symbolic shapes, which
  every metafuse operator (the gradient marker, the fused optimizer
  updates) would need a fake kernel for, it owns guards that metafuse
  already keeps per call signature, and its pre-dispatch IR records vmap
  as calls to functorch rather than as batched operators.
- ``torchscript`` (torch 1.13, whose make_fx cannot record this): the
  TorchScript tracer, as before torch 2.x deprecated it.

``METAFUSE_CAPTURE=fx|torchscript`` overrides the choice (fx needs torch 2).

What both fronts guarantee the compile front: a graph whose inputs are the
example tensors in order, ``metafuse.grad`` recorded as one
``metafuse::grad`` node (differentiated symbolically by the compiler), and a
reason instead of a graph where the function cannot be recorded exactly:
data-dependent control flow (a read of a value computed from the inputs;
the TorchScript tracer warns, and a warning from user code is reported),
or an operator the IR has no form for.
"""

import contextlib
import os
import warnings

import torch

from metafuse import _torch_check

__all__ = ["FRONT", "Capture", "active", "batched_sizes", "choose_front", "grad_op",
           "computed_from_inputs", "trace", "untraced"]

FRONT_VARIABLE = "METAFUSE_CAPTURE"


def choose_front(version=None, requested=None):
    """The capture front for a torch version ("fx" on 2.x, else
    "torchscript"), or the one METAFUSE_CAPTURE requests.

    Raises:
        ValueError: METAFUSE_CAPTURE names no front, or fx on torch 1.x."""
    version = version or _torch_check.major_minor(torch.__version__)
    requested = os.environ.get(FRONT_VARIABLE, "") if requested is None else requested
    if requested not in ("", "fx", "torchscript"):
        raise ValueError(f"{FRONT_VARIABLE} must be 'fx' or 'torchscript', got {requested!r}")
    if requested == "fx" and version < (2, 0):
        raise ValueError(f"{FRONT_VARIABLE}=fx needs torch 2.x; this is torch "
                         f"{torch.__version__} (use torchscript)")
    if requested:
        return requested
    return "fx" if version >= (2, 0) else "torchscript"


FRONT = choose_front()

if FRONT == "fx":
    import torch._dispatch.python  # noqa: F401  (the Python dispatcher)
    from metafuse.compile import fx_graph as _fx_graph
    from metafuse.compile.recorder import Recorder


class Capture:
    """What one capture produced: ``graph`` (the IR, or None), ``error`` (why
    there is none), ``inexact`` (why the graph cannot be trusted, or None)
    and ``caught`` (warnings the function raised while it ran, for the
    caller to issue again or drop)."""

    __slots__ = ("graph", "error", "inexact", "caught")

    def __init__(self, graph=None, error=None, inexact=None, caught=()):
        self.graph, self.error, self.inexact, self.caught = graph, error, inexact, list(caught)


def active():
    """Whether a metafuse capture is recording the running code (either
    front): the code then builds the program rather than computing."""
    if torch._C._get_tracing_state() is not None:
        return True
    return _recording[0] is not None


@contextlib.contextmanager
def untraced():
    """Python values read inside are constants of the capture, not recorded
    (the TorchScript tracer records size reads; the fx front never does)."""
    if FRONT == "fx":
        yield
        return
    from metafuse import _batched_tensors
    with _batched_tensors.no_tracing():
        yield


def batched_sizes():
    """The context a capture of functorch-batched code runs in: the
    TorchScript tracer cannot record size reads of a BatchedTensor, so they
    are read untraced there; the fx front needs nothing."""
    if FRONT == "fx":
        return contextlib.nullcontext()
    from metafuse import _batched_tensors
    return _batched_tensors.untraced_sizes()


def grad_op(output, leaves):
    """metafuse's gradient operator on plain tensors: recorded as one
    ``metafuse::grad`` node while capturing, evaluated eagerly otherwise
    (its eager values are what the rest of the capture computes with)."""
    recorder = _recording[0]
    if recorder is None:
        return list(torch.ops.metafuse.grad(output, list(leaves)))
    return recorder.record(torch.ops.metafuse.grad.default,
                           lambda o, ls: list(torch.ops.metafuse.grad(o, ls)),
                           (output, list(leaves)), {})


# Composite operators (PyTorch implements them with others, above autograd)
# that the compiler takes whole: the recording is below autograd, where they
# have become their parts (linear: t and addmm; softmax: _softmax; pad:
# reflection_pad2d...), some of which the compiler has no rule for. While
# metafuse captures, each is recorded as one node instead (a kernel for the
# autograd keys, which PyTorch's Python dispatcher consults); otherwise
# they dispatch as before. Under vmap, functorch's batching rules run
# first, so a batched function is recorded with what they emit, as with
# the TorchScript tracer.
_WHOLE_COMPOSITES = (
    "adaptive_avg_pool2d", "batch_norm", "broadcast_tensors", "conv1d", "conv2d",
    "conv_transpose2d",
    "cross_entropy_loss", "einsum", "expand_as", "flatten", "frobenius_norm",
    "group_norm", "instance_norm", "kl_div", "l1_loss", "layer_norm", "linear",
    "log_sigmoid", "log_softmax", "matmul", "max_pool2d", "movedim", "nll_loss",
    "nll_loss_nd", "one_hot", "pad", "relu6", "reshape", "scaled_dot_product_attention",
    "selu", "softmax", "square", "std", "sum_to_size", "type_as", "unflatten", "var",
    "where",
    # recurrent layers (decompose_recurrent.cc unrolls them into their cells)
    "gru", "lstm", "rnn_relu", "rnn_tanh",
    # nearest upsampling (decompose_indexing.cc)
    "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
    "_upsample_nearest_exact1d", "_upsample_nearest_exact2d", "_upsample_nearest_exact3d",
)
_recording = [None]  # the Recorder of the fx capture under way


def _keep_whole(op):
    key = torch._C.DispatchKey
    before = torch._ops.resolve_key(op, key.AutogradCPU)
    previous = op.py_kernels.get(before)
    if previous is None:
        def previous(*args, **kwargs):
            return op._op_dk(before, *args, **kwargs)

    def kernel(*args, **kwargs):
        recorder = _recording[0]
        if recorder is None:
            return previous(*args, **kwargs)
        # (computed by the C++ dispatcher, as eager PyTorch computes it; the
        # Python decompositions some composites have import sympy)
        return recorder.record(op, op, args, kwargs)

    for autograd_key in (key.AutogradCPU, key.AutogradCUDA):
        if autograd_key not in op.py_kernels:
            op.py_impl(autograd_key)(kernel)


def _register_whole_composites():
    for name in _WHOLE_COMPOSITES:
        packet = getattr(torch.ops.aten, name)
        for overload in packet.overloads():
            try:
                op = getattr(packet, overload)
                composite = torch._C._dispatch_has_kernel_for_dispatch_key(
                    op.name(), "CompositeImplicitAutograd")
            except RuntimeError:  # listed by the packet, not registered in this build
                continue
            if overload != "out" and composite:
                _keep_whole(op)




def computed_from_inputs(tensor):
    """Whether, under an fx capture, ``tensor`` is computed from the captured
    function's inputs, so that reading its value would bake this call's
    value into the program (the TorchScript front's optimizer checks this in
    C++, frontend/core/optim/basic_transforms.cc)."""
    recorder = _recording[0]
    return (recorder is not None and isinstance(tensor, torch.Tensor)
            and recorder.computed_from_inputs(tensor))


def _first_line(exc):
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# Frames of the dispatch machinery between a value read and its reader.
_MACHINERY = tuple(os.path.join(os.path.dirname(torch.__file__), part)
                   for part in ("_ops.py", "fx" + os.sep, "utils" + os.sep, "_dispatch" + os.sep,
                                "_compile.py", "_dynamo" + os.sep))
_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep  # the compile front's files
_inexact_reads = []  # during trace(): why the capture is not exact, the first first


def _reader_frame():
    """The innermost frame outside the dispatch machinery and the compile front:
    the code that asked for a tensor's value."""
    import traceback
    for frame in reversed(traceback.extract_stack()):
        if frame.filename.startswith(_HERE) or frame.filename.startswith(_MACHINERY):
            continue
        return frame
    return None


def _note_value_read(recorder, tensor):
    """A tensor's value read into Python while capturing: inexact where the
    tensor is computed from the function's inputs (data-dependent control
    flow, ``.item()``: the program would bake in this call's value) and the
    reader is not torch itself (argument checks, such as a distribution's
    validation, which only raise), as with the TorchScript tracer, whose
    warnings from inside torch are ignored too."""
    if _inexact_reads or not recorder.computed_from_inputs(tensor):
        return
    frame = _reader_frame()
    if frame is None or _inside_torch(frame.filename):
        return
    _inexact_reads.append(f"tracing is not exact at {frame.filename}:{frame.lineno} "
                          f"(a tensor computed from the inputs is read as a Python value: "
                          f"{frame.line})")


@contextlib.contextmanager
def _recording_with(recorder):
    """The fx capture's state: the recorder that grad_op, the composite
    kernels and active() see, PyTorch's Python dispatcher (through which
    the composite kernels are consulted), the value reads cleared."""
    outer, _recording[0] = _recording[0], recorder
    _inexact_reads.clear()
    try:
        with torch._dispatch.python.enable_python_dispatcher(), recorder:
            yield
    finally:
        _recording[0] = outer


def _trace_fx(fn, examples):
    recorder = Recorder(on_read=_note_value_read)
    for example in examples:
        recorder.add_input(example)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with _recording_with(recorder):
                result = fn(*examples)
                recorder.output(result)
        except RuntimeError as exc:  # what the function does cannot be recorded
            return Capture(error=_first_line(exc), caught=caught)
    if _inexact_reads:
        return Capture(inexact=_inexact_reads[0], caught=caught)
    try:
        graph = _fx_graph.to_graph(recorder.graph, recorder.constants,
                                   returns_tuple=isinstance(result, tuple))
    except _fx_graph.Unconvertible as exc:
        return Capture(error=f"op {exc} has no form in the compiler's IR", caught=caught)
    return Capture(graph=graph, caught=caught)


_TORCH_DIRS = tuple(os.path.dirname(m.__file__) + os.sep
                    for m in (torch, __import__("functorch")))


def _inside_torch(filename):
    """Tracer warnings raised inside torch itself come from shape checks
    (e.g. mse_loss comparing sizes), which the shape guard makes exact."""
    return os.path.abspath(filename).startswith(_TORCH_DIRS)


def _trace_torchscript(fn, examples):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", torch.jit.TracerWarning)
        try:
            traced = torch.jit.trace(fn, examples, check_trace=False)
        except RuntimeError as exc:
            return Capture(error=_first_line(exc), caught=caught)
    inexact, others = None, []
    for w in caught:
        if not issubclass(w.category, torch.jit.TracerWarning):
            others.append(w)
        elif inexact is None and not _inside_torch(w.filename):
            inexact = (f"tracing is not exact at {w.filename}:{w.lineno} "
                       f"({str(w.message).splitlines()[0]})")
    return Capture(graph=traced.graph, inexact=inexact, caught=others)


def trace(fn, examples):
    """Records ``fn(*examples)`` (examples: tensors; fn returns a tensor or a
    tuple of tensors) with this interpreter's front. Never raises for what
    the function does: a failure is the Capture's ``error``."""
    if FRONT == "fx":
        return _trace_fx(fn, examples)
    return _trace_torchscript(fn, examples)


if FRONT == "fx":
    _register_whole_composites()

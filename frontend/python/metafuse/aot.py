"""Ahead-of-time artifacts of compiled programs and training jobs (Python side).

    adapt = metafuse.compile_inner_loop(loss_fn, metafuse.sgd(0.4), steps=5)
    metafuse.aot.save(adapt, "maml.mfa", params, x_support, y_support)
    job = metafuse.aot.load("maml.mfa")      # no tracing, no compiling
    fast = job(params, x_support, y_support)  # differentiable, as adapt's

An artifact is a zip file holding ``manifest.json`` (format, versions, the
input structure, a SHA-256 of every other member), ``program.bin`` (the
compiled program value, ``runtime/program_value/program_code.h``, serialized by
``runtime/program_value/program_serialization.cc``: instructions, kernels as kernel IR and
LLVM IR, plans, guard) and ``constants.pt`` (the tensors the function closed
over, a tensor learning rate, and the output structure). Loading checks the
zip, the format, the LibTorch version and every checksum, then reads the
program back (which checks every field); any failed check raises
ArtifactError naming it, and nothing half-loaded is returned. The program
carries its kernels' host code as well (LLVM object code per kernel and a
C++/OpenMP shared object per program, ``value.attach_object_code()``):
loading checks that this CPU runs the x86-64 level it was made for and
refuses, naming the kernel, where it does not.

A job artifact (``save_job`` / ``load_job``) adds a whole training step
under the convention ``step(state, *data) -> (new_state, metrics)``, its
initial state and data batches (``job.pt``), and a ``job`` section in the
manifest; ``metafuse run job.mfa`` runs it (docs/cli.md), and so does the C++
runner without Python (``frontend/metafuse/aot.h``,
``examples/cpp/maml_aot.cc``). ``read`` checks an artifact without making it
runnable (``metafuse inspect``, which also shows the measured choices of the
process that saved it: ``manifest["tuning"]``, metafuse.tuning).

Trust (docs/aot.md): an artifact's native code runs only when the artifact
is trusted, that is signed with a key the loader holds (``save(...,
key=...)`` signs: an HMAC-SHA256 over the whole file, in the zip's comment;
``load(..., key=...)`` or ``METAFUSE_ARTIFACT_KEY`` verifies) or loaded with
``trust=True``. An untrusted artifact runs its kernels printed here from
their kernel IR (data, parsed and validated by the compiler's printers),
and its pickled members load as tensors and containers only. Signing and
verifying are C++ (``runtime/program_value/artifact_signature.h``), shared
with the C++ runner.
"""

import hashlib
import io
import json
import os
import tempfile
import pickle
import types
import zipfile

import torch

from metafuse import _C
from metafuse import tuning as _tuning
from metafuse import _torch_func
from metafuse.compile import capture as _capture
from metafuse import tree as _tree
from metafuse.compile.compiled import kind_of

_core = _C._compiler

FORMAT = "metafuse-aot 3"  # 3: may be signed; 2: runner.pt (flat tensors for the C++ runner)
# Formats this metafuse reads: 2 was never signed (read as unsigned).
READABLE_FORMATS = (FORMAT, "metafuse-aot 2")
KEY_VARIABLE = "METAFUSE_ARTIFACT_KEY"  # a key as hexadecimal text
JOB_MEMBER = "job.pt"  # a job artifact's initial state and data batches
RUNNER_MEMBER = "runner.pt"  # flat tensors for the C++ runner

__all__ = ["save", "load", "read", "save_job", "load_job", "read_key_file", "JobData", "Job",
           "LoadedProgram", "Artifact", "ArtifactError"]


class ArtifactError(ValueError):
    """An artifact failed a check on load; the message says which."""


HOW_TO_TRUST = ("to trust it, sign it when saving (metafuse.aot.save(..., key=...)) and load "
                f"it with that key (key=, or {KEY_VARIABLE} as hex), or pass trust=True if "
                "you trust where it came from")


def read_key_file(path):
    """The key in a key file: hexadecimal text (surrounding whitespace
    ignored), at least 16 bytes, e.g. written by
    ``python3 -c "import secrets; print(secrets.token_hex(32))" > key.hex``.

    Args:
        path: the key file's name.

    Returns:
        The key (bytes), for ``key=``.

    Raises:
        ValueError: the file cannot be read or holds no valid key (named).
    """
    return _core.read_artifact_key_file(os.fspath(path))


def _key(key, caller):
    """The raw key ``key`` gives (bytes as they are, str as hex), else
    METAFUSE_ARTIFACT_KEY's, else None."""
    if key is None:
        return _core.artifact_key_from_environment()
    if isinstance(key, (bytes, bytearray)):
        _core.check_artifact_key(bytes(key), f"{caller}: `key`")
        return bytes(key)
    if isinstance(key, str):
        return _core.parse_artifact_key(key, f"{caller}: `key`")
    raise TypeError(f"{caller}: `key` must be bytes (the raw key) or str (hexadecimal), "
                    f"got {type(key).__name__}")


def _sha256(data):
    return hashlib.sha256(data).hexdigest()


def _skeleton(tree):
    """``tree`` with its leaves replaced by their flat positions (picklable
    for dicts, lists and tuples)."""
    leaves, spec = _tree.flatten(tree)
    return _tree.unflatten(spec, list(range(len(leaves))))


def _recording(compiled):
    """The program that is saved, also for calls recording no gradient
    (CompiledFunction.recording_programs)."""
    return compiled.recording_programs()


def _output_skeleton(compiled, args):
    """The structure of one call's result, leaves as positions."""
    with torch.no_grad(), _recording(compiled):
        result = compiled(*args)
    if compiled.kind == "inner_loop" and compiled.return_losses:
        adapted, losses = result
        return {"adapted": _skeleton(adapted), "losses": True}
    return {"tree": _skeleton(result), "losses": False}


def save(compiled, path, *example_args, key=None):
    """Writes the compiled program a call with ``example_args`` runs to an
    artifact at ``path`` (atomically: a reader never sees half a file).

    Args:
        compiled: a result of ``metafuse.compile_inner_loop`` or
            ``metafuse.compile``.
        path: the artifact's file name (``.mfa`` by convention).
        *example_args: the arguments of a call; the artifact is specialized
            to their structure, shapes, dtypes and devices.
        key: signs the artifact (HMAC-SHA256 over the whole file) so that a
            loader holding the key runs its native code: bytes (the raw key)
            or str (hexadecimal), at least 16 bytes. None: the key in
            METAFUSE_ARTIFACT_KEY (hex) when that is set, else unsigned.

    Returns:
        The manifest written (a dict).

    Raises:
        TypeError: ``compiled`` is not a compiled function.
        RuntimeError: the call runs eagerly (nothing compiled to save).
        ValueError: ``key`` (or METAFUSE_ARTIFACT_KEY) is not a valid key.
    """
    return _save(compiled, path, example_args, key=key)


def _save(compiled, path, example_args, job_section=None, job_payload=None, runner=None,
          key=None):
    """save(), with an optional job section (manifest) and job.pt member;
    ``runner`` adds the job's flat tensors to runner.pt."""
    caller = "metafuse.aot.save_job" if job_section is not None else "metafuse.aot.save"
    key = _key(key, caller)
    if kind_of(compiled) is None:
        raise TypeError("metafuse.aot.save: `compiled` must be a result of "
                        "compile_inner_loop, compile or vmap, got "
                        f"{type(compiled).__name__}")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"metafuse.aot.save: `path` must be a file name, got {path!r}")
    compiled = compiled.compiled_for(*example_args)  # metafuse.vmap: its program for these
    value = compiled.program(*example_args)
    # Host code for both back ends (LLVM object code, a C++ shared object
    # per program): a loading process links or dlopens it, no code generator.
    try:
        value.attach_object_code()
    except RuntimeError as exc:
        raise ArtifactError(f"metafuse.aot.save: {exc}") from None
    leaves = compiled.program_inputs(*example_args)
    arg_leaves, arg_spec = _tree.flatten(list(example_args))
    closed = [t.detach().clone() for t in leaves[len(arg_leaves):]]
    members = {"program.bin": value.serialize(),
               "constants.pt": _tensor_bytes({
                   "closed_over": closed,
                   "output": _output_skeleton(compiled, example_args)})}
    if job_payload is not None:
        members[JOB_MEMBER] = _tensor_bytes(job_payload)
    # What the C++ runner (metafuse/aot.h) reads without Python: flat tensor
    # lists in metafuse.tree's order.
    members[RUNNER_MEMBER] = _tensor_bytes({
        "closed_over": closed,
        "state_leaves": (runner or {}).get("state_leaves", []),
        "batch_leaves": (runner or {}).get("batch_leaves", [])}, _LIBTORCH_PICKLE)
    manifest = {
        "format": FORMAT,
        "kind": compiled.kind,
        "versions": dict(value.versions),
        "torch": torch.__version__,
        "inputs": {"structure": str(arg_spec), "leaves": len(arg_leaves),
                   "closed_over": len(closed)},
        "num_outputs": value.num_outputs,
        "sha256": {name: _sha256(data) for name, data in members.items()},
    }
    if job_section is not None:
        manifest["job"] = job_section
    _check_round_trip(compiled, example_args, manifest, members)
    # What the saving process measured and chose (metafuse.tuning): shown by
    # `metafuse inspect`, not read when loading.
    manifest["tuning"] = _tuning.report()
    _write_atomically(path, manifest, members, key)
    return manifest


def _first_difference(got, want):
    """What differs between two lists of output tensors (NaN equals NaN),
    or None."""
    if len(got) != len(want):
        return f"{len(got)} outputs, the compiled call gives {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if (g.dtype, g.shape) != (w.dtype, w.shape):
            return (f"output {i} is {g.dtype}{list(g.shape)}, the compiled call gives "
                    f"{w.dtype}{list(w.shape)}")
        same = (torch.allclose(g, w, rtol=0, atol=0, equal_nan=True)
                if g.is_floating_point() else torch.equal(g, w))
        if not same:
            return f"output {i} differs from the compiled call's"
    return None


def _check_round_trip(compiled, example_args, manifest, members):
    """Refuses to write an artifact whose program, read back, does not give
    the compiled call's outputs bit for bit (a serialization defect must not
    become a wrong result, or an error, on the loading machine)."""
    loaded = LoadedProgram(manifest, _core.deserialize_program(members["program.bin"]),
                           torch.load(io.BytesIO(members["constants.pt"])))
    with torch.no_grad(), _recording(compiled):
        want = _tree.leaves(compiled(*example_args))
        try:
            got = _tree.leaves(loaded(*example_args))
        except RuntimeError as exc:
            got, error = None, str(exc).splitlines()[0]
    if got is not None:
        error = _first_difference(got, want)
    if error is not None:
        raise RuntimeError("metafuse.aot.save: the program read back from its serialized "
                           f"form does not reproduce the compiled call ({error}); nothing "
                           "was written. This is a metafuse defect: please report it "
                           "(docs/aot.md lists the known ones and their workarounds)")


def _tensor_bytes(obj, pickle_module=pickle):
    buffer = io.BytesIO()
    torch.save(obj, buffer, pickle_module=pickle_module)
    return buffer.getvalue()


class _BatchOpcodePickler(pickle._Pickler):  # the pure-Python pickler can be specialized
    """Lists and dicts always as MARK ... APPENDS / SETITEMS: LibTorch's
    unpickler (torch::pickle_load, used by the C++ runner) has no opcode for
    the one-item forms (APPEND, SETITEM) Python's pickler uses."""

    def _batch_appends(self, items):
        items = list(items)
        if not items:
            return
        self.write(pickle.MARK)
        for x in items:
            self.save(x)
        self.write(pickle.APPENDS)

    def _batch_setitems(self, items):
        items = list(items)
        if not items:  # as Python's: nothing (LibTorch reads an OrderedDict as None)
            return
        self.write(pickle.MARK)
        for k, v in items:
            self.save(k)
            self.save(v)
        self.write(pickle.SETITEMS)


# What torch.save needs of a pickle module, with the pickler above.
_LIBTORCH_PICKLE = types.SimpleNamespace(Pickler=_BatchOpcodePickler, Unpickler=pickle.Unpickler,
                                         load=pickle.load, dump=pickle.dump,
                                         __name__="pickle")


def _write_atomically(path, manifest, members, key=None):
    """Writes the zip, signed with ``key`` (raw bytes) when given, to a
    temporary file beside ``path``, then renames it."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as z:
        z.writestr("manifest.json", json.dumps(manifest, indent=1, sort_keys=True))
        for name, data in members.items():
            z.writestr(name, data)
    data = buffer.getvalue()
    if key is not None:
        data = _core.sign_artifact(data, key)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".mfa-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class LoadedProgram:
    """A compiled program read from an artifact: called like the function it
    was saved from, on arguments of the same structure, shapes, dtypes and
    devices; differentiable through the compiled meta-backward.
    ``trusted`` says whether the artifact's native code runs (else its
    kernels were printed here from their kernel IR); ``signature`` is the
    artifact's signature as ``metafuse inspect`` shows it."""

    def __init__(self, manifest, program, constants, trusted=True, signature=None):
        self.manifest = manifest
        self.trusted, self.signature = trusted, signature
        self._program = _core.ExecutableProgram(program)
        self._closed = constants["closed_over"]
        self._output = constants["output"]

    def __call__(self, *args):
        if not _capture.active() and _torch_func.user_transforms_active():
            _torch_func.refuse(
                "metafuse.aot.LoadedProgram",
                "a compiled program's autograd node is C++, with no batching or "
                "functorch rule; call it outside the transform (its outputs are "
                "differentiable by torch.autograd.grad / .backward()), and for a batch "
                "save a metafuse.vmap of the function")
        leaves, spec = _tree.flatten(list(args))
        expected = self.manifest["inputs"]
        if str(spec) != expected["structure"]:
            raise ValueError("metafuse.aot: the arguments' structure differs from the "
                             f"saved one: got {spec}, expected {expected['structure']}")
        if not all(isinstance(t, torch.Tensor) for t in leaves):
            raise TypeError("metafuse.aot: every argument leaf must be a tensor")
        outputs = self._program(leaves + self._closed)
        if self._output["losses"]:
            skeleton = self._output["adapted"]
            leaves_out, out_spec = _tree.flatten(skeleton)
            adapted = _tree.unflatten(out_spec, outputs[:len(leaves_out)])
            return adapted, torch.stack(outputs[len(leaves_out):])
        leaves_out, out_spec = _tree.flatten(self._output["tree"])
        return _tree.unflatten(out_spec, outputs[:len(leaves_out)])


def load(path, key=None, trust=False):
    """Reads an artifact written by ``save`` (or ``save_job``); neither
    traces nor compiles the function.

    The artifact's native code (LLVM object code, C++ shared objects) runs
    only when the artifact is trusted: signed with ``key`` (or the key in
    METAFUSE_ARTIFACT_KEY), or ``trust=True``. Otherwise its kernels are
    printed here from their kernel IR and compiled (or taken from this
    user's kernel cache): the same numbers, the compile time paid once, no
    warning. ``LoadedProgram.trusted`` says which.

    Args:
        path: the artifact's file name.
        key: the key to verify the signature with: bytes (raw) or str
            (hexadecimal); None: METAFUSE_ARTIFACT_KEY's when set.
        trust: run the artifact's native code without a verified signature
            (you trust where it came from); also skips the signature check.

    Returns:
        A LoadedProgram.

    Raises:
        FileNotFoundError: no such file.
        ArtifactError: a check failed (not an artifact, truncated or
            corrupted, another format or LibTorch version, a signature the
            key does not verify, an untrusted kernel without kernel IR); the
            message names it and says what to do.
    """
    artifact = _read(path, key, trust, "metafuse.aot.load")
    return LoadedProgram(artifact.manifest, _runnable(artifact, path, "metafuse.aot.load"),
                         artifact.constants, artifact.trusted, artifact.signature)


def _runnable(artifact, path, caller):
    """The artifact's program, its kernels printed here from their kernel
    IR when it is not trusted; checked against this CPU."""
    program = artifact.program
    try:
        if not artifact.trusted:
            try:
                program.rebuild_kernels_from_kernel_ir()
            except ValueError as exc:
                raise ArtifactError(
                    f"{caller}: {path} is not trusted ({artifact.signature}), so its native "
                    f"code does not run, and its kernels cannot run from their kernel IR: "
                    f"{exc}; {HOW_TO_TRUST}") from None
        program.check_object_targets()  # the CPU its host code was made for
    except ValueError as exc:
        hint = "" if artifact.trusted else (
            f" ({path} is not trusted ({artifact.signature}), so its kernels are compiled "
            f"here from their kernel IR; {HOW_TO_TRUST})")
        raise ArtifactError(f"{caller}: {path}: {exc}{hint}") from None
    return program


class Artifact:
    """An artifact's checked contents, not yet made runnable: ``manifest``
    (dict), ``program`` (the ``CompiledProgram`` value: ``dump()``,
    ``versions``, ...), ``constants`` (closed-over tensors, output
    structure), ``job`` (the stored state and batches of a job artifact, or
    None), ``sizes`` (bytes of each zip member), ``signature`` (e.g.
    ``"unsigned"``, ``"signed (HMAC-SHA256), verified with key
    <fingerprint>"``) and ``trusted`` (whether loading it runs its native
    code)."""

    def __init__(self, manifest, program, constants, job, sizes, signature="unsigned",
                 trusted=False):
        self.manifest, self.program, self.constants = manifest, program, constants
        self.job, self.sizes = job, sizes
        self.signature, self.trusted = signature, trusted


def read(path, key=None, trust=False):
    """Reads and checks an artifact without making it runnable (no kernel is
    compiled or linked): what ``metafuse inspect`` shows.

    Args:
        path: the artifact's file name.
        key: verifies the signature (as in ``load``); None:
            METAFUSE_ARTIFACT_KEY's when set.
        trust: as in ``load``.

    Returns:
        An Artifact.

    Raises:
        FileNotFoundError: no such file.
        ArtifactError: a check failed; the message names it.
    """
    return _read(path, key, trust, "metafuse.aot.load")


def _trust_of(data, key, trust, path, caller):
    """(description, trusted) of the artifact file's bytes ``data``."""
    try:
        state, description = _core.artifact_signature(data, key)
    except (PermissionError, ValueError) as exc:
        if not trust:
            raise ArtifactError(f"{caller}: {path}: {exc}; load it with the key it was signed "
                                "with, or pass trust=True if you trust where it came "
                                "from") from None
        return f"signed (HMAC-SHA256), not verified ({exc})", True
    return description, trust or state == "verified"


def _unpickle(data, name, path, trusted, caller):
    """torch.load of a member; from an untrusted artifact, tensors and
    containers only (its pickles run no code)."""
    if trusted:
        return torch.load(io.BytesIO(data))
    try:
        return torch.load(io.BytesIO(data), weights_only=True)
    except Exception as exc:  # the restricted unpickler's errors vary by torch version
        raise ArtifactError(f"{caller}: {path} is not trusted, and its {name} holds pickled "
                            "objects other than tensors and containers, which load only from "
                            f"a trusted artifact ({str(exc).splitlines()[0]}); "
                            f"{HOW_TO_TRUST}") from None


def _read(path, key, trust, caller):
    key = _key(key, caller)
    with open(path, "rb") as f:  # one read: the signature covers these bytes
        data = f.read()
    signature, trusted = _trust_of(data, key, trust, path, caller)
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise ArtifactError(f"metafuse.aot.load: {path} is not a metafuse artifact or "
                            f"is truncated ({exc}); save it again") from None
    with z:
        try:
            names = set(z.namelist())
            missing = {"manifest.json", "program.bin", "constants.pt", RUNNER_MEMBER} - names
            if missing:
                raise ArtifactError(f"metafuse.aot.load: {path} lacks {sorted(missing)}; "
                                    "it is not a complete artifact")
            manifest = json.loads(z.read("manifest.json"))
            if not isinstance(manifest, dict):
                raise ValueError("manifest.json is not an object")
            wanted = ["program.bin", "constants.pt", RUNNER_MEMBER]
            if "job" in manifest:
                wanted.append(JOB_MEMBER)
            members = {n: z.read(n) for n in wanted}
            sizes = {info.filename: info.file_size for info in z.infolist()}
        except (zipfile.BadZipFile, OSError, ValueError, KeyError) as exc:
            if isinstance(exc, ArtifactError):
                raise
            raise ArtifactError(f"metafuse.aot.load: {path} is damaged ({exc}); "
                                "save it again") from None
    if manifest.get("format") not in READABLE_FORMATS:
        raise ArtifactError(f"metafuse.aot.load: {path} has format "
                            f"{manifest.get('format')!r}; this metafuse reads "
                            f"{' and '.join(map(repr, READABLE_FORMATS))}. "
                            "Recompile and save it with this version")
    if manifest.get("torch") != torch.__version__:
        raise ArtifactError(f"metafuse.aot.load: {path} was made with LibTorch "
                            f"{manifest.get('torch')}, this process runs {torch.__version__}; "
                            "recompile and save it here")
    checksums = manifest.get("sha256")
    for name, data in members.items():
        if not isinstance(checksums, dict) or _sha256(data) != checksums.get(name):
            raise ArtifactError(f"metafuse.aot.load: checksum of {name} in {path} does "
                                "not match its manifest (the file is corrupted); save it "
                                "again")
    try:
        program = _core.deserialize_program(members["program.bin"])
        if trusted:
            program.check_object_targets()  # the CPU its object code was made for
    except ValueError as exc:
        raise ArtifactError(f"metafuse.aot.load: {path}: {exc}") from None
    constants = _unpickle(members["constants.pt"], "constants.pt", path, trusted, caller)
    job = (_unpickle(members[JOB_MEMBER], JOB_MEMBER, path, trusted, caller)
           if JOB_MEMBER in members else None)
    return Artifact(manifest, program, constants, job, sizes, signature, trusted)


# --- Job artifacts: a whole training step and the data it runs on ---------

JOB_CONVENTION = ("step(state, *data) -> (new_state, metrics): new_state is the next "
                  "step's state; metrics are scalar tensors reported per step")


class JobData:
    """What a job artifact runs on: the initial ``state`` (a pytree of
    tensors, e.g. the meta-parameters) and ``batches``, a non-empty list of
    data tuples, each the ``*data`` arguments of one step, all of the same
    structure, shapes and dtypes. Step ``i`` uses ``batches[i % len(batches)]``.
    ``description`` is free text stored in the manifest (say where the data
    came from)."""

    def __init__(self, state, batches, description=""):
        self.state, self.batches, self.description = state, batches, description


def _signature(tree):
    leaves, spec = _tree.flatten(tree)
    return spec, [(tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else None
                  for t in leaves]


def _dense(t):
    """``t`` with row-major strides exactly (is_contiguous() ignores the
    strides of size-1 dimensions; the program's guard does not)."""
    strides, step = [], 1
    for size in reversed(t.shape):
        strides.append(step)
        step *= max(size, 1)
    if t.stride() == tuple(reversed(strides)):
        return t
    return t.clone(memory_format=torch.contiguous_format)


def _contiguous(tree):
    """A detached copy of a pytree's tensor leaves with row-major strides
    (other leaves as they are)."""
    return _tree.map(lambda t: _dense(t.detach()).clone()
                     if isinstance(t, torch.Tensor) else t, tree)


def _metric_names(metrics):
    """The names a step's metrics are reported under, or None if ``metrics``
    is not a scalar tensor or a dict of scalar tensors."""
    if isinstance(metrics, torch.Tensor):
        return ["loss"] if metrics.numel() == 1 else None
    if isinstance(metrics, dict) and metrics and all(
            isinstance(k, str) and isinstance(v, torch.Tensor) and v.numel() == 1
            for k, v in metrics.items()):
        return sorted(metrics)
    return None


def _check_job(step, state, batches):
    """Raises TypeError / ValueError naming the argument that breaks the job
    convention; returns (the first step's result, metric names)."""
    if kind_of(step) != "function":
        raise TypeError("metafuse.aot.save_job: `step` must be a function compiled with "
                        f"metafuse.compile, got {type(step).__name__}")
    state_spec, state_sig = _signature(state)
    if not state_sig or None in state_sig:
        raise TypeError("metafuse.aot.save_job: `state` must be a non-empty pytree of "
                        "tensors")
    if not isinstance(batches, (list, tuple)) or not batches:
        raise TypeError("metafuse.aot.save_job: `batches` must be a non-empty list of "
                        "data tuples (the *data arguments of one step each)")
    first = None
    for i, batch in enumerate(batches):
        if not isinstance(batch, tuple):
            raise TypeError(f"metafuse.aot.save_job: batches[{i}] must be a tuple of "
                            f"step arguments, got {type(batch).__name__}")
        sig = _signature(batch)
        if None in sig[1]:
            raise TypeError(f"metafuse.aot.save_job: batches[{i}] must hold tensors only")
        if first is not None and sig != first:
            raise ValueError(f"metafuse.aot.save_job: batches[{i}] differs from batches[0] "
                             "in structure, shapes or dtypes; every batch must match")
        first = sig
    result = step(state, *batches[0])
    if not isinstance(result, tuple) or len(result) != 2:
        raise ValueError("metafuse.aot.save_job: `step` must return a pair "
                         f"(new_state, metrics) ({JOB_CONVENTION})")
    new_state, metrics = result
    if _signature(new_state) != (state_spec, state_sig):
        raise ValueError("metafuse.aot.save_job: the new state `step` returns differs "
                         "from `state` in structure, shapes or dtypes; it must be able "
                         "to feed the next step")
    names = _metric_names(metrics)
    if names is None:
        raise ValueError("metafuse.aot.save_job: the metrics `step` returns must be a "
                         "scalar tensor or a dict of scalar tensors keyed by name")
    return names


def save_job(step, path, data, key=None):
    """Writes a job artifact: the compiled program of one training step plus
    the initial state and the data it runs on, so that ``metafuse run`` (or
    ``load_job(path).run(n)``) trains without the script that made it.

    The step follows the job convention ``step(state, *data) -> (new_state,
    metrics)``: ``state`` is a pytree of tensors (e.g. meta-parameters),
    ``new_state`` has its structure, shapes and dtypes and becomes the next
    step's ``state``; ``metrics`` is a scalar tensor (reported as ``loss``)
    or a dict of scalar tensors. The manifest's ``job`` section records the
    convention, the state's structure, the metric names and where the data
    comes from (the stored batches, cycled in order).

    Args:
        step: a function compiled with ``metafuse.compile``.
        path: the artifact's file name.
        data: a JobData (initial state, batches, description).
        key: signs the artifact, as in ``save``.

    Returns:
        The manifest written.

    Raises:
        TypeError, ValueError: an argument breaks the convention (named).
        RuntimeError: the step runs eagerly (nothing compiled to save).
    """
    if not isinstance(data, JobData):
        raise TypeError("metafuse.aot.save_job: `data` must be a metafuse.aot.JobData, "
                        f"got {type(data).__name__}")
    # The program is specialized to strides too: contiguous tensors
    # throughout, so that every step's (contiguous) new state fits it.
    state = _contiguous(data.state)
    batches = [_contiguous(batch) for batch in data.batches] \
        if isinstance(data.batches, (list, tuple)) else data.batches
    names = _check_job(step, state, batches)
    state_leaves, state_spec = _tree.flatten(state)
    section = {
        "convention": JOB_CONVENTION,
        "state": {"structure": str(state_spec), "leaves": len(state_leaves)},
        "metrics": names,
        "data": {"source": "batches stored in job.pt", "count": len(batches),
                 "order": "step i uses batch i mod count"},
        "description": str(data.description),
    }
    payload = {"state": state, "batches": batches}
    runner = {"state_leaves": state_leaves,
              "batch_leaves": [_tree.flatten(list(batch))[0] for batch in batches]}
    return _save(step, path, (state,) + tuple(batches[0]), section, payload, runner, key)


class Job:
    """A job artifact loaded: ``state`` (the initial state), ``batches``,
    ``metric_names``, ``manifest``, and ``program`` (the LoadedProgram of
    one step). ``step`` runs one step, ``run`` many."""

    def __init__(self, manifest, program, payload):
        self.manifest, self.program = manifest, program
        self.state, self.batches = payload["state"], payload["batches"]
        self.metric_names = manifest["job"]["metrics"]

    def step(self, state, index):
        """One step from ``state`` on batch ``index % len(batches)``.

        Returns:
            (new_state, {metric name: scalar tensor})."""
        batch = self.batches[index % len(self.batches)]
        with torch.no_grad():
            new_state, metrics = self.program(state, *batch)
        new_state = _tree.map(_dense, new_state)  # the strides the program expects
        if isinstance(metrics, torch.Tensor):
            metrics = {"loss": metrics}
        return new_state, metrics

    def run(self, steps, state=None, callback=None):
        """Runs ``steps`` steps, each step's new state feeding the next.

        Args:
            steps: how many, an integer >= 0.
            state: where to start (default: the stored initial state).
            callback: called as ``callback(index, metrics)`` after each step,
                with metrics as Python floats.

        Returns:
            (final state, [metrics of each step as floats])."""
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"metafuse.aot.Job.run: `steps` must be an integer >= 0, "
                             f"got {steps!r}")
        state = self.state if state is None else state
        history = []
        for i in range(steps):
            state, metrics = self.step(state, i)
            values = {k: float(v) for k, v in metrics.items()}
            history.append(values)
            if callback is not None:
                callback(i, values)
        return state, history


def load_job(path, key=None, trust=False):
    """Reads a job artifact written by ``save_job``; ``key`` and ``trust``
    decide whether its native code runs, as in ``load``.

    Returns:
        A Job.

    Raises:
        FileNotFoundError: no such file.
        ArtifactError: a check failed, or the artifact holds a program
            without a job section (saved by ``save``).
    """
    artifact = _read(path, key, trust, "metafuse.aot.load_job")
    if artifact.job is None:
        raise ArtifactError(f"metafuse.aot.load_job: {path} holds a compiled program, "
                            "not a job (no job section); save it with "
                            "metafuse.aot.save_job")
    program = LoadedProgram(artifact.manifest,
                            _runnable(artifact, path, "metafuse.aot.load_job"),
                            artifact.constants, artifact.trusted, artifact.signature)
    return Job(artifact.manifest, program, artifact.job)

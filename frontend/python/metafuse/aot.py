"""Ahead-of-time artifacts of compiled programs (first part: Python save/load).

    adapt = metafuse.compile_inner_loop(loss_fn, metafuse.sgd(0.4), steps=5)
    metafuse.aot.save(adapt, "maml.mfa", params, x_support, y_support)
    job = metafuse.aot.load("maml.mfa")      # no tracing, no compiling
    fast = job(params, x_support, y_support)  # differentiable, as adapt's

An artifact is a zip file holding ``manifest.json`` (format, versions, the
input structure, a SHA-256 of every other member), ``program.bin`` (the
compiled program value, ``runtime/program_code.h``, serialized by
``runtime/program_serialization.cc``: instructions, kernels as kernel IR and
LLVM IR, plans, guard) and ``constants.pt`` (the tensors the function closed
over, a tensor learning rate, and the output structure). Loading checks the
zip, the format, the LibTorch version and every checksum, then reads the
program back (which checks every field); any failed check raises
ArtifactError naming it, and nothing half-loaded is returned. Kernels are
compiled for the loading machine by the runtime's JIT (or linked from the
kernel cache), so an artifact moves between x86-64 hosts.

Not yet here (see docs/architecture.md): host object code inside the
artifact, the C++ runner without Python, whole meta-training steps, and the
``metafuse`` command-line tool.
"""

import hashlib
import io
import json
import os
import tempfile
import zipfile

import torch

from metafuse import _C
from metafuse import tree as _tree
from metafuse.compiler import CompiledFunction, CompiledInnerLoop

_core = _C._compiler

FORMAT = "metafuse-aot 1"

__all__ = ["save", "load", "LoadedProgram", "ArtifactError"]


class ArtifactError(ValueError):
    """An artifact failed a check on load; the message says which."""


def _sha256(data):
    return hashlib.sha256(data).hexdigest()


def _skeleton(tree):
    """``tree`` with its leaves replaced by their flat positions (picklable
    for dicts, lists and tuples)."""
    leaves, spec = _tree.flatten(tree)
    return _tree.unflatten(spec, list(range(len(leaves))))


def _output_skeleton(compiled, args):
    """The structure of one call's result, leaves as positions."""
    with torch.no_grad():
        result = compiled(*args)
    if isinstance(compiled, CompiledInnerLoop) and compiled.return_losses:
        adapted, losses = result
        return {"adapted": _skeleton(adapted), "losses": True}
    return {"tree": _skeleton(result), "losses": False}


def save(compiled, path, *example_args):
    """Writes the compiled program a call with ``example_args`` runs to an
    artifact at ``path`` (atomically: a reader never sees half a file).

    Args:
        compiled: a result of ``metafuse.compile_inner_loop`` or
            ``metafuse.compile``.
        path: the artifact's file name (``.mfa`` by convention).
        *example_args: the arguments of a call; the artifact is specialized
            to their structure, shapes, dtypes and devices.

    Returns:
        The manifest written (a dict).

    Raises:
        TypeError: ``compiled`` is not a compiled function.
        RuntimeError: the call runs eagerly (nothing compiled to save).
    """
    if not isinstance(compiled, (CompiledInnerLoop, CompiledFunction)):
        raise TypeError("metafuse.aot.save: `compiled` must be a result of "
                        "compile_inner_loop or compile, got "
                        f"{type(compiled).__name__}")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"metafuse.aot.save: `path` must be a file name, got {path!r}")
    value = compiled.program(*example_args)
    _, leaves = compiled._entry_and_leaves(example_args)
    arg_leaves, arg_spec = _tree.flatten(list(example_args))
    closed = [t.detach().clone() for t in leaves[len(arg_leaves):]]
    constants = io.BytesIO()
    torch.save({"closed_over": closed,
                "output": _output_skeleton(compiled, example_args)}, constants)
    members = {"program.bin": value.serialize(), "constants.pt": constants.getvalue()}
    manifest = {
        "format": FORMAT,
        "kind": "inner_loop" if isinstance(compiled, CompiledInnerLoop) else "function",
        "versions": dict(value.versions),
        "torch": torch.__version__,
        "inputs": {"structure": str(arg_spec), "leaves": len(arg_leaves),
                   "closed_over": len(closed)},
        "num_outputs": value.num_outputs,
        "sha256": {name: _sha256(data) for name, data in members.items()},
    }
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".mfa-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
            z.writestr("manifest.json", json.dumps(manifest, indent=1, sort_keys=True))
            for name, data in members.items():
                z.writestr(name, data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return manifest


class LoadedProgram:
    """A compiled program read from an artifact: called like the function it
    was saved from, on arguments of the same structure, shapes, dtypes and
    devices; differentiable through the compiled meta-backward."""

    def __init__(self, manifest, program, constants):
        self.manifest = manifest
        self._program = _core.ExecutableProgram(program)
        self._closed = constants["closed_over"]
        self._output = constants["output"]

    def __call__(self, *args):
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


def load(path):
    """Reads an artifact written by ``save``; neither traces nor compiles.

    Args:
        path: the artifact's file name.

    Returns:
        A LoadedProgram.

    Raises:
        FileNotFoundError: no such file.
        ArtifactError: a check failed (not an artifact, truncated or
            corrupted, another format or LibTorch version); the message
            names it. Recompile and save again with this metafuse.
    """
    try:
        z = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise ArtifactError(f"metafuse.aot.load: {path} is not a metafuse artifact or "
                            f"is truncated ({exc}); save it again") from None
    with z:
        try:
            names = set(z.namelist())
            missing = {"manifest.json", "program.bin", "constants.pt"} - names
            if missing:
                raise ArtifactError(f"metafuse.aot.load: {path} lacks {sorted(missing)}; "
                                    "it is not a complete artifact")
            manifest = json.loads(z.read("manifest.json"))
            members = {n: z.read(n) for n in ("program.bin", "constants.pt")}
        except (zipfile.BadZipFile, OSError, ValueError, KeyError) as exc:
            if isinstance(exc, ArtifactError):
                raise
            raise ArtifactError(f"metafuse.aot.load: {path} is damaged ({exc}); "
                                "save it again") from None
    if manifest.get("format") != FORMAT:
        raise ArtifactError(f"metafuse.aot.load: {path} has format "
                            f"{manifest.get('format')!r}; this metafuse reads {FORMAT!r}. "
                            "Recompile and save it with this version")
    if manifest.get("torch") != torch.__version__:
        raise ArtifactError(f"metafuse.aot.load: {path} was made with LibTorch "
                            f"{manifest.get('torch')}, this process runs {torch.__version__}; "
                            "recompile and save it here")
    for name, data in members.items():
        if _sha256(data) != manifest.get("sha256", {}).get(name):
            raise ArtifactError(f"metafuse.aot.load: checksum of {name} in {path} does "
                                "not match its manifest (the file is corrupted); save it "
                                "again")
    try:
        program = _core.deserialize_program(members["program.bin"])
    except ValueError as exc:
        raise ArtifactError(f"metafuse.aot.load: {path}: {exc}") from None
    constants = torch.load(io.BytesIO(members["constants.pt"]))
    return LoadedProgram(manifest, program, constants)

"""A summary of a compiled program value for ``metafuse inspect``: its
stages (forward, backward), instructions by kind, operators, fused kernels,
GEMMs, reductions, the buffer plan of fused launches, the guard and the
versions. Read from ``CompiledProgram.dump()``, the runtime's stable text
of the value (runtime/program_value/program_code.cc), which this parser follows."""

import re

# c10::ScalarType codes as InputSignature records them (c10/core/ScalarType.h).
_DTYPES = {0: "Byte", 1: "Char", 2: "Short", 3: "Int", 4: "Long", 5: "Half", 6: "Float",
           7: "Double", 8: "ComplexHalf", 9: "ComplexFloat", 10: "ComplexDouble",
           11: "Bool", 15: "BFloat16"}
_BYTES = {"Byte": 1, "Char": 1, "Short": 2, "Int": 4, "Long": 8, "Half": 2, "Float": 4,
          "Double": 8, "Bool": 1, "BFloat16": 2, "ComplexHalf": 4, "ComplexFloat": 8,
          "ComplexDouble": 16}
_DEVICE_TYPES = {0: "cpu", 1: "cuda"}

_PROGRAM = re.compile(r"^program (\S+) \((\d+) registers\)$")
_INSTRUCTION = re.compile(r"^  \d+: .* = (\w+) (\S+?)(?: #\d+)?\(")
_KERNEL = re.compile(r"^  kernel #\d+ (\S+): inputs \[(.*?)\] access .* outputs \[(.*?)\], "
                     r"(\d+) scalars$")
_LAUNCH = re.compile(r"^  launch #\d+: kernel #(\d+) x(\d+) .* out \[(.*?)\] "
                     r"numel \[(.*?)\] reuse \[(.*?)\]$")
_GEMM = re.compile(r"^  gemm #\d+: trans_a (\d) trans_b (\d) accumulate (\d)$")


def _ints(text):
    return [int(x) for x in text.split(",") if x.strip()]


def _names(text):
    return [x.strip() for x in text.split(",") if x.strip()]


def decode_guard(guard):
    """InputSignature (runtime/program_value/program_code.cc) -> one description per input,
    e.g. "Float[10, 1] cpu"; [] for a generic program."""
    described, i = [], 0
    while i < len(guard):
        code = guard[i]
        if code == -1:
            described.append("undefined tensor")
            i += 1
        elif code == -2:
            described.append(f"int {guard[i + 1]}")
            i += 2
        elif code == -3:
            described.append("non-tensor")
            i += 1
        else:
            device, dim = guard[i + 1], guard[i + 2]
            sizes = guard[i + 3:i + 3 + dim]
            kind = _DEVICE_TYPES.get(device // 1024 if device >= 0 else 0, "device")
            index = device % 1024 if device >= 0 else -1
            where = kind if index in (-1, 1023) or kind == "cpu" else f"{kind}:{index}"
            described.append(f"{_DTYPES.get(code, f'dtype{code}')}{list(sizes)} {where}")
            i += 3 + 2 * dim
    return described


def _new_stage(name, registers):
    return {"name": name, "registers": registers, "constants": 0, "instructions": 0,
            "by_kind": {}, "operators": {}, "kernels": [], "launches": 0,
            "launch_segments": 0, "fused_elements": 0, "gemms": {}, "reductions": 0,
            "fused_outputs": 0, "fused_outputs_reusing": 0, "fused_output_bytes": 0,
            "fused_output_bytes_reusable": 0}


def _add_line(stage, line):
    if line.startswith("  const %"):
        stage["constants"] += 1
    elif m := _INSTRUCTION.match(line):
        kind, name = m.groups()
        stage["instructions"] += 1
        stage["by_kind"][kind] = stage["by_kind"].get(kind, 0) + 1
        if kind == "op":
            stage["operators"][name] = stage["operators"].get(name, 0) + 1
    elif m := _KERNEL.match(line):
        name, inputs, outputs, scalars = m.groups()
        stage["kernels"].append({"name": name, "inputs": len(_names(inputs)),
                                 "outputs": len(_names(outputs)), "scalars": int(scalars),
                                 "ir_lines": 0})
    elif line.startswith("    | ") and stage["kernels"]:
        stage["kernels"][-1]["ir_lines"] += 1
    elif m := _LAUNCH.match(line):
        _, segments, outputs, numel, reuse = m.groups()
        segments, numel, reuse = int(segments), _ints(numel), _ints(reuse)
        dtypes = _names(outputs)
        stage["launches"] += 1
        stage["launch_segments"] += segments
        stage["fused_elements"] += sum(numel)
        for s in range(segments):  # reuse is per output, segment-major
            for o, dtype in enumerate(dtypes):
                nbytes = numel[s] * _BYTES.get(dtype, 8)
                stage["fused_outputs"] += 1
                stage["fused_output_bytes"] += nbytes
                if reuse[s * len(dtypes) + o] >= 0:
                    stage["fused_outputs_reusing"] += 1
                    stage["fused_output_bytes_reusable"] += nbytes
    elif m := _GEMM.match(line):
        a, b, acc = (int(x) for x in m.groups())
        form = ("t" if a else "n") + ("t" if b else "n") + (" + accumulate" if acc else "")
        stage["gemms"][form] = stage["gemms"].get(form, 0) + 1
    elif line.startswith("  reduction #"):
        stage["reductions"] += 1


def _host_code(program):
    """What host code the program carries for each back end (artifacts)."""
    llvm = sorted({t.split(" ")[0] for t in program.object_targets if t})
    return {"llvm_object_code": llvm,
            "cpp_shared_objects": {label: {"target": target, "bytes": size}
                                   for label, (target, size) in
                                   program.shared_objects.items()}}


def summarize(program):
    """A dict describing a CompiledProgram (see the module docstring)."""
    stages, guard = [], []
    for line in program.dump().splitlines():
        if line.startswith("  guard [") and not stages:
            guard = _ints(line[len("  guard ["):-1])
        elif m := _PROGRAM.match(line):
            stages.append(_new_stage(m.group(1), int(m.group(2))))
        elif stages:
            _add_line(stages[-1], line)
    return {"inputs": program.num_inputs, "outputs": program.num_outputs,
            "differentiable_inputs": list(program.differentiable_inputs),
            "kernels": program.num_kernels, "guard": decode_guard(guard),
            "host_code": _host_code(program),
            "versions": dict(program.versions), "stages": stages}


"""``metafuse inspect ARTIFACT``: what an artifact holds, without running or
compiling anything: its manifest (kind, versions, inputs, job section),
member sizes, and per program stage the instructions, operators, fused
kernels, GEMMs, reductions and buffer plan (metafuse.cli.program_summary),
and the measured choices of the process that saved it (metafuse.tuning)."""

import json

from metafuse import tuning as _tuning
from metafuse.cli import artifacts
from metafuse.cli.program_summary import summarize


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "inspect", help="show what an artifact holds",
        description="Check an artifact (zip, format, LibTorch version, checksums, "
                    "program fields) and describe it: versions, inputs, job section, "
                    "stages, kernels, GEMMs, memory plan.")
    parser.add_argument("artifact", metavar="ARTIFACT.mfa")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="print the summary as JSON")
    shown.add_argument("--dump", action="store_true",
                       help="print the whole program value as text")
    parser.add_argument("--kernels", action="store_true",
                        help="list every fused kernel (default: the first 10 per stage)")
    artifacts.add_trust_arguments(parser)
    parser.set_defaults(run=run)


def _kib(nbytes):
    return f"{nbytes / 1024:.1f} KiB"


def _print_stage(stage, all_kernels):
    print(f"stage {stage['name']}: {stage['instructions']} instructions "
          f"({', '.join(f'{n} {k}' for k, n in sorted(stage['by_kind'].items()))}), "
          f"{stage['registers']} registers, {stage['constants']} constants")
    if stage["operators"]:
        ops = sorted(stage["operators"].items(), key=lambda kv: (-kv[1], kv[0]))
        print("  operators: " + ", ".join(f"{name} x{n}" for name, n in ops))
    if stage["gemms"]:
        print("  GEMMs: " + ", ".join(f"{form} x{n}" for form, n in sorted(stage["gemms"].items())))
    if stage["reductions"]:
        print(f"  reductions: {stage['reductions']}")
    kernels = stage["kernels"]
    print(f"  fused kernels: {len(kernels)}, launched {stage['launches']} times over "
          f"{stage['launch_segments']} segments ({stage['fused_elements']} elements)")
    for k in kernels if all_kernels else kernels[:10]:
        print(f"    {k['name']}: {k['inputs']} inputs, {k['outputs']} outputs, "
              f"{k['scalars']} scalars, {k['ir_lines']} lines of kernel IR")
    if not all_kernels and len(kernels) > 10:
        print(f"    ... {len(kernels) - 10} more (--kernels lists them)")
    if stage["fused_outputs"]:
        print(f"  memory plan: {stage['fused_outputs_reusing']} of {stage['fused_outputs']} "
              f"fused outputs may take an input's buffer "
              f"({_kib(stage['fused_output_bytes_reusable'])} of "
              f"{_kib(stage['fused_output_bytes'])})")


def run(args):
    artifact = artifacts.read(args.artifact, artifacts.key(args), args.trust)
    if args.dump:
        print(artifact.program.dump(), end="")
        return 0
    manifest = artifact.manifest
    summary = summarize(artifact.program)
    if args.json:
        print(json.dumps({"manifest": manifest, "members": artifact.sizes,
                          "signature": artifact.signature, "trusted": artifact.trusted,
                          "program": summary}, indent=1, sort_keys=True))
        return 0
    kind = "job" if "job" in manifest else manifest.get("kind")
    print(f"{args.artifact}: {kind} artifact, format {manifest.get('format')!r}")
    print(f"signature: {artifact.signature}")
    print("native code: " + ("runs when loaded (trusted)" if artifact.trusted else
                             "does not run; its kernels are printed from their kernel IR when "
                             "loaded (not trusted)"))
    print("versions: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["versions"].items()))
          + f", torch {manifest.get('torch')}")
    print("members: " + ", ".join(f"{n} {_kib(s)}" for n, s in sorted(artifact.sizes.items())))
    inputs = manifest.get("inputs", {})
    print(f"inputs: {summary['inputs']} tensors ({inputs.get('leaves')} arguments, "
          f"{inputs.get('closed_over')} closed over), structure {inputs.get('structure')}")
    guard = summary["guard"]
    if guard:
        shown = ", ".join(guard[:8]) + (f", ... ({len(guard) - 8} more)" if len(guard) > 8 else "")
        print(f"  specialized for: {shown}")
    print(f"outputs: {summary['outputs']}; differentiable inputs: "
          f"{summary['differentiable_inputs']}")
    job = manifest.get("job")
    if job:
        print(f"job: {job['convention']}")
        print(f"  state: {job['state']['leaves']} tensors; metrics: {', '.join(job['metrics'])}")
        data = job["data"]
        print(f"  data: {data['count']} batches ({data['source']}; {data['order']})")
        if job.get("description"):
            print(f"  description: {job['description']}")
    print(f"kernels: {summary['kernels']}")
    host = summary["host_code"]
    if summary["kernels"]:
        llvm = ", ".join(host["llvm_object_code"]) or "none (JIT from LLVM IR on load)"
        print(f"  host code: LLVM object code for {llvm}")
        shared = host["cpp_shared_objects"]
        print("  host code: C++/OpenMP shared objects: " + (", ".join(
            f"{label} ({s['target']}, {s['bytes']} bytes)" for label, s in shared.items())
            or "none (compiled from the kernel IR on load)"))
    for stage in summary["stages"]:
        _print_stage(stage, args.kernels)
    choices = manifest.get("tuning")
    if choices is not None:
        print(f"measured choices when saved: {len(choices)}")
        for line in _tuning.format_report(choices).splitlines():
            print("  " + line)
    return 0

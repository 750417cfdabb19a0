"""``metafuse compile SCRIPT.py:FUNCTION -o OUT.mfa``: compiles FUNCTION for
the script's example arguments and saves the artifact (a job artifact when
the example is a metafuse.aot.JobData); see metafuse.cli.script."""

import os
import time
import warnings

from metafuse import aot
from metafuse.cli import artifacts
from metafuse.cli import script as scripts
from metafuse.cli.errors import CliError
from metafuse.compile.compiled import CompilationFallbackWarning


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "compile", help="compile SCRIPT.py:FUNCTION into an artifact",
        description="Compile FUNCTION of SCRIPT.py for the example arguments the "
                    "script's example function returns, and save the artifact. A tuple "
                    "of arguments gives a program artifact; a metafuse.aot.JobData "
                    "gives a job artifact that `metafuse run` trains.")
    scripts.add_arguments(parser)
    parser.add_argument("-o", "--output", required=True, metavar="OUT.mfa",
                        help="the artifact to write")
    artifacts.add_trust_arguments(parser, signing=True)
    parser.set_defaults(run=run)


def run(args):
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir):
        raise CliError(f"{args.output}: directory {out_dir} does not exist")
    key = artifacts.key(args)
    loaded = scripts.load(args.spec, args.example)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CompilationFallbackWarning)
        with scripts.user_code(loaded.script, f"compiling {loaded.name}"):
            try:
                if loaded.is_job:
                    manifest = aot.save_job(loaded.function, args.output, loaded.example,
                                            key=key)
                else:
                    manifest = aot.save(loaded.function, args.output, *loaded.example,
                                        key=key)
            except Exception:  # noqa: BLE001  (a fallback explains any failure after it)
                fallback = [str(w.message) for w in caught
                            if issubclass(w.category, CompilationFallbackWarning)]
                if not fallback:
                    raise
                # The eager run that follows a fallback may fail too (e.g.
                # metafuse.grad on inputs that do not require grad); the
                # fallback is the cause.
                raise CliError(f"{loaded.name} could not be compiled: {fallback[0]}") from None
    for w in caught:  # other warnings the script raised, shown once
        if not issubclass(w.category, CompilationFallbackWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    seconds = time.perf_counter() - start
    kind = "job" if "job" in manifest else manifest["kind"]
    size = os.path.getsize(args.output)
    signed = key is not None or bool(os.environ.get(aot.KEY_VARIABLE, "").strip())
    print(f"wrote {args.output}: {kind} artifact{', signed' if signed else ''}, "
          f"{size / 1024:.1f} KiB, "
          f"{manifest['inputs']['leaves']} input tensors, {manifest['num_outputs']} "
          f"outputs (compiled and saved in {seconds:.2f} s)")
    return 0

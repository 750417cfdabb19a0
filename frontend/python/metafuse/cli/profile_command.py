"""``metafuse profile SCRIPT.py:FUNCTION``: metafuse.profile on the script's
example arguments: the fused and unfused instruction tables and totals, and
the Chrome trace of the fused run with --trace."""

from metafuse.cli import script as scripts
from metafuse.cli.errors import CliError
from metafuse.compile.profile import profile


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "profile", help="time FUNCTION fused versus unfused",
        description="Compile FUNCTION of SCRIPT.py for its example arguments (the "
                    "conventions of `metafuse compile`; a job's state and first batch) "
                    "and time every runtime instruction with fusion off and on.")
    scripts.add_arguments(parser)
    parser.add_argument("--trace", metavar="PATH",
                        help="write the fused run's Chrome trace (chrome://tracing, "
                             "Perfetto) to PATH")
    parser.add_argument("--no-backward", action="store_true",
                        help="time the forward program only")
    parser.set_defaults(run=run)


def run(args):
    loaded = scripts.load(args.spec, args.example)
    try:
        if args.trace:
            open(args.trace, "a").close()  # fail now, not after the timing
    except OSError as exc:
        raise CliError(f"--trace {args.trace}: {exc.strerror}") from None
    with scripts.user_code(loaded.script, f"profiling {loaded.name}"):
        result = profile(loaded.function, *loaded.call_args(),
                         backward=not args.no_backward, trace_path=args.trace, quiet=True)
    if result.num_events == 0:
        raise CliError(f"{loaded.name} ran eagerly: no compiled instruction was timed "
                       "(see the compilation fallback warning above)")
    print(repr(result))
    if args.trace:
        print(f"wrote the Chrome trace of the fused run to {args.trace}")
    return 0

"""The ``metafuse`` command-line tool (docs/cli.md).

    metafuse compile SCRIPT.py:FUNCTION [--example NAME] -o job.mfa
    metafuse inspect job.mfa [--dump | --json]
    metafuse run job.mfa [--steps N]
    metafuse profile SCRIPT.py:FUNCTION [--example NAME] [--trace PATH]
    metafuse cache list|clear|verify [--dir DIR]
    metafuse launch -n N script.py [args]

One module per subcommand, each with ``add_parser(subparsers)`` and
``run(args) -> exit status``. Exit status: 0 success, 2 bad usage (argparse),
1 a failure with a one-line ``metafuse: error: ...`` on stderr (missing or
corrupted file, bad SCRIPT:FUNCTION spec, a failing script: its traceback
summary follows the line).
"""

import argparse
import sys

from metafuse.cli import (cache_command, compile_command, inspect_command,
                          launch_command, profile_command, run_command)
from metafuse.cli.errors import CliError

_COMMANDS = (compile_command, inspect_command, run_command, profile_command, cache_command,
             launch_command)

__all__ = ["main", "build_parser", "CliError"]


def build_parser():
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="metafuse",
        description="Compile, inspect, run and profile metafuse programs and jobs; "
                    "manage the kernel cache; launch distributed jobs.")
    parser.add_argument("--debug", action="store_true",
                        help="show the full Python traceback of any failure")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for command in _COMMANDS:
        command.add_parser(subparsers)
    return parser


def main(argv=None):
    """Runs the tool on ``argv`` (default: sys.argv[1:]); returns the exit
    status (argparse exits with 2 itself on bad usage)."""
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except CliError as exc:
        if args.debug:
            raise
        print(f"metafuse: error: {exc}", file=sys.stderr)
        for line in exc.details:
            print(line, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("metafuse: interrupted", file=sys.stderr)
        return 130

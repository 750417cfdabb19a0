"""Loading ``SCRIPT.py:FUNCTION`` and its example arguments for ``metafuse
compile`` and ``metafuse profile``.

The convention (docs/cli.md): the script defines FUNCTION (a plain function,
compiled here with ``metafuse.compile``, or already a result of
``metafuse.compile`` / ``compile_inner_loop``) and a function returning the
example arguments, named ``example_args`` unless ``--example NAME`` says
otherwise. It returns either a tuple of arguments (a program artifact
specialized to them) or a ``metafuse.aot.JobData`` (a job artifact: FUNCTION
is a step ``step(state, *data) -> (new_state, metrics)``). The script runs
with ``__name__ == "__metafuse_script__"``, so its ``if __name__ ==
"__main__":`` block does not.
"""

import contextlib
import os
import runpy
import sys
import traceback

from metafuse.aot import JobData
from metafuse.cli.errors import CliError
from metafuse.compile.compiled import kind_of
from metafuse.compile.function import compile as compile_function

RUN_NAME = "__metafuse_script__"
DEFAULT_EXAMPLE = "example_args"


class LoadedScript:
    """``function`` (compiled), ``example`` (a tuple of arguments or a
    JobData), ``script`` (its path) and ``name`` (FUNCTION)."""

    def __init__(self, script, name, function, example):
        self.script, self.name, self.function, self.example = script, name, function, example

    @property
    def is_job(self):
        return isinstance(self.example, JobData)

    def call_args(self):
        """The arguments of one call: the example tuple, or a job's state and
        first batch."""
        if self.is_job:
            return (self.example.state,) + tuple(self.example.batches[0])
        return self.example


def add_arguments(parser):
    """The SCRIPT.py:FUNCTION argument and --example, for a subcommand."""
    parser.add_argument("spec", metavar="SCRIPT.py:FUNCTION")
    parser.add_argument("--example", default=DEFAULT_EXAMPLE, metavar="NAME",
                        help="the script's function returning the example arguments "
                             f"(default: {DEFAULT_EXAMPLE})")


def parse_spec(spec):
    """``SCRIPT.py:FUNCTION`` -> (script path, function name)."""
    script, colon, name = spec.rpartition(":")
    if not colon or not script or not name.isidentifier():
        raise CliError(f"bad spec {spec!r}: expected SCRIPT.py:FUNCTION, e.g. "
                       "train.py:meta_step")
    if not os.path.exists(script):
        raise CliError(f"{script}: no such file")
    if not os.path.isfile(script):
        raise CliError(f"{script}: not a file")
    return script, name


def _summary(script, exc):
    """The frames of a traceback from the script onwards, then the error."""
    frames = traceback.extract_tb(exc.__traceback__)
    script = os.path.abspath(script)
    starts = [i for i, f in enumerate(frames) if os.path.abspath(f.filename) == script]
    frames = frames[starts[0]:] if starts else frames[-3:]
    lines = ["traceback (most recent call last):"]
    lines += [f"  {f.filename}:{f.lineno} in {f.name}: {(f.line or '').strip()}"
              for f in frames]
    lines.append(f"{type(exc).__name__}: {exc}")
    return lines


@contextlib.contextmanager
def user_code(script, what):
    """Turns an exception raised by the script's code into a CliError that
    says ``what`` failed and carries the traceback summary."""
    try:
        yield
    except CliError:
        raise
    except (Exception, SystemExit) as exc:  # noqa: BLE001  (any failure of user code)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise CliError(f"{what} failed: {type(exc).__name__}: {first}",
                       _summary(script, exc)) from exc


def load(spec, example_name=DEFAULT_EXAMPLE):
    """Runs the script and returns a LoadedScript.

    Raises:
        CliError: bad spec, missing file, the script or the example function
            failing, a missing or non-callable name, an example of the wrong
            kind."""
    script, name = parse_spec(spec)
    directory = os.path.dirname(os.path.abspath(script))
    if directory not in sys.path:
        sys.path.insert(0, directory)  # the script may import its neighbours
    with user_code(script, f"running {script}"):
        namespace = runpy.run_path(script, run_name=RUN_NAME)
    function = namespace.get(name)
    if not callable(function):
        raise CliError(f"{script} defines no function {name!r}")
    if kind_of(function) not in ("function", "inner_loop"):
        function = compile_function(function)
    make_example = namespace.get(example_name)
    if not callable(make_example):
        raise CliError(f"{script} defines no function {example_name!r} returning the "
                       "example arguments; define it or name another with --example")
    with user_code(script, f"{example_name}()"):
        example = make_example()
    if isinstance(example, list):
        example = tuple(example)
    if not isinstance(example, (tuple, JobData)):
        raise CliError(f"{example_name}() must return a tuple of arguments or a "
                       f"metafuse.aot.JobData, got {type(example).__name__}")
    if isinstance(example, JobData) and kind_of(function) != "function":
        raise CliError(f"{name} must be a plain function or a metafuse.compile result to "
                       "make a job (a compile_inner_loop result is not a training step)")
    return LoadedScript(script, name, function, example)

"""Opening artifact files for the subcommands: every way it can fail becomes
a one-line CliError."""

import os

from metafuse import aot
from metafuse.cli.errors import CliError


def _guarded(reader, path):
    if not os.path.exists(path):
        raise CliError(f"{path}: no such file")
    if os.path.isdir(path):
        raise CliError(f"{path}: is a directory, not an artifact")
    try:
        return reader(path)
    except aot.ArtifactError as exc:
        raise CliError(str(exc).replace("metafuse.aot.load: ", "").replace(
            "metafuse.aot.load_job: ", "")) from None
    except OSError as exc:
        raise CliError(f"{path}: {exc.strerror or exc}") from None


def read(path):
    """aot.read(path) (checked, not runnable)."""
    return _guarded(aot.read, path)


def load_job(path):
    """aot.load_job(path)."""
    return _guarded(aot.load_job, path)

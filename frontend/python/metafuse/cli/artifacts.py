"""Opening artifact files for the subcommands: every way it can fail becomes
a one-line CliError. ``add_trust_arguments`` gives a subcommand the
``--key-file`` and ``--trust`` options (docs/aot.md, "Trust")."""

import os

from metafuse import aot
from metafuse.cli.errors import CliError


def add_trust_arguments(parser, signing=False):
    """--key-file PATH (hex text; default METAFUSE_ARTIFACT_KEY), and unless
    ``signing`` --trust."""
    if signing:
        parser.add_argument("--key-file", metavar="PATH",
                            help="sign the artifact with the key in PATH (hexadecimal, at "
                                 "least 16 bytes; default: METAFUSE_ARTIFACT_KEY when set)")
        return
    parser.add_argument("--key-file", metavar="PATH",
                        help="verify the artifact's signature with the key in PATH "
                             "(hexadecimal; default: METAFUSE_ARTIFACT_KEY when set); a "
                             "verified artifact runs its native code")
    parser.add_argument("--trust", action="store_true",
                        help="run the artifact's native code without a verified signature "
                             "(only for artifacts from a source you trust)")


def key(args):
    """The key --key-file names (bytes), or None (METAFUSE_ARTIFACT_KEY)."""
    if getattr(args, "key_file", None) is None:
        return None
    try:
        return aot.read_key_file(args.key_file)
    except ValueError as exc:
        raise CliError(f"--key-file: {exc}") from None


def _guarded(reader, path, **options):
    if not os.path.exists(path):
        raise CliError(f"{path}: no such file")
    if os.path.isdir(path):
        raise CliError(f"{path}: is a directory, not an artifact")
    try:
        return reader(path, **options)
    except ValueError as exc:  # ArtifactError, or METAFUSE_ARTIFACT_KEY's key
        message = str(exc).replace("metafuse.aot.load: ", "").replace(
            "metafuse.aot.load_job: ", "")
        # The Python options named as this tool's.
        message = message.replace("pass trust=True", "pass --trust").replace(
            "(key=, or ", "(--key-file, or ")
        raise CliError(message) from None
    except OSError as exc:
        raise CliError(f"{path}: {exc.strerror or exc}") from None


def read(path, key=None, trust=False):
    """aot.read(path) (checked, not runnable)."""
    return _guarded(aot.read, path, key=key, trust=trust)


def load_job(path, key=None, trust=False):
    """aot.load_job(path)."""
    return _guarded(aot.load_job, path, key=key, trust=trust)

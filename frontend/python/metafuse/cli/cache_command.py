"""``metafuse cache list|clear|verify``: the on-disk kernel cache
(metafuse.kernel_cache; its directory is $METAFUSE_CACHE_DIR or the
per-user default, or --dir)."""

import os
import time

from metafuse import kernel_cache
from metafuse.cli.errors import CliError


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "cache", help="list, clear or verify the kernel cache",
        description="The on-disk cache of JIT-compiled kernels. Default directory: "
                    "$METAFUSE_CACHE_DIR, else $XDG_CACHE_HOME/metafuse/kernels, else "
                    "~/.cache/metafuse/kernels.")
    parser.add_argument("action", choices=("list", "clear", "verify"),
                        help="list: one line per entry; clear: remove every entry; "
                             "verify: check every entry (exit status 1 if one is bad)")
    parser.add_argument("--dir", metavar="DIR", help="the cache directory to use")
    parser.set_defaults(run=run)


def run(args):
    path = args.dir or kernel_cache.directory()
    if args.dir is not None and not os.path.isdir(path):
        raise CliError(f"--dir {path}: no such directory")
    if args.action == "clear":
        removed, freed = kernel_cache.clear(path)
        print(f"{path}: removed {removed} files ({freed / 1024:.1f} KiB)")
        return 0
    entries = kernel_cache.entries(path)
    total = sum(e.size for e in entries)
    if args.action == "list":
        for e in entries:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.mtime))
            what = e.kernel or "?"
            target = (e.target or "?").split(" ", 1)[0]
            state = "" if e.problem is None else f"  BAD: {e.problem}"
            print(f"{e.name}  {e.size:>8}  {when}  {what}  {target}{state}")
        print(f"{path}: {len(entries)} entries, {total / 1024:.1f} KiB")
        return 0
    bad = [e for e in entries if e.problem is not None]
    for e in bad:
        print(f"{e.name}: {e.problem}")
    print(f"{path}: {len(entries) - len(bad)} of {len(entries)} entries intact")
    if bad:
        raise CliError(f"{len(bad)} corrupted entries in {path} (the runtime skips and "
                       "rebuilds them; `metafuse cache clear` removes everything)")
    return 0

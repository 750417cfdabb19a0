"""``python3 -m metafuse``: the metafuse command-line tool (metafuse.cli)."""

import sys

from metafuse.cli import main

if __name__ == "__main__":
    sys.exit(main())

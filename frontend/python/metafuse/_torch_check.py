"""What `import metafuse` says when the interpreter cannot run it: no torch,
a torch too old, or an extension built against another torch.

Kept free of torch imports so that it can speak before torch is found.
"""

import os
import sys

# The torch versions metafuse is built and tested against (README): PyPI's,
# pinned in tools/torch2-requirements.txt, and Debian 12's python3-torch.
TESTED_TORCH = ("2.15.0", "1.13.1")
MINIMUM_TORCH = (1, 13)

_HOW = ("Use the interpreter of the project venv made by `bash tools/setup_venv.sh` "
        "(`source .venv/bin/activate`), or install torch into this one "
        f"(`{sys.executable} -m pip install torch=={TESTED_TORCH[0]}`) and then "
        "metafuse (`pip install --no-build-isolation .` in metafuse's checkout).")


def major_minor(text):
    """(major, minor) of a torch version string such as '2.15.0+cu132'."""
    parts = []
    for piece in text.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def require_torch():
    """Raises ImportError naming the torch metafuse needs where none is usable."""
    try:
        import torch
    except ImportError as exc:
        raise ImportError(
            f"metafuse needs PyTorch (tested with torch {' and '.join(TESTED_TORCH)}), "
            f"and this interpreter ({sys.executable}) cannot import torch: {exc}. "
            + _HOW) from exc
    version = getattr(torch, "__version__", "unknown")
    if major_minor(version) < MINIMUM_TORCH:
        raise ImportError(
            f"metafuse needs torch >= {MINIMUM_TORCH[0]}.{MINIMUM_TORCH[1]} "
            f"(tested with {' and '.join(TESTED_TORCH)}); {sys.executable} has "
            f"torch {version}. " + _HOW)


def extension_error(exc):
    """The message for an extension that is missing or does not load."""
    import torch
    here = os.path.dirname(os.path.abspath(__file__))
    text = str(exc)
    if "undefined symbol" in text or "version" in text.lower():
        cause = ("it was built against another torch than this interpreter's "
                 f"torch {torch.__version__}; rebuild it against this one")
    else:
        cause = "it has not been built for this interpreter"
    return (f"metafuse's C++ extension metafuse._C in {here} does not load "
            f"({text}): {cause}. From metafuse's checkout: `bash tools/setup_venv.sh` "
            "builds the project venv (torch 2.x), `pip install --no-build-isolation .` "
            "builds into the active environment, `bash tools/build.sh` builds "
            "frontend/python for Debian's /usr/bin/python3 (torch 1.13.1).")

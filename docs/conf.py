"""Sphinx configuration of metafuse's documentation site.

Build it with the project venv (tools/setup_venv.sh installs Sphinx, MyST and
the Furo theme from tools/torch2-requirements.txt):

    .venv/bin/python -m sphinx -W --keep-going -b html docs docs/_build/html

The API reference imports the installed ``metafuse`` (or the package in
``$METAFUSE_DOCS_PACKAGE_DIR`` when that is set), so build after
``pip install --no-build-isolation .``. tests/python/docs/test_docs_site.py
runs this build with warnings as errors.
"""

import os
import sys

DOCS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(DOCS)
sys.path.insert(0, os.path.join(DOCS, "_ext"))
if os.environ.get("METAFUSE_DOCS_PACKAGE_DIR"):
    sys.path.insert(0, os.environ["METAFUSE_DOCS_PACKAGE_DIR"])

import metafuse  # noqa: E402

project = "metafuse"
author = "the metafuse authors"
copyright = "the metafuse authors"
release = metafuse.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "metafuse_docs",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "results/*.md", "**/README.md"]
# Every cross-reference must resolve (-W makes a broken one an error), except
# those into torch (no network for intersphinx) and into the extension
# module's own names (metafuse._C), which the Python API wraps.
nitpicky = True
nitpick_ignore_regex = [(r"py:.*", r"torch(\..*)?"), (r"py:.*", r"metafuse\._C(\..*)?")]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_default_options = {"members": True, "undoc-members": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_preserve_defaults = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

html_theme = "furo"
html_title = f"metafuse {release}"
html_static_path = ["_static"]
html_show_sourcelink = False
# Every page is self-contained: no web fonts, no analytics, no CDN.
html_theme_options = {"navigation_with_keys": True}

# Links to files of the repository outside docs/ (examples/, bench/...)
# are written as repository paths; they resolve to the source on GitHub-less
# checkouts as plain text, so MyST is told not to check them as documents.
myst_url_schemes = ["http", "https", "mailto"]

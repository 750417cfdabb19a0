"""The documentation site: it builds with Sphinx with warnings as errors
(broken references, public names without docstrings), its pages render in
headless Chromium without console errors, every script a page includes runs,
the results page matches its JSON, and docs/ holds only current results.

Skips, with the reason, where Sphinx (with MyST and Furo) or Chromium is not
installed (tools/setup_venv.sh and tools/install_deps.sh install them).
"""

import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest

from package_under_test import INSTALLED, PACKAGE_DIR, REPO_ROOT

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import headless_chromium  # noqa: E402

DOCS = os.path.join(REPO_ROOT, "docs")
SCREENSHOT = os.path.join(DOCS, "_static", "results_page.png")

# Scripts a page includes that another test already runs (that test file
# must name the script).
RUN_ELSEWHERE = {
    "examples/imaml_sinusoid.py": "tests/python/diff/test_implicit_examples.py",
    "examples/hyperparameter_optimization.py": "tests/python/diff/test_implicit_examples.py",
    "examples/distributed_maml.py": "tests/python/distributed/test_example.py",
}
# Scripts that another included script runs.
INCLUDED_BY_ANOTHER = {"examples/sinusoid_maml_job.py": "docs/tutorials/aot_cli.sh",
                       "docs/tutorials/aot_job.py": "docs/tutorials/aot_cli.sh"}


def _env():
    env = dict(os.environ, METAFUSE_DOCS_QUICK="1", PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    if not INSTALLED:
        env["PYTHONPATH"] = PACKAGE_DIR
    return env


def _pages():
    return sorted(glob.glob(os.path.join(DOCS, "**", "*.md"), recursive=True))


def _included_scripts():
    """{repository path of a .py or .sh file: [page, ...]} for every
    literalinclude of the site of a script under docs/ or examples/ (the
    API reference also includes package sources, which are not scripts)."""
    found = {}
    for page in _pages():
        for target in re.findall(r"```\{literalinclude\}\s+(\S+)", open(page).read()):
            path = os.path.relpath(os.path.normpath(os.path.join(os.path.dirname(page), target)),
                                   REPO_ROOT)
            if path.endswith((".py", ".sh")) and path.startswith(("docs/", "examples/")):
                found.setdefault(path, []).append(os.path.relpath(page, REPO_ROOT))
    return found


SCRIPTS = _included_scripts()


# --- what docs/ holds ---------------------------------------------------------

def test_docs_hold_only_current_results():
    dumps = [os.path.relpath(p, REPO_ROOT) for p in glob.glob(os.path.join(DOCS, "**", "*.json"),
                                                               recursive=True)
             if not os.path.relpath(p, DOCS).startswith(("results" + os.sep, "_build"))]
    assert not dumps, f"result files outside docs/results/: {dumps}"
    dated = [p for p in os.listdir(os.path.join(DOCS, "results"))
             if re.search(r"20\d\d-\d\d-\d\d|_s\d+[_.]", p)]
    assert not dated, f"docs/results/ holds dated or per-run files: {dated}"


def test_no_page_speaks_of_sessions_or_dated_runs():
    texts = _pages() + [os.path.join(REPO_ROOT, "README.md"),
                        os.path.join(REPO_ROOT, "CHANGELOG.md")]
    offending = []
    for path in texts:
        for number, line in enumerate(open(path), 1):
            if re.search(r"\bsessions?\b|\b20\d\d-\d\d-\d\d\b", line, re.I):
                offending.append(f"{os.path.relpath(path, REPO_ROOT)}:{number}: {line.strip()}")
    assert not offending, "\n".join(offending)


def test_results_page_matches_its_json():
    for name in ("speedup.svg", "memory.svg", "compile.svg", "tables.md", "headline.md"):
        assert os.path.exists(os.path.join(DOCS, "results", name)), name
    done = subprocess.run([sys.executable, os.path.join(REPO_ROOT, "tools", "render_results.py"),
                           "--check"], env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


# --- the tutorials' code --------------------------------------------------------

def test_every_included_script_is_run():
    assert len(SCRIPTS) >= 8, SCRIPTS
    for path in SCRIPTS:
        assert os.path.exists(os.path.join(REPO_ROOT, path)), f"{SCRIPTS[path]} include {path}"
        if path in RUN_ELSEWHERE:
            test = open(os.path.join(REPO_ROOT, RUN_ELSEWHERE[path])).read()
            assert os.path.splitext(os.path.basename(path))[0] in test, (
                f"{RUN_ELSEWHERE[path]} does not run {path}")
        elif path in INCLUDED_BY_ANOTHER:
            assert path in open(os.path.join(REPO_ROOT, INCLUDED_BY_ANOTHER[path])).read()


@pytest.fixture(scope="module")
def shims(tmp_path_factory):
    """A directory with `python` and `metafuse` running this interpreter on
    the package under test, for the pages' shell scripts."""
    bin_dir = tmp_path_factory.mktemp("bin")
    for name, command in (("python", f'exec "{sys.executable}" "$@"'),
                          ("metafuse", f'exec "{sys.executable}" -m metafuse "$@"')):
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{command}\n")
        path.chmod(0o755)
    return str(bin_dir)


@pytest.mark.parametrize("script", sorted(p for p in SCRIPTS if p not in RUN_ELSEWHERE
                                          and p not in INCLUDED_BY_ANOTHER))
def test_included_script_runs(script, shims, tmp_path):
    env = _env()
    env["PATH"] = shims + os.pathsep + env.get("PATH", "")
    env["METAFUSE_CACHE_DIR"] = str(tmp_path / "kernels")
    if script.endswith(".sh"):
        command = ["bash", os.path.join(REPO_ROOT, script), str(tmp_path)]
        env["STEPS"] = "20"
    else:
        command = [sys.executable, os.path.join(REPO_ROOT, script)]
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"{script} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


# --- the site ---------------------------------------------------------------------

def _missing_sphinx():
    for module in ("sphinx", "myst_parser", "furo"):
        if importlib.util.find_spec(module) is None:
            return module
    return None


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    missing = _missing_sphinx()
    if missing:
        pytest.skip(f"{missing} is not installed (tools/setup_venv.sh installs the docs "
                    "requirements of tools/torch2-requirements.txt)")
    out = tmp_path_factory.mktemp("site")
    env = _env()
    env.setdefault("METAFUSE_DOCS_PACKAGE_DIR", PACKAGE_DIR)
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-j", "1",
                           "-b", "html", DOCS, str(out)],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"the docs build failed:\n{done.stdout}\n{done.stderr}"
    return out


def test_site_has_every_page(site):
    for page in ("index", "getting_started", "results", "api/vmap", "api/cpp",
                 "tutorials/maml_vmap", "tutorials/imaml", "tutorials/hyperparameter_optimization",
                 "tutorials/aot_cli", "tutorials/distributed", "tutorials/from_torchopt",
                 "howto/profiling", "howto/memory", "howto/kernel_cache", "architecture"):
        assert (site / f"{page}.html").exists(), page
    api = (site / "api" / "cpp.html").read_text()
    assert "Artifact" in api and "Step" in api


def test_pages_render_in_chromium(site, tmp_path):
    executable = headless_chromium.find_chromium()
    if executable is None:
        pytest.skip("chromium is not installed (tools/install_deps.sh installs Debian's)")
    browser = headless_chromium.Browser(executable)
    try:
        index = browser.open((site / "index.html").as_uri())
        vmap = browser.open((site / "api" / "vmap.html").as_uri())
        shot = tmp_path / "results.png"
        results = browser.open((site / "results.html").as_uri(), screenshot=str(shot))
    finally:
        browser.close()
    for name, page in (("index", index), ("api/vmap", vmap), ("results", results)):
        assert not page["errors"], f"{name}: {page['errors']}"
        assert not page["broken_images"], f"{name}: {page['broken_images']}"
        assert page["title"].endswith("metafuse " + _version()), page["title"]
    assert index["title"].startswith("metafuse")
    assert vmap["title"].startswith("metafuse.vmap") and vmap["api_entries"] >= 1
    assert results["title"].startswith("Current results")
    assert results["tables"] >= 3 and results["images"] >= 3, results
    assert shot.stat().st_size > 50_000
    if os.environ.get("METAFUSE_DOCS_SCREENSHOT") == "1":  # refreshes the committed one
        shutil.copyfile(shot, SCREENSHOT)


def _version():
    spec = {}
    exec(open(os.path.join(PACKAGE_DIR, "metafuse", "version.py")).read(), spec)
    return spec["__version__"]

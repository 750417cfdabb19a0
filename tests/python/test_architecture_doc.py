"""docs/architecture.md and its diagram against the code: every path the
page names exists, the diagram (docs/pipeline.dot) and the page's stage
table are what the driver runs (compiler/pipeline.cc, PipelineStages(),
bound as metafuse._C._compiler.pipeline_stages()), the layer lines are the
ones tests/python/test_layering.py checks, and every grep the page says
prints nothing does."""

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

import test_layering

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC_PATH = os.path.join(ROOT, "docs", "architecture.md")
sys.path.insert(0, os.path.join(ROOT, "tools"))
import render_pipeline  # noqa: E402

# Top-level folders whose paths the page names.
TOPS = ("bench", "compiler", "docs", "examples", "frontend", "kernels", "runtime", "tests",
        "tools", "tree")
URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+")
# A repository path: a top-level folder, then path characters, optionally a
# brace list (pipeline.{h,cc}). Not inside a longer word or path, not a
# Bazel label (//compiler).
REPO_PATH = re.compile(r"(?<![\w./~-])((?:%s)/[\w.*/-]*(?:\{[\w.,]+\}[\w.]*)?)" % "|".join(TOPS))
BAZEL_LABEL = re.compile(r"(?<![\w:/])//([\w/]+)(?::[\w.+-]+)?")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
STEM_EXTENSIONS = (".h", ".cc", ".py")


def doc_text():
    with open(DOC_PATH, encoding="utf-8") as f:
        return f.read()


def expand_braces(path):
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [p for choice in m.group(1).split(",")
            for p in expand_braces(path[:m.start()] + choice + path[m.end():])]


def repo_paths(text):
    """The repository paths `text` names, braces expanded, URLs ignored."""
    text = URL.sub(" ", text)
    found = []
    for match in REPO_PATH.findall(text):
        for path in expand_braces(match.rstrip(".,;:")):
            found.append(path)
    return found


def path_exists(path):
    """A file or folder; a stem counts if stem.h, .cc or .py exists; a glob
    if it matches something."""
    full = os.path.join(ROOT, path.rstrip("/"))
    if any(c in path for c in "*?["):
        return bool(glob.glob(full))
    if os.path.exists(full):
        return not path.endswith("/") or os.path.isdir(full)
    return any(os.path.isfile(full + ext) for ext in STEM_EXTENSIONS)


def fenced_blocks(text):
    """(info string, lines) of every fenced code block."""
    return [(m.group(1), m.group(2).split("\n"))
            for m in re.finditer(r"^```(\w*)\n(.*?)\n```$", text, re.M | re.S)]


def section(text, heading):
    start = text.index(heading + "\n")
    end = text.find("\n## ", start + len(heading))
    return text[start:] if end < 0 else text[start:end]


def tree_paths(lines):
    """The paths of a folder tree: one entry per line, two spaces of indent
    per level, a comment after two or more spaces."""
    paths, parents = [], []
    for line in lines:
        m = re.match(r"^((?:  )*)([\w.{},*-]+(?:/[\w.{},*-]+)*/?)(?:\s{2,}\S.*)?$", line)
        assert m, f"docs/architecture.md: a line of the folder tree is not an entry: {line!r}"
        depth = len(m.group(1)) // 2
        assert depth <= len(parents), f"docs/architecture.md: tree line indented too far: {line!r}"
        del parents[depth:]
        path = "/".join(parents + [m.group(2)])
        paths.extend(expand_braces(path))
        if path.endswith("/"):
            parents.append(m.group(2).rstrip("/"))
    return paths


def stage_table(text):
    """The (phase, stage, file) rows of the page's stage table."""
    rows, inside = [], False
    for line in text.splitlines():
        cells = None
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells == ["phase", "stage", "file"]:
            inside = True
            continue
        if inside:
            if cells is None:
                break
            if set("".join(cells)) <= set("-: "):
                continue
            assert len(cells) == 3, f"docs/architecture.md: stage table row is not 3 cells: {line}"
            rows.append((cells[0], cells[1], cells[2].strip("`")))
    return rows


def extension_stages():
    C = pytest.importorskip("metafuse._C")
    if not hasattr(C._compiler, "pipeline_stages"):
        pytest.skip(f"the built extension ({os.path.basename(C.__file__)}) has no "
                    f"_compiler.pipeline_stages(): rebuild it (tools/build.sh)")
    return [tuple(stage) for stage in C._compiler.pipeline_stages()]


def runtime_layer_line():
    levels = {}
    for name, level in test_layering.RUNTIME_LAYERS.items():
        levels.setdefault(level, []).append(name)
    return " < ".join(names[0] if len(names) == 1 else "{" + ", ".join(names) + "}"
                      for _, names in sorted(levels.items()))


def part_line():
    order = sorted(test_layering.MAY_INCLUDE, key=lambda p: len(test_layering.MAY_INCLUDE[p]))
    for i, part in enumerate(order):
        # A chain: each part may include exactly the parts before it.
        assert test_layering.MAY_INCLUDE[part] == set(order[:i]), test_layering.MAY_INCLUDE
    return " < ".join(order + ["frontend"])


# (a) paths


def test_the_path_finder():
    text = ("`runtime/executor/program.cc`, compiler/pipeline.{h,cc}. See "
            "https://github.com/x/tests/y and //compiler/codegen:foo; tests/python/. "
            "a subtree/x, frontend/core/aot")
    assert repo_paths(text) == ["runtime/executor/program.cc", "compiler/pipeline.h",
                                "compiler/pipeline.cc", "tests/python/", "frontend/core/aot"]
    assert path_exists("compiler/pipeline")  # a stem: pipeline.h, pipeline.cc
    assert path_exists("runtime/tuning/")
    assert not path_exists("runtime/program_code.h")  # moved to runtime/program_value/
    assert not path_exists("compiler/pipeline.cc/")  # a file is not a folder
    assert tree_paths(["a/", "  b/  note", "    c.{h,cc}", "  d", "e"]) == [
        "a/", "a/b/", "a/b/c.h", "a/b/c.cc", "a/d", "e"]


def test_every_path_the_page_names_exists():
    paths = repo_paths(doc_text())
    assert len(paths) > 50, "the path finder found almost nothing: is the regex broken?"
    missing = sorted({p for p in paths if not path_exists(p)})
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_every_folder_of_the_tree_exists():
    blocks = fenced_blocks(section(doc_text(), "## The folders"))
    assert blocks, "docs/architecture.md: no folder tree under '## The folders'"
    paths = tree_paths(blocks[0][1])
    assert {"runtime/", "compiler/", "frontend/"} <= set(paths)
    missing = [p for p in paths if not path_exists(p)]
    assert not missing, f"docs/architecture.md's folder tree names what does not exist: {missing}"
    # Every runtime layer is in the tree.
    layers = {p for p in paths if re.fullmatch(r"runtime/\w+/", p)}
    assert layers == {f"runtime/{layer}/" for layer in test_layering.RUNTIME_LAYERS}


def test_every_bazel_label_and_link_resolves():
    text = URL.sub(" ", doc_text())
    labels = BAZEL_LABEL.findall(text)
    assert labels, "docs/architecture.md names no Bazel target"
    missing = [p for p in labels if not os.path.isfile(os.path.join(ROOT, p, "BUILD"))]
    assert not missing, f"docs/architecture.md names Bazel packages without a BUILD: {missing}"
    links = [l for l in MD_LINK.findall(text) if not l.startswith("#")]
    assert "pipeline.png" in links or "pipeline.svg" in links, "the diagram is not embedded"
    broken = [l for l in links if not os.path.exists(os.path.join(ROOT, "docs", l.split("#")[0]))]
    assert not broken, f"docs/architecture.md links to missing files: {broken}"


# (b) and (c) the diagram, the table and the driver


def test_render_dot():
    stages = [("p", "a", "x.cc"), ("p", "b", "y.cc"), ("generic", "c", "z.cc"),
              ("specialize", "d \"q\"", "w.cc")]
    dot = render_pipeline.render_dot(stages)
    assert dot == render_pipeline.render_dot(list(stages))  # deterministic
    assert dot.count("subgraph cluster_") == 3
    assert 's0 [label="a\\nx.cc"];' in dot and 's3 [label="d \\"q\\"\\nw.cc"];' in dot
    edges = re.findall(r"^  (\w+) -> (\w+)", dot, re.M)
    assert edges[:4] == [("capture", "s0"), ("s0", "s1"), ("s1", "s2"), ("s2", "s3")]
    assert ("s3", "runtime") in edges and ("s3", "aot") in edges
    for fixed in ("frontend/python/metafuse/compile/capture.py", "runtime/executor/program.cc",
                  "runtime/program_value/program_serialization.cc",
                  "frontend/python/metafuse/distributed/"):
        assert fixed in dot
    with pytest.raises(ValueError, match="not contiguous"):
        render_pipeline.render_dot([("p", "a", "x"), ("q", "b", "y"), ("p", "c", "z")])


def test_check_reports_a_stale_diagram(tmp_path):
    stages = [("prepare", "a", "x.cc"), ("generic", "b", "y.cc")]
    path = tmp_path / "pipeline.dot"
    assert "is missing" in render_pipeline.check(stages, str(path))
    path.write_text(render_pipeline.render_dot(stages))
    assert render_pipeline.check(stages, str(path)) is None
    path.write_text(render_pipeline.render_dot(stages[:1]))
    assert "render_pipeline.py" in render_pipeline.check(stages, str(path))


def test_the_page_table_is_the_diagram():
    rows = stage_table(doc_text())
    assert len(rows) > 20, "docs/architecture.md: the stage table is missing or cut short"
    problem = render_pipeline.check(rows)
    assert problem is None, (f"docs/architecture.md's stage table does not render to "
                             f"docs/pipeline.dot: {problem}")


def test_the_diagram_is_what_the_driver_runs():
    stages = extension_stages()
    problem = render_pipeline.check(stages)
    assert problem is None, problem


def test_the_page_table_is_what_the_driver_runs():
    stages = extension_stages()
    assert stage_table(doc_text()) == stages, (
        "docs/architecture.md's stage table is not metafuse._C._compiler.pipeline_stages()")


def check_stage_files(stages):
    import torch
    torch_include = os.path.join(os.path.dirname(torch.__file__), "include")
    missing = []
    for phase, name, file in stages:
        if file.split("/")[0] in TOPS:
            if not os.path.isfile(os.path.join(ROOT, file)):
                missing.append(f"{phase}/{name}: {file}")
        elif file.startswith("torch/"):  # a LibTorch pass
            header = os.path.join(torch_include, file)
            if os.path.isdir(torch_include) and not os.path.isfile(header):
                missing.append(f"{phase}/{name}: {file} (not in {torch_include})")
        else:
            missing.append(f"{phase}/{name}: {file} (neither a repository path nor LibTorch's)")
    return missing


def test_every_stage_file_of_the_driver_exists():
    stages = extension_stages()
    assert check_stage_files(stages) == []


def test_every_stage_file_of_the_page_exists():
    rows = stage_table(doc_text())
    assert rows
    assert check_stage_files(rows) == []
    assert check_stage_files([("p", "n", "compiler/no_such_pass.cc")]) != []


# (d) the layering the page states


def test_the_page_states_the_layers_test_layering_checks():
    fenced = [line.strip() for _, lines in fenced_blocks(doc_text()) for line in lines]
    runtime = runtime_layer_line()
    assert runtime == "base < program_value < tuning < {compute, jit, cuda} < executor"
    assert runtime in fenced, (f"docs/architecture.md: no fenced line {runtime!r} "
                               f"(tests/python/test_layering.py's RUNTIME_LAYERS)")
    parts = part_line()
    assert parts in fenced, (f"docs/architecture.md: no fenced line {parts!r} "
                             f"(tests/python/test_layering.py's MAY_INCLUDE)")
    # No other layer line, stale or hand-written.
    for line in fenced:
        if re.match(r"^(base|tree)\s*<", line):
            assert line in (runtime, parts), f"docs/architecture.md: layer line {line!r}"
    assert "tests/python/test_layering.py" in doc_text()


def grep_claims(text):
    """The grep commands the page says print nothing."""
    claims = []
    for paragraph in re.split(r"\n\s*\n", text):
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z`*])", " ".join(paragraph.split())):
            if re.search(r"\bprints? nothing\b", sentence):
                claims += re.findall(r"`(grep [^`]+)`", sentence)
    return claims


def test_every_grep_the_page_says_prints_nothing_does():
    assert grep_claims("Two checks: `grep -rn x a/` and `grep -l y b/` print nothing. "
                       "`grep z c/` prints a line.") == ["grep -rn x a/", "grep -l y b/"]
    if shutil.which("grep") is None:
        pytest.skip("no grep on PATH")
    for command in grep_claims(doc_text()):
        done = subprocess.run(shlex.split(command), cwd=ROOT, capture_output=True, text=True,
                              timeout=30)
        assert done.returncode in (0, 1), f"`{command}` failed: {done.stderr}"
        assert done.stdout == "", (f"docs/architecture.md says `{command}` prints nothing; "
                                   f"it prints:\n{done.stdout}")


def test_nothing_is_marked_next():
    assert "(next)" not in doc_text()

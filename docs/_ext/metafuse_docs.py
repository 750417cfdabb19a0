"""metafuse's own Sphinx extension.

* Every public object autodoc documents must have a docstring: one without
  is a warning (an error under ``-W``).
* Every name in ``metafuse.__all__`` must be documented somewhere on the
  site (``py:`` object or module): a missing one is a warning.
* ``{cpp-header} path`` renders a public C++ header of the repository: its
  opening comment, then each public declaration with the comment above it.
"""

import os
import re

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx.util import logging

logger = logging.getLogger(__name__)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# --- docstrings of public names ------------------------------------------------

def _check_docstring(app, what, name, obj, options, lines):
    if what == "module" or any(part.startswith("_") for part in name.split(".")):
        return
    if not any(line.strip() for line in lines):
        logger.warning(f"public {what} {name} has no docstring", type="metafuse",
                       subtype="docstring")


def _check_all_documented(app, env):
    import metafuse

    domain = env.get_domain("py")
    documented = set(domain.objects) | set(getattr(domain, "modules", {}))
    for name in metafuse.__all__:
        if f"metafuse.{name}" not in documented:
            logger.warning(f"metafuse.{name} (in metafuse.__all__) is not in the API reference",
                           type="metafuse", subtype="api")


# --- C++ headers -------------------------------------------------------------------

def _comment_text(lines):
    return "\n".join(re.sub(r"^\s*// ?", "", line) for line in lines).strip()


def parse_header(text):
    """(opening comment, [(declaration, comment)]) of a C++ header: the
    declarations are the public ones inside namespaces (private and
    protected sections, forward declarations, includes and preprocessor
    lines are left out); each comes with the comment block right above it."""
    lines = text.splitlines()
    i = 0
    opening = []
    while i < len(lines) and lines[i].lstrip().startswith("//"):
        opening.append(lines[i])
        i += 1
    declarations, comment, private, follows = [], [], False, False
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        i += 1
        grouped, follows = follows, False
        if stripped.startswith("//"):
            comment.append(line)
            continue
        if not stripped or stripped.startswith("#") or stripped.startswith("namespace") \
                or stripped.startswith("}"):
            if stripped.startswith("};"):
                private = False
            comment = [] if not stripped or stripped.startswith("}") else comment
            continue
        if stripped in ("public:", "private:", "protected:"):
            private = stripped != "public:"
            comment = []
            continue
        # a declaration: up to its ';', or its '{' (a class or an inline body)
        decl = [line.rstrip()]
        while not re.search(r"[;{}]\s*(//.*)?$", decl[-1]) and i < len(lines):
            decl.append(lines[i].rstrip())
            i += 1
        source = "\n".join(decl)
        is_type = re.match(r"\s*(struct|class)\s+\w+[^;]*\{\s*$", source)
        forward = re.match(r"\s*(struct|class)\s+\w+\s*;\s*$", source)
        if is_type and stripped.startswith("struct"):
            # a struct's members are part of its declaration: shown whole
            while i < len(lines) and not lines[i].strip().startswith("};"):
                decl.append(lines[i].rstrip())
                i += 1
            decl.append(lines[i].rstrip() if i < len(lines) else "};")
            i += 1
            source = "\n".join(decl)
            is_type = None  # nothing of it stays open
        elif is_type:
            source = source.rstrip(" {") + " { ... };"
        if not private and not forward:
            if grouped and not comment and not is_type and declarations:
                # a declaration right under another shares its comment
                previous, text = declarations[-1]
                declarations[-1] = (previous + "\n" + _dedent(source), text)
            else:
                declarations.append((_dedent(source), _comment_text(comment)))
            follows = not is_type
        if is_type:
            private = stripped.startswith("class")  # until its 'public:'
        comment = []
    return _comment_text(opening), declarations


def _dedent(source):
    lines = source.splitlines()
    indent = min(len(l) - len(l.lstrip()) for l in lines if l.strip())
    return "\n".join(l[indent:] for l in lines)


class CppHeader(Directive):
    """``{cpp-header} frontend/metafuse/aot.h``: the header's comments and
    public declarations, as a section of the page."""

    required_arguments = 1

    def run(self):
        path = self.arguments[0]
        full = os.path.join(REPO, path)
        env = self.state.document.settings.env
        env.note_dependency(full)
        opening, declarations = parse_header(open(full).read())
        out = []
        intro = nodes.literal_block(opening, opening)
        intro["language"] = "text"
        out.append(nodes.paragraph("", "", nodes.strong(text="#include "),
                                   nodes.literal(text=f'"{os.path.relpath(path, "frontend")}"')))
        out.append(intro)
        items = nodes.definition_list()
        for decl, comment in declarations:
            code = nodes.literal_block(decl, decl)
            code["language"] = "cpp"
            term = nodes.term("", "")
            term += code
            body = nodes.definition()
            if comment:
                for para in comment.split("\n\n"):
                    body += nodes.paragraph(text=" ".join(para.split()))
            items += nodes.definition_list_item("", term, body)
        out.append(items)
        return out


def setup(app):
    app.connect("autodoc-process-docstring", _check_docstring)
    app.connect("env-check-consistency", _check_all_documented)
    app.add_directive("cpp-header", CppHeader)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

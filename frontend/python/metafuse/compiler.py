"""The compile front's public names under their first module name
(``from metafuse.compiler import CompilationFallbackWarning`` keeps
working); the implementation is the package metafuse/compile/:
capture.py and fx_graph.py (capture), optimizer_spec.py, closure.py,
compiled.py (the CompiledCallable protocol and the shared base),
inner_loop.py, function.py, gradient.py, profile.py."""

from metafuse.compile.compiled import CompilationFallbackWarning, CompiledCallable
from metafuse.compile.function import CompiledFunction, compile  # noqa: A004
from metafuse.compile.gradient import grad
from metafuse.compile.inner_loop import CompiledInnerLoop, compile_inner_loop
from metafuse.compile.profile import ProfileResult, profile

__all__ = ["compile_inner_loop", "compile", "grad", "profile", "CompiledInnerLoop",
           "CompiledFunction", "CompiledCallable", "CompilationFallbackWarning",
           "ProfileResult"]

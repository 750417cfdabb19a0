"""Implicit differentiation: meta-gradients through the optimality conditions
of an inner problem (the implicit function theorem), with matrix-free linear
solvers; memory does not grow with the number of inner steps."""

from metafuse.diff.implicit import linalg, linear_solve
from metafuse.diff.implicit.custom_root import custom_root
from metafuse.diff.implicit.linalg import ConvergenceWarning
from metafuse.diff.implicit.module import ImplicitMetaGradientModule
from metafuse.diff.implicit import nn  # noqa: F401  (TorchOpt's submodule)

__all__ = ["custom_root", "linalg", "linear_solve", "ConvergenceWarning",
           "ImplicitMetaGradientModule"]

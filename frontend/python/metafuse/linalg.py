"""Linear algebra on pytrees (TorchOpt's ``torchopt.linalg``): conjugate
gradient and the Neumann series, run in C++. The same functions as
:mod:`metafuse.diff.implicit`'s ``linalg``."""

from metafuse.diff.implicit.linalg import ConvergenceWarning, cg, ns, ns_inv

__all__ = ["cg", "ns", "ns_inv", "ConvergenceWarning"]

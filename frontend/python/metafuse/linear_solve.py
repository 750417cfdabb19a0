"""Linear solvers for implicit differentiation (TorchOpt's
``torchopt.linear_solve``); the same as
:mod:`metafuse.diff.implicit`'s ``linear_solve``."""

from metafuse.diff.implicit.linear_solve import solve_cg, solve_inv, solve_normal_cg

__all__ = ["solve_cg", "solve_normal_cg", "solve_inv"]

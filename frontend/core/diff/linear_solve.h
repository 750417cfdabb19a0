// Matrix-free linear solvers over lists of tensors (the leaves of a pytree),
// the core of implicit differentiation: the operator is only ever applied,
// as a callback (for instance a Hessian- or Jacobian-vector product computed
// by autograd), never formed, except by DenseSolve on request.
#pragma once

#include <functional>
#include <vector>

#include <ATen/core/Tensor.h>

namespace metafuse::diff {

using TensorList = std::vector<at::Tensor>;
using MatVec = std::function<TensorList(const TensorList&)>;

struct SolveOptions {
  double ridge = 0.0;    // solves (A + ridge I) x = b
  int64_t maxiter = -1;  // -1: 10 x the number of unknowns
  double rtol = 1e-10;   // stop when |residual| <= max(rtol |b|, atol)
  double atol = 0.0;
  TensorList init;       // starting point; empty: zeros
  // ConjugateGradient only: a preconditioner M ~ A^-1 (symmetric positive
  // definite), applied to the residual; empty: none.
  MatVec preconditioner;
};

struct SolveResult {
  TensorList x;
  int64_t iterations = 0;
  double residual = 0.0;  // |b - (A + ridge I) x| at exit
  double target = 0.0;    // the residual the tolerances asked for
  bool converged = false;
};

// Conjugate gradient for symmetric positive (semi)definite A; preconditioned
// when options.preconditioner is set.
SolveResult ConjugateGradient(const MatVec& A, const TensorList& b,
                              const SolveOptions& options);

// CG on the normal equations (A^T A + ridge I) x = A^T b, for any A;
// `At` applies the transpose.
SolveResult NormalConjugateGradient(const MatVec& A, const MatVec& At,
                                    const TensorList& b,
                                    const SolveOptions& options);

// x = alpha sum_k (I - alpha (A + ridge I))^k b, the Neumann series of the
// inverse; converges when the spectral radius of I - alpha A is below 1.
SolveResult NeumannSeries(const MatVec& A, const TensorList& b, double alpha,
                          const SolveOptions& options);

// Forms A (one matvec per unknown) and solves densely with LU: exact, for
// small problems.
SolveResult DenseSolve(const MatVec& A, const TensorList& b,
                       const SolveOptions& options);

// Inner product and norm over all leaves.
at::Tensor TreeVdot(const TensorList& a, const TensorList& b);
double TreeNorm(const TensorList& a);

}  // namespace metafuse::diff

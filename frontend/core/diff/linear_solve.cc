#include "frontend/core/diff/linear_solve.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>

namespace metafuse::diff {
namespace {

int64_t NumUnknowns(const TensorList& b) {
  int64_t n = 0;
  for (const auto& t : b) n += t.numel();  // a 0-dim tensor counts as 1
  return n;
}

void CheckOperands(const TensorList& b, const SolveOptions& o,
                   const char* solver) {
  TORCH_CHECK(!b.empty(), solver, ": the right-hand side has no tensors");
  TORCH_CHECK(o.ridge >= 0, solver, ": `ridge` must be >= 0, got ", o.ridge);
  TORCH_CHECK(o.rtol >= 0 && o.atol >= 0, solver,
              ": tolerances must be >= 0, got rtol=", o.rtol, " atol=", o.atol);
  TORCH_CHECK(o.maxiter == -1 || o.maxiter >= 1, solver,
              ": `maxiter` must be >= 1, got ", o.maxiter);
  if (!o.init.empty()) {
    TORCH_CHECK(o.init.size() == b.size(), solver, ": `init` has ",
                o.init.size(), " leaves, the right-hand side ", b.size());
    for (size_t i = 0; i < b.size(); ++i) {
      TORCH_CHECK(o.init[i].sizes() == b[i].sizes(), solver, ": `init` leaf ",
                  i, " has shape ", o.init[i].sizes(), ", expected ",
                  b[i].sizes());
    }
  }
}

int64_t MaxIter(const TensorList& b, const SolveOptions& o) {
  return o.maxiter > 0 ? o.maxiter : std::max<int64_t>(10 * NumUnknowns(b), 1);
}

// (A + ridge I) x, with a check that A preserves the structure.
TensorList Apply(const MatVec& A, const TensorList& x, double ridge,
                 const char* solver) {
  TensorList y = A(x);
  TORCH_CHECK(y.size() == x.size(), solver, ": the operator returned ",
              y.size(), " leaves for ", x.size(), " unknowns");
  for (size_t i = 0; i < x.size(); ++i) {
    TORCH_CHECK(y[i].sizes() == x[i].sizes(), solver,
                ": the operator changed the shape of leaf ", i, " from ",
                x[i].sizes(), " to ", y[i].sizes());
    if (ridge != 0) y[i] = y[i] + ridge * x[i];
  }
  return y;
}

TensorList Axpy(double alpha, const TensorList& x, const TensorList& y) {
  TensorList out;
  out.reserve(x.size());
  for (size_t i = 0; i < x.size(); ++i) out.push_back(y[i] + alpha * x[i]);
  return out;
}

TensorList Start(const TensorList& b, const SolveOptions& o) {
  if (!o.init.empty()) return o.init;
  TensorList x;
  for (const auto& t : b) x.push_back(at::zeros_like(t));
  return x;
}

}  // namespace

at::Tensor TreeVdot(const TensorList& a, const TensorList& b) {
  at::Tensor total = at::zeros({}, a.empty() ? at::kDouble : a[0].scalar_type());
  for (size_t i = 0; i < a.size(); ++i) {
    total = total + (a[i].reshape(-1) * b[i].reshape(-1)).sum();
  }
  return total;
}

double TreeNorm(const TensorList& a) {
  return std::sqrt(std::max(0.0, TreeVdot(a, a).item<double>()));
}

SolveResult ConjugateGradient(const MatVec& A, const TensorList& b,
                              const SolveOptions& o) {
  CheckOperands(b, o, "cg");
  SolveResult r;
  r.target = std::max(o.rtol * TreeNorm(b), o.atol);
  r.x = Start(b, o);
  TensorList res = Axpy(-1.0, Apply(A, r.x, o.ridge, "cg"), b);
  // z = M res (M = I without a preconditioner).
  auto precondition = [&](const TensorList& v) {
    return o.preconditioner ? Apply(o.preconditioner, v, 0.0, "cg (M)") : v;
  };
  TensorList z = precondition(res);
  TensorList p = z;
  double rr = TreeVdot(res, res).item<double>();
  double rz = o.preconditioner ? TreeVdot(res, z).item<double>() : rr;
  const int64_t maxiter = MaxIter(b, o);
  while (std::sqrt(rr) > r.target && r.iterations < maxiter) {
    TensorList Ap = Apply(A, p, o.ridge, "cg");
    const double pAp = TreeVdot(p, Ap).item<double>();
    // A breakdown (p^T A p <= 0) means A is not positive definite here.
    if (!(pAp > 0)) break;
    const double alpha = rz / pAp;
    r.x = Axpy(alpha, p, r.x);
    res = Axpy(-alpha, Ap, res);
    rr = TreeVdot(res, res).item<double>();
    z = precondition(res);
    const double rz_next = o.preconditioner ? TreeVdot(res, z).item<double>() : rr;
    p = Axpy(rz_next / rz, p, z);  // p = z + beta p
    rz = rz_next;
    ++r.iterations;
  }
  r.residual = std::sqrt(rr);
  r.converged = r.residual <= r.target;
  return r;
}

SolveResult NormalConjugateGradient(const MatVec& A, const MatVec& At,
                                    const TensorList& b,
                                    const SolveOptions& o) {
  CheckOperands(b, o, "normal_cg");
  MatVec AtA = [&](const TensorList& x) {
    return Apply(At, Apply(A, x, 0.0, "normal_cg"), 0.0, "normal_cg");
  };
  TensorList Atb = Apply(At, b, 0.0, "normal_cg");
  SolveResult r = ConjugateGradient(AtA, Atb, o);
  // Report the residual of the original system, as users read it.
  r.residual = TreeNorm(Axpy(-1.0, Apply(A, r.x, 0.0, "normal_cg"), b));
  return r;
}

SolveResult NeumannSeries(const MatVec& A, const TensorList& b, double alpha,
                          const SolveOptions& o) {
  CheckOperands(b, o, "neumann");
  TORCH_CHECK(alpha > 0, "neumann: `alpha` must be > 0, got ", alpha);
  SolveResult r;
  r.target = std::max(o.rtol * TreeNorm(b), o.atol);
  TensorList term;
  for (const auto& t : b) term.push_back(alpha * t);
  r.x = term;
  const int64_t maxiter = MaxIter(b, o);
  // term_{k+1} = (I - alpha (A + ridge)) term_k; x accumulates the terms.
  while (r.iterations < maxiter) {
    term = Axpy(-alpha, Apply(A, term, o.ridge, "neumann"), term);
    r.x = Axpy(1.0, term, r.x);
    ++r.iterations;
    if (TreeNorm(term) <= alpha * r.target) break;
  }
  r.residual = TreeNorm(Axpy(-1.0, Apply(A, r.x, o.ridge, "neumann"), b));
  r.converged = r.residual <= r.target;
  return r;
}

SolveResult DenseSolve(const MatVec& A, const TensorList& b,
                       const SolveOptions& o) {
  CheckOperands(b, o, "inv");
  const int64_t n = NumUnknowns(b);
  TORCH_CHECK(n <= 20000, "inv: ", n, " unknowns is too many to form the "
              "matrix; use cg or normal_cg");
  std::vector<int64_t> offsets = {0};
  for (const auto& t : b) offsets.push_back(offsets.back() + t.numel());
  auto unflatten = [&](const at::Tensor& flat) {
    TensorList out;
    for (size_t i = 0; i < b.size(); ++i) {
      out.push_back(flat.slice(0, offsets[i], offsets[i + 1]).reshape(b[i].sizes()));
    }
    return out;
  };
  auto flatten = [&](const TensorList& leaves) {
    TensorList flat;
    for (const auto& t : leaves) flat.push_back(t.reshape(-1));
    return at::cat(flat);
  };
  const at::Tensor flat_b = flatten(b);
  at::Tensor matrix = at::empty({n, n}, flat_b.options());
  at::Tensor unit = at::zeros({n}, flat_b.options());
  for (int64_t j = 0; j < n; ++j) {
    unit.zero_();
    unit[j] = 1;
    matrix.select(1, j).copy_(flatten(Apply(A, unflatten(unit), o.ridge, "inv")));
  }
  SolveResult r;
  r.x = unflatten(at::linalg_solve(matrix, flat_b));
  r.iterations = n;
  r.target = std::max(o.rtol * TreeNorm(b), o.atol);
  r.residual = (matrix.matmul(flatten(r.x)) - flat_b).norm().item<double>();
  r.converged = std::isfinite(r.residual);
  return r;
}

}  // namespace metafuse::diff

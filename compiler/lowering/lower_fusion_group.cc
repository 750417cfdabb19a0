#include "compiler/lowering/lower_fusion_group.h"
#include "compiler/ir/ir_helpers.h"

#include "compiler/ir/op_table.h"

#include <algorithm>
#include <cstdio>
#include <unordered_map>
#include <variant>

#include <torch/csrc/jit/ir/constants.h>

#include "absl/strings/str_cat.h"
#include "compiler/fusion/fusion_group.h"
#include "compiler/ir/shape_facts.h"
#include "runtime/executor/kernel_target.h"

namespace metafuse::compiler {

using torch::jit::Node;
using torch::jit::Value;
namespace aten = torch::jit::aten;
namespace kir = codegen::kir;

namespace {

bool IsNumber(const Value* v) {
  const auto kind = v->type()->kind();
  return kind == c10::TypeKind::FloatType || kind == c10::TypeKind::IntType;
}
bool IsFloat(c10::ScalarType t) { return t == at::kFloat || t == at::kDouble; }

bool IsConstantNone(const Value* v) {
  return v->node()->kind() == torch::jit::prim::Constant && v->type()->kind() == c10::TypeKind::NoneType;
}

using Form = FuserForm;

// The fuser's form of `node`, from the op table; nullopt when not fused.
std::optional<Form> FormOf(const Node* node) {
  const PrimitiveOp* op = FindPrimitiveOp(node);
  if (op == nullptr || op->fuser_form == FuserForm::kNone) return std::nullopt;
  return op->fuser_form;
}

c10::ScalarType DTypeOf(const Value* v) { return *CompleteTensorType(v)->scalarType(); }

kir::DType KirType(c10::ScalarType t) {
  return t == at::kDouble ? kir::DType::kF64 : kir::DType::kF32;
}

}  // namespace

std::optional<BroadcastAccess> ClassifyBroadcast(c10::IntArrayRef sizes,
                                                 c10::IntArrayRef loop) {
  const int64_t rank = static_cast<int64_t>(loop.size());
  const int64_t offset = rank - static_cast<int64_t>(sizes.size());
  std::vector<int64_t> s(loop.size(), 1);  // sizes left-padded with ones
  for (int64_t d = 0; d < static_cast<int64_t>(sizes.size()); ++d) {
    if (d + offset < 0) {
      if (sizes[d] != 1) return std::nullopt;
      continue;
    }
    if (sizes[d] != loop[d + offset] && sizes[d] != 1) return std::nullopt;
    s[d + offset] = sizes[d];
  }
  int64_t numel = 1, loop_numel = 1;
  for (int64_t d = 0; d < rank; ++d) numel *= s[d], loop_numel *= loop[d];
  if (numel == loop_numel) return BroadcastAccess{kir::Access::kElement, 1};
  if (numel == 1) return BroadcastAccess{kir::Access::kBroadcast, 1};
  // The loop's dims of size > 1 in runs that the input matches (M) or
  // broadcasts over (B); a dim of size 1 belongs to neither.
  struct Run {
    bool match;
    int64_t size;
  };
  std::vector<Run> runs;
  for (int64_t d = 0; d < rank; ++d) {
    if (loop[d] == 1) continue;
    const bool match = s[d] == loop[d];
    if (!runs.empty() && runs.back().match == match) {
      runs.back().size *= loop[d];
    } else {
      runs.push_back({match, loop[d]});
    }
  }
  const auto pattern = [&](std::initializer_list<bool> want) {
    if (runs.size() != want.size()) return false;
    size_t r = 0;
    for (bool m : want) if (runs[r++].match != m) return false;
    return true;
  };
  if (pattern({false, true})) return BroadcastAccess{kir::Access::kInner, runs[1].size};
  if (pattern({true, false})) return BroadcastAccess{kir::Access::kOuter, runs[1].size};
  if (pattern({true, false, true})) {
    return BroadcastAccess{kir::Access::kMiddle, runs[2].size, runs[1].size};
  }
  if (pattern({false, true, false})) {
    return BroadcastAccess{kir::Access::kPeriodic, runs[2].size, runs[1].size};
  }
  return std::nullopt;
}

bool IsFusibleComparison(const Node* node) {
  auto form = FormOf(node);
  return form && *form == Form::kCompare && IsFusibleNode(node);
}

bool IsFusibleNode(const Node* node) {
  auto form = FormOf(node);
  if (!form || node->outputs().size() != 1) return false;
  auto out = CompleteTensorType(node->output());
  // Fused where this build has a kernel compiler for the device (the LLVM JIT
  // for the CPU, NVRTC for CUDA); elsewhere the node runs as its operator.
  if (!out || !runtime::CanFuseOn(*out->device(), runtime::BuiltKernelBackends())) {
    return false;
  }
  const c10::Device device = *out->device();
  const c10::ScalarType out_dtype = *out->scalarType();
  std::vector<const Value*> tensors;
  for (const Value* in : node->inputs()) {
    if (in->type()->isSubtypeOf(*c10::TensorType::get())) {
      auto t = CompleteTensorType(in);
      // A 0-dim CPU tensor (a traced Python number) may join CUDA work, as
      // in ATen; the CUDA launch copies it to the device.
      if (!t || (*t->device() != device && !(t->device()->is_cpu() && *t->dim() == 0))) {
        return false;
      }
      tensors.push_back(in);
    }
  }
  if (tensors.empty() || tensors[0] != node->input(0)) return false;
  // Every tensor from `from` on has dtype `want`, except 0-dim float tensors
  // (a traced Python scalar): type promotion lets a dimensioned operand
  // decide, and the 0-dim one is cast to it, as the kernel does.
  auto all_dtype = [&](c10::ScalarType want, size_t from) {
    bool dimensioned_match = false;
    for (size_t k = from; k < tensors.size(); ++k) {
      const auto t = CompleteTensorType(tensors[k]);
      const bool zero_dim = *t->dim() == 0;
      if (DTypeOf(tensors[k]) == want) {
        dimensioned_match = dimensioned_match || !zero_dim;
      } else if (!zero_dim || !IsFloat(DTypeOf(tensors[k]))) {
        return false;
      }
    }
    return dimensioned_match || tensors.size() == from ||
           std::all_of(tensors.begin() + from, tensors.end(),
                       [&](const Value* v) { return DTypeOf(v) == want; });
  };
  const size_t n = node->inputs().size();
  switch (*form) {
    case Form::kNone:
      return false;  // FormOf never returns it
    case Form::kUnary:
      return n == 1 && IsFloat(out_dtype) && all_dtype(out_dtype, 0);
    case Form::kBinary:
      if (n != 2) return false;
      return IsFloat(out_dtype) && all_dtype(out_dtype, 0) &&
             (tensors.size() == 2 || IsNumber(node->input(1)));
    case Form::kBinaryAlpha:
      if (n != 3 || !IsNumber(node->input(2))) return false;
      return IsFloat(out_dtype) && all_dtype(out_dtype, 0) &&
             (tensors.size() == 2 || IsNumber(node->input(1)));
    case Form::kPowScalar:
      return n == 2 && tensors.size() == 1 && ConstantNumber(node->input(1)) &&
             IsFloat(out_dtype) && all_dtype(out_dtype, 0);
    case Form::kCompare:
      if (n != 2 || out_dtype != at::kBool) return false;
      if (!IsFloat(DTypeOf(tensors[0])) || !all_dtype(DTypeOf(tensors[0]), 0)) return false;
      return tensors.size() == 2 || IsNumber(node->input(1));
    case Form::kWhere:
      return n == 3 && tensors.size() == 3 && DTypeOf(tensors[0]) == at::kBool &&
             IsFloat(out_dtype) && all_dtype(out_dtype, 1);
    case Form::kTypeAs:
      return n == 2 && tensors.size() == 2 && IsFloat(out_dtype) &&
             DTypeOf(tensors[1]) == out_dtype &&
             (IsFloat(DTypeOf(tensors[0])) || DTypeOf(tensors[0]) == at::kBool);
    case Form::kExpand:  // to a size known when compiling
      return tensors.size() == 1 && IsFloat(out_dtype) && all_dtype(out_dtype, 0) &&
             node->input(1)->node()->kind() == torch::jit::prim::Constant;
    case Form::kLike:
      if (tensors.size() != 1 || !IsFloat(out_dtype)) return false;
      for (size_t k = 1; k < n; ++k) {
        if (!IsConstantNone(node->input(k))) return false;
      }
      return true;
  }
  return false;
}

namespace {

thread_local std::unordered_map<const torch::jit::Graph*, absl::StatusOr<FusedKernelPlan>>*
    lowering_cache = nullptr;

absl::StatusOr<FusedKernelPlan> Lower(const Node* group);

}  // namespace

ScopedLoweringCache::ScopedLoweringCache() : owner_(lowering_cache == nullptr) {
  if (owner_) {
    lowering_cache =
        new std::unordered_map<const torch::jit::Graph*, absl::StatusOr<FusedKernelPlan>>();
  }
}

ScopedLoweringCache::~ScopedLoweringCache() {
  if (owner_) {
    delete lowering_cache;
    lowering_cache = nullptr;
  }
}

absl::StatusOr<FusedKernelPlan> LowerFusionGroup(const Node* group) {
  if (lowering_cache == nullptr || !group->hasAttribute(torch::jit::attr::Subgraph)) {
    return Lower(group);
  }
  const torch::jit::Graph* key = group->g(torch::jit::attr::Subgraph).get();
  auto it = lowering_cache->find(key);
  if (it == lowering_cache->end()) it = lowering_cache->emplace(key, Lower(group)).first;
  return it->second;
}

namespace {

absl::StatusOr<FusedKernelPlan> Lower(const Node* group) {
  if (group->kind() != FusionGroupKind() || !group->hasAttribute(torch::jit::attr::Subgraph)) {
    return absl::InvalidArgumentError("LowerFusionGroup: expected a metafuse::FusionGroup node");
  }
  const auto& sub = group->g(torch::jit::attr::Subgraph);
  const size_t num_in = sub->inputs().size();
  FusedKernelPlan plan;
  if (sub->outputs().empty()) return absl::InvalidArgumentError("fusion group without outputs");
  auto loop_type = CompleteTensorType(sub->outputs()[0]);
  if (!loop_type) return absl::InvalidArgumentError("fusion group output without a complete type");
  plan.loop_sizes = *loop_type->sizes().concrete_sizes();

  kir::KernelBuilder b("fused");
  struct Compare {
    kir::Cmp cmp;
    int a, b;
  };
  std::unordered_map<const Value*, int> env;
  std::unordered_map<const Value*, Compare> compares;
  std::unordered_map<const Value*, int> scalars;  // subgraph input -> f64 scalar node
  plan.binding.assign(num_in, -1);
  plan.is_tensor.assign(num_in, false);
  plan.input_dtypes.assign(num_in, at::kDouble);
  int num_tensor_inputs = 0, num_scalars = 0;
  for (size_t i = 0; i < num_in; ++i) {
    const Value* v = sub->inputs()[i];
    if (auto t = CompleteTensorType(v)) {
      // A tensor only type_as reads, for its dtype, is never loaded: any
      // shape will do (bound as a broadcast scalar).
      const bool dtype_only = std::all_of(v->uses().begin(), v->uses().end(), [](const auto& u) {
        return u.user->kind() == torch::jit::aten::type_as && u.offset == 1;
      });
      auto access = dtype_only ? std::optional<BroadcastAccess>(BroadcastAccess{kir::Access::kBroadcast, 1})
                               : ClassifyBroadcast(*t->sizes().concrete_sizes(), plan.loop_sizes);
      if (!access || !IsFloat(*t->scalarType())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "fusion group input ", i, " does not broadcast to the loop shape as an element, "
            "scalar, inner or outer access, or is not float32/float64"));
      }
      env[v] = b.Input(absl::StrCat("in", i), KirType(*t->scalarType()), access->access,
                       access->inner, access->mid);
      plan.binding[i] = num_tensor_inputs++;
      plan.is_tensor[i] = true;
      plan.input_dtypes[i] = *t->scalarType();
    } else if (IsNumber(v)) {
      scalars[v] = b.Scalar(absl::StrCat("s", i), kir::DType::kF64);
      plan.binding[i] = num_scalars++;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("fusion group input ", i,
                                                     " is neither a tensor nor a number"));
    }
  }
  // A number operand (constant or scalar input) or a tensor value, in `dtype`.
  auto operand = [&](const Value* v, kir::DType dtype) -> absl::StatusOr<int> {
    if (auto it = env.find(v); it != env.end()) {
      // A promoted 0-dim operand is converted to the op's dtype.
      return b.dtype_of(it->second) == dtype ? it->second : b.Cast(it->second, dtype);
    }
    if (auto c = ConstantNumber(v)) return b.Const(*c, dtype);
    if (auto it = scalars.find(v); it != scalars.end()) {
      return dtype == kir::DType::kF64 ? it->second : b.Cast(it->second, dtype);
    }
    return absl::InvalidArgumentError(absl::StrCat("fusion group value %", v->debugName(),
                                                   " has no kernel operand"));
  };
  for (const Node* node : sub->nodes()) {
    if (node->kind() == torch::jit::prim::Constant) continue;
    auto form = FormOf(node);
    if (!form) {
      return absl::InvalidArgumentError(absl::StrCat("fusion group node ",
                                                     node->kind().toQualString(),
                                                     " is not an elementwise op"));
    }
    const Value* out = node->output();
    const c10::ScalarType out_scalar = DTypeOf(out);
    const kir::DType dt = KirType(out_scalar);
#define MF_OPERAND(var, value, dtype)       \
  auto var##_or = operand(value, dtype);    \
  if (!var##_or.ok()) return var##_or.status(); \
  const int var = *var##_or;
    const auto kind = node->kind();
    switch (*form) {
      case Form::kNone:
        return absl::InternalError("a node without a fuser form in a fusion group");
      case Form::kUnary: {
        MF_OPERAND(x, node->input(0), dt);
        int r = -1;
        if (kind == aten::neg) r = b.Neg(x);
        else if (kind == aten::exp) r = b.Exp(x);
        else if (kind == aten::log) r = b.Log(x);
        else if (kind == aten::tanh) r = b.Tanh(x);
        else if (kind == aten::sigmoid) r = b.Sigmoid(x);
        else if (kind == aten::relu) r = b.Relu(x);
        else if (kind == aten::sqrt) r = b.Sqrt(x);
        else r = b.Abs(x);
        env[out] = r;
        break;
      }
      case Form::kBinary: {
        MF_OPERAND(x, node->input(0), dt);
        MF_OPERAND(y, node->input(1), dt);
        env[out] = kind == aten::mul ? b.Mul(x, y) : b.Div(x, y);
        break;
      }
      case Form::kBinaryAlpha: {
        MF_OPERAND(x, node->input(0), dt);
        MF_OPERAND(y, node->input(1), dt);
        auto alpha = ConstantNumber(node->input(2));
        int scaled_y = y, scaled_x = x;
        if (!alpha || *alpha != 1.0) {
          MF_OPERAND(a, node->input(2), dt);
          scaled_y = b.Mul(a, y);
          scaled_x = b.Mul(a, x);
        }
        if (kind == aten::add) env[out] = b.Add(x, scaled_y);
        else if (kind == aten::sub) env[out] = b.Sub(x, scaled_y);
        else env[out] = b.Sub(y, scaled_x);  // rsub: other - alpha * self
        break;
      }
      case Form::kPowScalar: {
        MF_OPERAND(x, node->input(0), dt);
        env[out] = b.Pow(x, *ConstantNumber(node->input(1)));
        break;
      }
      case Form::kCompare: {
        const kir::DType in_dt = KirType(DTypeOf(node->input(0)));
        MF_OPERAND(x, node->input(0), in_dt);
        MF_OPERAND(y, node->input(1), in_dt);
        kir::Cmp cmp = kir::Cmp::kEq;
        if (kind == aten::gt) cmp = kir::Cmp::kGt;
        else if (kind == aten::lt) cmp = kir::Cmp::kLt;
        else if (kind == aten::ge) cmp = kir::Cmp::kGe;
        else if (kind == aten::le) cmp = kir::Cmp::kLe;
        else if (kind == aten::ne) cmp = kir::Cmp::kNe;
        compares[out] = {cmp, x, y};
        break;
      }
      case Form::kWhere: {
        auto c = compares.find(node->input(0));
        if (c == compares.end()) {
          return absl::InvalidArgumentError(
              "fusion group: where's condition must be a comparison inside the group");
        }
        MF_OPERAND(x, node->input(1), dt);
        MF_OPERAND(y, node->input(2), dt);
        env[out] = b.Select(c->second.cmp, c->second.a, c->second.b, x, y);
        break;
      }
      case Form::kTypeAs: {
        if (auto c = compares.find(node->input(0)); c != compares.end()) {
          env[out] = b.Select(c->second.cmp, c->second.a, c->second.b, b.Const(1.0, dt),
                              b.Const(0.0, dt));
        } else {
          MF_OPERAND(x, node->input(0), KirType(DTypeOf(node->input(0))));
          env[out] = b.dtype_of(x) == dt ? x : b.Cast(x, dt);
        }
        break;
      }
      case Form::kExpand: {
        MF_OPERAND(x, node->input(0), dt);
        env[out] = x;
        break;
      }
      case Form::kLike:
        env[out] = b.Const(kind == aten::ones_like ? 1.0 : 0.0, dt);
        break;
    }
#undef MF_OPERAND
  }
  for (size_t k = 0; k < sub->outputs().size(); ++k) {
    const Value* v = sub->outputs()[k];
    auto t = CompleteTensorType(v);
    auto it = env.find(v);
    if (!t || it == env.end() || *t->sizes().concrete_sizes() != plan.loop_sizes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fusion group output ", k, " is not a float tensor of the loop shape"));
    }
    b.Output(absl::StrCat("out", k), it->second);
    plan.output_dtypes.push_back(*t->scalarType());
  }
  auto kernel = b.Build();
  if (!kernel.ok()) return kernel.status();
  plan.kernel = *std::move(kernel);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(kir::StructuralHash(plan.kernel)));
  plan.kernel.name = std::string("fused_") + hex;
  return plan;
}

}  // namespace

}  // namespace metafuse::compiler

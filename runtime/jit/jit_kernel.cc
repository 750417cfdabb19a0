#include "runtime/jit/jit_kernel.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace metafuse::runtime {
namespace {

struct Span {
  uintptr_t begin, end;
  bool Overlaps(const Span& o) const { return begin < o.end && o.begin < end; }
};

size_t SizeOf(c10::ScalarType t) { return t == c10::ScalarType::Float ? 4u : 8u; }

// Elements an input buffer must hold for a loop over [0, n), by its access
// (KernelCode::input_access: element, broadcast, inner, outer, middle,
// periodic; the same as codegen::kir::RequiredInputElements).
int64_t RequiredElements(int64_t access, int64_t inner, int64_t mid, int64_t n) {
  if (n <= 0) return 0;
  switch (access) {
    case 1: return 1;
    case 2: return std::min<int64_t>(inner, n);
    case 3: return (n - 1) / inner + 1;
    case 4: {
      const int64_t last = n - 1, period = mid * inner;
      return last / period * inner + std::min(last % period, inner - 1) + 1;
    }
    case 5: return std::min<int64_t>(mid, (n - 1) / inner + 1);
    default: return n;
  }
}

// A buffer's name for errors (its number when the code has no names).
std::string Name(const std::vector<std::string>& names, size_t i) {
  return i < names.size() ? names[i] : std::to_string(i);
}

}  // namespace

absl::Status HostCanRun(const std::string& object_target) {
  const std::string host = LlvmHostTarget();
  if (object_target == host) return absl::OkStatus();
  auto features = [](const std::string& target) {
    const size_t space = target.find(' ');
    std::vector<std::string> list = absl::StrSplit(
        space == std::string::npos ? "" : target.substr(space + 1), ',', absl::SkipEmpty());
    return std::set<std::string>(list.begin(), list.end());
  };
  const std::set<std::string> have = features(host);
  std::vector<std::string> missing;
  for (const std::string& f : features(object_target)) {
    if (!have.count(f)) missing.push_back(f);
  }
  if (missing.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "its object code was compiled for CPU '", object_target.substr(0, object_target.find(' ')),
      "' with features this CPU ('", host.substr(0, host.find(' ')), "') lacks: ",
      absl::StrJoin(missing, ", ")));
}

absl::StatusOr<std::unique_ptr<JitKernel>> JitKernel::Create(const KernelCode& code,
                                                             KernelCache* cache) {
  auto jit = LlvmJit::Create();
  if (!jit.ok()) return jit.status();
  return Create(code, cache, std::shared_ptr<LlvmJit>(*std::move(jit)));
}

absl::StatusOr<std::unique_ptr<JitKernel>> JitKernel::Create(const KernelCode& code,
                                                             KernelCache* cache,
                                                             std::shared_ptr<LlvmJit> jit) {
  const auto start = std::chrono::steady_clock::now();
  if (jit == nullptr) return absl::InvalidArgumentError("JitKernel::Create: `jit` is null");
  if (code.llvm_ir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel '", code.name, "' has no LLVM IR; expected the host printer's module"));
  }
  std::unique_ptr<JitKernel> k(new JitKernel());
  k->code_ = code;
  k->jit_ = std::move(jit);
  const std::string symbol = "mf_" + code.name;

  if (!code.object_code.empty()) {  // from an artifact: link, no LLVM
    if (absl::Status s = HostCanRun(code.object_target); !s.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("kernel '", code.name, "': ", s.message(), "; recompile the artifact"));
    }
    if (absl::Status s = k->jit_->AddObjectFile(symbol, code.object_code); !s.ok()) return s;
    k->cache_hit_ = true;
    k->object_ = code.object_code;
  }
  std::optional<KernelKey> key;
  if (cache != nullptr && !k->cache_hit_) {
    key = KernelKey{code.llvm_ir, LlvmHostTarget(), LlvmCodegenVersions()};
    if (std::optional<std::string> object = cache->Lookup(*key); object && !object->empty()) {
      if (absl::Status s = k->jit_->AddObjectFile(symbol, *object); !s.ok()) return s;
      k->cache_hit_ = true;
      k->object_ = *std::move(object);
    }
  }
  if (!k->cache_hit_) {
    if (absl::Status s = k->jit_->AddModule(symbol, code.llvm_ir, &k->optimized_ir_); !s.ok()) {
      return s;
    }
  }
  auto fn = k->jit_->Lookup(symbol);  // compiles the module on a miss
  if (!fn.ok()) return fn.status();
  k->fn_ = reinterpret_cast<Fn>(*fn);
  if (!k->cache_hit_) {
    auto emitted = k->jit_->ObjectFile(symbol);
    if (!emitted.ok()) return emitted.status();
    k->object_ = *emitted;
    if (key) {
      if (absl::Status s = cache->Store(*key, *emitted); !s.ok()) return s;
    }
  }
  k->compile_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return k;
}

absl::StatusOr<std::unique_ptr<JitKernel>> JitKernel::FromLibrary(
    const KernelCode& code, const CppKernelLibrary& library) {
  auto it = library.functions.find(code.name);
  if (it == library.functions.end() || library.object == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel '", code.name, "' is not in the shared object given"));
  }
  std::unique_ptr<JitKernel> k(new JitKernel());
  k->code_ = code;
  k->library_ = library.object;
  k->fn_ = it->second;
  k->cache_hit_ = library.cache_hit;
  k->compile_seconds_ = library.compile_seconds;
  return k;
}

void JitKernel::RunUnchecked(int64_t n, const void* const* inputs, void* const* outputs,
                             const double* scalars, int64_t grain) const {
  void* const* in = const_cast<void* const*>(inputs);
  if (grain <= 0) grain = kDefaultGrain;
  if (n <= grain || omp_get_max_threads() == 1) {
    fn_(0, n, in, outputs, scalars);
    return;
  }
  const int64_t chunks = (n + grain - 1) / grain;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    fn_(c * grain, std::min(n, (c + 1) * grain), in, outputs, scalars);
  }
}

absl::Status JitKernel::Run(int64_t n, const std::vector<const void*>& inputs,
                            const std::vector<void*>& outputs, const std::vector<double>& scalars,
                            int64_t grain) const {
  const KernelCode& k = code_;
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel '", k.name, "': n = ", n, "; expected n >= 0"));
  }
  if (inputs.size() != k.input_dtypes.size() || outputs.size() != k.output_dtypes.size() ||
      static_cast<int64_t>(scalars.size()) != k.num_scalars) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel '", k.name, "' takes ", k.input_dtypes.size(), " inputs, ",
        k.output_dtypes.size(), " outputs, ", k.num_scalars, " scalars; got ", inputs.size(),
        ", ", outputs.size(), ", ", scalars.size()));
  }
  if (n == 0) return absl::OkStatus();
  std::vector<Span> in_spans, out_spans;
  for (size_t j = 0; j < inputs.size(); ++j) {
    if (inputs[j] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("kernel '", k.name, "': input '", Name(k.input_names, j),
                       "' is null; expected a buffer"));
    }
    const uintptr_t b = reinterpret_cast<uintptr_t>(inputs[j]);
    in_spans.push_back({b, b + RequiredElements(k.input_access[j], k.input_inner[j],
                                                   j < k.input_mid.size() ? k.input_mid[j] : 1, n) *
                                   SizeOf(k.input_dtypes[j])});
  }
  for (size_t o = 0; o < outputs.size(); ++o) {
    if (outputs[o] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("kernel '", k.name, "': output '", Name(k.output_names, o),
                       "' is null; expected a buffer"));
    }
    const c10::ScalarType t = k.output_dtypes[o];
    const uintptr_t b = reinterpret_cast<uintptr_t>(outputs[o]);
    const Span s{b, b + n * SizeOf(t)};
    for (size_t p = 0; p < out_spans.size(); ++p) {
      if (s.Overlaps(out_spans[p])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "kernel '", k.name, "': outputs '", Name(k.output_names, p), "' and '",
            Name(k.output_names, o), "' overlap; expected disjoint output buffers"));
      }
    }
    for (size_t j = 0; j < in_spans.size(); ++j) {
      if (!s.Overlaps(in_spans[j])) continue;
      if (in_spans[j].begin == s.begin && k.input_access[j] == 0 && k.input_dtypes[j] == t) {
        continue;  // in place: element i is read before it is written
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "kernel '", k.name, "': output '", Name(k.output_names, o), "' overlaps input '",
          Name(k.input_names, j), "'; expected disjoint buffers, or the same buffer for an elementwise input of "
          "the same dtype (in place)"));
    }
    out_spans.push_back(s);
  }
  RunUnchecked(n, inputs.data(), outputs.data(), scalars.data(), grain);
  return absl::OkStatus();
}

}  // namespace metafuse::runtime

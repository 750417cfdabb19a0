#include "metafuse/aot.h"

#include <nlohmann/json.hpp>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "runtime/program_value/artifact_archive.h"
#include "runtime/program_value/artifact_signature.h"
#include "runtime/jit/kernel_ir_rebuild.h"
#include "runtime/executor/autograd_node.h"
#include "runtime/executor/host_object_code.h"
#include "runtime/program_value/program_serialization.h"

namespace metafuse::aot {
namespace {

// metafuse.aot's FORMAT (frontend/python/metafuse/aot.py), and the older
// format it still reads (2: never signed).
constexpr const char* kFormat = "metafuse-aot 3";
constexpr const char* kUnsignedFormat = "metafuse-aot 2";

// How to trust an artifact, for the errors that refuse one.
constexpr const char* kHowToTrust =
    "to trust it, sign it when saving (metafuse.aot.save(..., key=...)) and load it with "
    "that key (LoadOptions::key, the runner's --key-file, or METAFUSE_ARTIFACT_KEY as hex), "
    "or load it with LoadOptions::trust (the runner's --trust) if you trust where it came "
    "from";

absl::Status Refuse(const std::string& path, const std::string& check) {
  return absl::FailedPreconditionError(
      absl::StrCat(path, ": ", check, "; recompile it (metafuse compile, or metafuse.aot.save)"));
}

absl::StatusOr<c10::impl::GenericDict> Unpickle(const std::string& path, const std::string& name,
                                                const std::string& bytes) {
  try {
    c10::IValue value = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
    if (!value.isGenericDict()) return Refuse(path, name + " does not hold a dictionary");
    return value.toGenericDict();
  } catch (const c10::Error& e) {
    return Refuse(path, absl::StrCat(name, " cannot be read (", e.what_without_backtrace(), ")"));
  }
}

absl::StatusOr<std::vector<at::Tensor>> Tensors(const std::string& path, const std::string& what,
                                                const c10::IValue& value) {
  if (!value.isList()) return Refuse(path, what + " is not a list of tensors");
  std::vector<at::Tensor> out;
  for (const c10::IValue& item : value.toListRef()) {
    if (!item.isTensor()) return Refuse(path, what + " holds something other than a tensor");
    out.push_back(item.toTensor());
  }
  return out;
}

absl::StatusOr<c10::IValue> Entry(const std::string& path, const std::string& member,
                                  const c10::impl::GenericDict& dict, const std::string& key) {
  auto it = dict.find(key);
  if (it == dict.end()) return Refuse(path, absl::StrCat(member, " has no ", key));
  return it->value();
}

// `t` with exactly row-major strides: the program's guard holds strides,
// size-1 dims included (is_contiguous() ignores those), and save_job stores
// the state row-major.
at::Tensor RowMajor(const at::Tensor& t) {
  int64_t step = 1;
  bool exact = true;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    exact = exact && t.stride(d) == step;
    step *= std::max<int64_t>(t.size(d), 1);
  }
  return exact ? t : t.clone(at::MemoryFormat::Contiguous);
}

}  // namespace

absl::StatusOr<Artifact> Artifact::Load(const std::string& path, const LoadOptions& options) {
  // One read: the signature is checked over the bytes the members come from.
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::optional<std::string> key = options.key;
  if (key) {
    if (absl::Status s = runtime::CheckArtifactKey(*key, "LoadOptions::key"); !s.ok()) return s;
  } else {
    auto from_environment = runtime::ArtifactKeyFromEnvironment();
    if (!from_environment.ok()) return from_environment.status();
    key = *from_environment;
  }
  auto signature = runtime::CheckArtifactSignature(bytes, key ? &*key : nullptr);
  if (!signature.ok() && !options.trust) {
    return absl::PermissionDeniedError(absl::StrCat(path, ": ", signature.status().message(),
                                                    "; load it with the key it was signed "
                                                    "with, or with LoadOptions::trust (--trust) "
                                                    "if you trust where it came from"));
  }
  auto members = runtime::ParseStoredZip(bytes, path);
  if (!members.ok()) return members.status();
  for (const char* name : {"manifest.json", "program.bin", "runner.pt"}) {
    if (!members->count(name)) return Refuse(path, absl::StrCat("the member ", name, " is missing"));
  }
  Artifact a;
  a.path_ = path;
  a.manifest_ = members->at("manifest.json");
  const nlohmann::json manifest = nlohmann::json::parse(a.manifest_, nullptr, false);
  if (manifest.is_discarded() || !manifest.is_object()) {
    return Refuse(path, "manifest.json is not a JSON object");
  }
  const std::string format = manifest.value("format", "?");
  if (format != kFormat && format != kUnsignedFormat) {
    return Refuse(path, absl::StrCat("its format is '", format, "', this runtime reads '",
                                     kFormat, "' and '", kUnsignedFormat, "'"));
  }
  a.trusted_ = options.trust || (signature.ok() && *signature == runtime::ArtifactSignature::kVerified);
  a.signature_ = signature.ok()
                     ? runtime::DescribeArtifactSignature(*signature, key ? &*key : nullptr)
                     : absl::StrCat("signed (HMAC-SHA256), not verified (",
                                    signature.status().message(), ")");
  const auto versions = manifest.value("versions", nlohmann::json::object());
  if (versions.value("libtorch", "") != TORCH_VERSION) {
    return Refuse(path, absl::StrCat("it was made with LibTorch ", versions.value("libtorch", "?"),
                                     ", this runtime has ", TORCH_VERSION));
  }
  const auto sums = manifest.value("sha256", nlohmann::json::object());
  for (const auto& [name, bytes] : *members) {
    if (name == "manifest.json") continue;
    if (!sums.contains(name) || !sums[name].is_string()) {
      return Refuse(path, absl::StrCat("the member ", name, " has no checksum in the manifest"));
    }
    if (runtime::Sha256Hex(bytes) != sums[name].get<std::string>()) {
      return Refuse(path, absl::StrCat("the checksum of ", name,
                                       " does not match (the file was modified or damaged)"));
    }
  }
  auto program = runtime::DeserializeProgram(members->at("program.bin"));
  if (!program.ok()) return Refuse(path, std::string(program.status().message()));
  if (!a.trusted_) {
    // Its native code never runs: its kernels are printed here from their IR.
    if (absl::Status s = runtime::RebuildKernelsFromKernelIr(*program); !s.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, " is not trusted (", a.signature_, "), so its native code does not run, and "
          "its kernels cannot run from their kernel IR here: ", s.message(), "; ", kHowToTrust));
    }
  }
  if (absl::Status s = runtime::CheckObjectTargets(*program); !s.ok()) {
    return Refuse(path, std::string(s.message()));
  }
  a.program_ = std::make_shared<runtime::ExecutableProgram>(*std::move(program));

  // runner.pt: the flat tensors (Python's members hold pytrees).
  auto runner = Unpickle(path, "runner.pt", members->at("runner.pt"));
  if (!runner.ok()) return runner.status();
  auto closed = Entry(path, "runner.pt", *runner, "closed_over");
  if (!closed.ok()) return closed.status();
  auto closed_tensors = Tensors(path, "runner.pt closed_over", *closed);
  if (!closed_tensors.ok()) return closed_tensors.status();
  a.closed_over_ = *std::move(closed_tensors);

  if (manifest.contains("job")) {
    auto state = Entry(path, "runner.pt", *runner, "state_leaves");
    if (!state.ok()) return state.status();
    auto state_tensors = Tensors(path, "runner.pt state_leaves", *state);
    if (!state_tensors.ok()) return state_tensors.status();
    a.state_ = *std::move(state_tensors);
    auto batches = Entry(path, "runner.pt", *runner, "batch_leaves");
    if (!batches.ok()) return batches.status();
    if (!batches->isList()) return Refuse(path, "runner.pt batch_leaves is not a list");
    for (const c10::IValue& batch : batches->toListRef()) {
      auto tensors = Tensors(path, "a runner.pt batch", batch);
      if (!tensors.ok()) return tensors.status();
      a.batches_.push_back(*std::move(tensors));
    }
    for (const auto& name : manifest["job"].value("metrics", nlohmann::json::array())) {
      a.metric_names_.push_back(name.get<std::string>());
    }
    if (a.state_.empty() || a.batches_.empty() ||
        static_cast<int64_t>(a.state_.size() + a.metric_names_.size()) !=
            a.program_->num_outputs) {
      return Refuse(path, "its job section does not match its program (state, metrics, outputs)");
    }
  }
  return a;
}

std::string Artifact::Inspect() const {
  const nlohmann::json manifest = nlohmann::json::parse(manifest_);
  std::ostringstream os;
  os << path_ << ": " << manifest.value("kind", "?") << " artifact, "
     << manifest.value("format", "?") << "\n";
  os << "  signature: " << signature_ << "\n";
  os << "  native code: "
     << (trusted_ ? "the artifact's (trusted)" : "printed here from the kernel IR (not trusted)")
     << "\n";
  for (const auto& [k, v] : manifest["versions"].items()) os << "  " << k << ": " << v << "\n";
  os << "  inputs: " << program_->num_inputs << " tensors (" << closed_over_.size()
     << " held by the artifact), outputs: " << program_->num_outputs << "\n";
  const runtime::CompiledProgram value = program_->Value();
  for (const runtime::ProgramCode* code : {&value.forward, &value.backward}) {
    os << "  " << code->label << ": " << code->instructions.size() << " instructions, "
       << code->kernels.size() << " fused kernels, " << code->gemms.size() << " GEMMs, "
       << code->num_registers << " registers\n";
  }
  if (is_job()) {
    os << "  job: " << state_.size() << " state tensors, " << batches_.size()
       << " stored batches, metrics:";
    for (const auto& name : metric_names_) os << " " << name;
    os << "\n";
  }
  return os.str();
}

absl::StatusOr<std::vector<at::Tensor>> Artifact::Run(const std::vector<at::Tensor>& inputs) const {
  std::vector<at::Tensor> all = inputs;
  all.insert(all.end(), closed_over_.begin(), closed_over_.end());
  if (static_cast<int64_t>(all.size()) != program_->num_inputs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Artifact::Run: ", inputs.size(), " input tensors; expected ",
        program_->num_inputs - static_cast<int64_t>(closed_over_.size())));
  }
  if (!program_->guard.empty() &&
      runtime::InputSignature(std::vector<c10::IValue>(all.begin(), all.end())) !=
          program_->guard) {
    return absl::InvalidArgumentError(
        "Artifact::Run: the inputs' dtypes, devices or shapes differ from those the program "
        "was compiled for");
  }
  torch::NoGradGuard no_grad;
  try {
    return runtime::RunDifferentiable(program_, all);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("Artifact::Run: ", e.what_without_backtrace()));
  }
}

absl::StatusOr<StepResult> Artifact::Step(const std::vector<at::Tensor>& state,
                                          int64_t index) const {
  if (!is_job()) return absl::FailedPreconditionError(path_ + " is not a job artifact");
  std::vector<at::Tensor> inputs = state;
  const auto& batch = batches_[static_cast<size_t>(index) % batches_.size()];
  inputs.insert(inputs.end(), batch.begin(), batch.end());
  auto outputs = Run(inputs);
  if (!outputs.ok()) return outputs.status();
  StepResult result;
  for (size_t i = 0; i < outputs->size(); ++i) {
    if (i < state_.size()) {
      result.state.push_back(RowMajor((*outputs)[i]));
    } else {
      result.metrics[metric_names_[i - state_.size()]] = (*outputs)[i].item<double>();
    }
  }
  return result;
}

}  // namespace metafuse::aot

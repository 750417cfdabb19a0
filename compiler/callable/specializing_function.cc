#include "compiler/callable/specializing_function.h"

#include "runtime/executor/kernel_target.h"

namespace metafuse::compiler {

std::shared_ptr<SpecializingFunction> SpecializingFunction::Compile(CompileRequest request,
                                                                    bool keep_snapshots) {
  auto fn = std::shared_ptr<SpecializingFunction>(new SpecializingFunction());
  fn->log_.set_keep_snapshots(keep_snapshots);
  fn->split_ = CompileGeneric(request, &fn->log_);
  fn->request_ = std::move(request);
  fn->fusion_ = runtime::OptionsFromEnvironment().fusion;
  return fn;
}

const runtime::ExecutableProgram& SpecializingFunction::generic() const {
  std::call_once(generic_once_, [this] {
    generic_ = std::make_shared<runtime::ExecutableProgram>(LowerGeneric(split_));
  });
  return *generic_;
}

void SpecializingFunction::set_fusion(bool enabled) {
  std::lock_guard<std::mutex> lock(mu_);
  fusion_ = enabled;
}

bool SpecializingFunction::fusion() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fusion_;
}

std::shared_ptr<const SpecializedExecutable> SpecializingFunction::last_specialization() const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto* last = specializations_.last();
  return last != nullptr ? *last : nullptr;
}

std::shared_ptr<const runtime::ExecutableProgram> SpecializingFunction::Choose(
    const std::vector<c10::IValue>& inputs) const {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].isTensor() || !inputs[i].toTensor().defined()) continue;
    const absl::Status s = runtime::CheckProgramDevice(inputs[i].toTensor().device());
    TORCH_CHECK(s.ok(), "compiled function, input ", i, ": ", s.message());
  }
  if (!fusion()) {  // before computing any signature
    generic();
    return generic_;
  }
  std::vector<int64_t> signature = runtime::InputSignature(inputs);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const auto* found = specializations_.Find(signature)) return (*found)->executable;
    if (specializations_.full()) {
      generic();
      return generic_;
    }
  }
  auto made = std::make_shared<SpecializedExecutable>();
  made->info = Specialize(split_, inputs, runtime::OptionsFromEnvironment(), &log_);
  made->executable =
      std::make_shared<runtime::ExecutableProgram>(std::move(made->info.program));
  std::lock_guard<std::mutex> lock(mu_);
  return specializations_.Insert(std::move(signature), std::move(made))->executable;
}

std::vector<at::Tensor> SpecializingFunction::operator()(
    const std::vector<at::Tensor>& inputs) const {
  TORCH_CHECK(static_cast<int64_t>(inputs.size()) == num_inputs(), "compiled function takes ",
              num_inputs(), " tensors, got ", inputs.size());
  return runtime::RunDifferentiable(
      Choose(std::vector<c10::IValue>(inputs.begin(), inputs.end())), inputs);
}

std::shared_ptr<const runtime::ExecutableProgram> SpecializingFunction::ExecutableFor(
    const std::vector<at::Tensor>& inputs) const {
  TORCH_CHECK(static_cast<int64_t>(inputs.size()) == num_inputs(), "compiled function takes ",
              num_inputs(), " tensors, got ", inputs.size());
  return Choose(std::vector<c10::IValue>(inputs.begin(), inputs.end()));
}

runtime::CompiledProgram SpecializingFunction::ProgramFor(
    const std::vector<at::Tensor>& inputs) const {
  TORCH_CHECK(static_cast<int64_t>(inputs.size()) == num_inputs(), "compiled function takes ",
              num_inputs(), " tensors, got ", inputs.size());
  return Choose(std::vector<c10::IValue>(inputs.begin(), inputs.end()))->Value();
}

std::vector<std::pair<std::string, std::string>> SpecializingFunction::stages() const {
  if (log_.keeps_snapshots()) return log_.stages();
  std::vector<std::pair<std::string, std::string>> result;
  {
    std::lock_guard<std::mutex> lock(compile_stages_mu_);
    if (compile_stages_.empty()) {
      // The pipeline is deterministic: the same compile, snapshots kept.
      StageLog log;
      CompileGeneric(request_, &log);
      compile_stages_ = log.stages();
    }
    result = compile_stages_;
  }
  for (const auto& stage : log_.stages()) result.push_back(stage);
  return result;
}

}  // namespace metafuse::compiler

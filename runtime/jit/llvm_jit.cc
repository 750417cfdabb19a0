#include "runtime/jit/llvm_jit.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/ExecutionEngine/ObjectCache.h"
#include "llvm/ExecutionEngine/Orc/CompileUtils.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/ThreadSafeModule.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/IRReader/IRReader.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/Host.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"

namespace metafuse::runtime {
namespace {

std::string ToString(llvm::Error err) {
  std::string message;
  llvm::raw_string_ostream os(message);
  os << err;
  return os.str();
}

void InitializeNativeTargetOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
  });
}

// Keeps a copy of every object file the JIT emits, by module identifier, so
// that callers can cache it; never supplies one (loading goes through
// AddObjectFile).
class ObjectRecorder : public llvm::ObjectCache {
 public:
  void notifyObjectCompiled(const llvm::Module* module,
                            llvm::MemoryBufferRef object) override {
    std::lock_guard<std::mutex> lock(mu_);
    objects_[module->getModuleIdentifier()] = object.getBuffer().str();
  }
  std::unique_ptr<llvm::MemoryBuffer> getObject(const llvm::Module*) override {
    return nullptr;
  }
  std::optional<std::string> Find(const std::string& module) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = objects_.find(module);
    if (it == objects_.end()) return std::nullopt;
    return it->second;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::string> objects_;
};

}  // namespace

bool LlvmAvailable() { return true; }

std::string LlvmHostTarget() {
  // The host does not change while the process runs: asked once.
  static const std::string target = [] {
    std::string t = llvm::sys::getHostCPUName().str();
    llvm::StringMap<bool> features;
    if (llvm::sys::getHostCPUFeatures(features)) {
      std::vector<std::string> on;
      for (const auto& f : features) {
        if (f.getValue()) on.push_back(f.getKey().str());
      }
      std::sort(on.begin(), on.end());
      absl::StrAppend(&t, " ", absl::StrJoin(on, ","));
    }
    return t;
  }();
  return target;
}

std::string LlvmCodegenVersions() {
  return absl::StrCat("metafuse jit_kernel 3 (object file of the printed module) / llvm ",
                      LLVM_VERSION_STRING);
}

struct LlvmJit::Impl {
  ObjectRecorder objects;  // outlives the JIT that writes to it
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::unique_ptr<llvm::TargetMachine> target_machine;  // for optimization
  std::string host;
};

LlvmJit::LlvmJit(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LlvmJit::~LlvmJit() = default;

absl::StatusOr<std::unique_ptr<LlvmJit>> LlvmJit::Create() {
  InitializeNativeTargetOnce();
  auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!jtmb) {
    return absl::InternalError(absl::StrCat(
        "LLVM could not describe the host CPU: ", ToString(jtmb.takeError())));
  }
  jtmb->setCodeGenOptLevel(llvm::CodeGenOpt::Aggressive);
  auto tm = jtmb->createTargetMachine();
  if (!tm) {
    return absl::InternalError(absl::StrCat(
        "LLVM could not create a target machine for the host: ",
        ToString(tm.takeError())));
  }
  auto impl = std::make_unique<Impl>();
  ObjectRecorder* recorder = &impl->objects;
  auto jit =
      llvm::orc::LLJITBuilder()
          .setJITTargetMachineBuilder(*jtmb)
          .setCompileFunctionCreator(
              [recorder](llvm::orc::JITTargetMachineBuilder builder)
                  -> llvm::Expected<
                      std::unique_ptr<llvm::orc::IRCompileLayer::IRCompiler>> {
                auto machine = builder.createTargetMachine();
                if (!machine) return machine.takeError();
                return std::make_unique<llvm::orc::TMOwningSimpleCompiler>(
                    std::move(*machine), recorder);
              })
          .create();
  if (!jit) {
    return absl::InternalError(
        absl::StrCat("LLVM ORC LLJIT could not be created: ",
                     ToString(jit.takeError())));
  }
  auto process_symbols =
      llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
          (*jit)->getDataLayout().getGlobalPrefix());
  if (!process_symbols) {
    return absl::InternalError(
        absl::StrCat("LLVM could not search the process for symbols: ",
                     ToString(process_symbols.takeError())));
  }
  (*jit)->getMainJITDylib().addGenerator(std::move(*process_symbols));
  impl->host = absl::StrCat(jtmb->getTargetTriple().str(), " / ",
                            llvm::sys::getHostCPUName().str());
  impl->jit = std::move(*jit);
  impl->target_machine = std::move(*tm);
  return std::unique_ptr<LlvmJit>(new LlvmJit(std::move(impl)));
}

absl::Status LlvmJit::AddModule(const std::string& module_name,
                                const std::string& ir,
                                std::string* optimized_ir) {
  auto context = std::make_unique<llvm::LLVMContext>();
  llvm::SMDiagnostic diag;
  std::unique_ptr<llvm::Module> module = llvm::parseIR(
      llvm::MemoryBufferRef(ir, module_name), diag, *context);
  if (!module) {
    std::string message;
    llvm::raw_string_ostream os(message);
    diag.print(module_name.c_str(), os, /*ShowColors=*/false);
    return absl::InvalidArgumentError(absl::StrCat(
        "LLVM IR of module '", module_name, "' does not parse: ", os.str()));
  }
  std::string verify_errors;
  llvm::raw_string_ostream verify_os(verify_errors);
  if (llvm::verifyModule(*module, &verify_os)) {
    return absl::InvalidArgumentError(
        absl::StrCat("LLVM IR of module '", module_name,
                     "' is invalid: ", verify_os.str()));
  }
  module->setDataLayout(impl_->jit->getDataLayout());
  module->setTargetTriple(impl_->jit->getTargetTriple().str());

  // The standard O2 pipeline, with the host's target information so that the
  // loop and SLP vectorizers use the CPU's real vector width.
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(impl_->target_machine.get());
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm =
      pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2);
  mpm.run(*module, mam);
  if (optimized_ir != nullptr) {
    optimized_ir->clear();
    llvm::raw_string_ostream os(*optimized_ir);
    module->print(os, nullptr);
    os.flush();
  }

  llvm::Error err = impl_->jit->addIRModule(
      llvm::orc::ThreadSafeModule(std::move(module), std::move(context)));
  if (err) {
    return absl::InternalError(absl::StrCat("LLVM could not add module '",
                                            module_name,
                                            "': ", ToString(std::move(err))));
  }
  return absl::OkStatus();
}

absl::Status LlvmJit::AddObjectFile(const std::string& name,
                                    const std::string& object) {
  llvm::Error err = impl_->jit->addObjectFile(
      llvm::MemoryBuffer::getMemBufferCopy(object, name));
  if (err) {
    return absl::InvalidArgumentError(
        absl::StrCat("LLVM could not add object file '", name,
                     "': ", ToString(std::move(err))));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> LlvmJit::ObjectFile(
    const std::string& module_name) const {
  std::optional<std::string> object = impl_->objects.Find(module_name);
  if (!object) {
    return absl::NotFoundError(absl::StrCat(
        "no object file for module '", module_name,
        "': expected an added module whose symbols were looked up"));
  }
  return *std::move(object);
}

absl::StatusOr<void*> LlvmJit::Lookup(const std::string& symbol) {
  auto address = impl_->jit->lookup(symbol);
  if (!address) {
    return absl::NotFoundError(absl::StrCat("JIT symbol '", symbol,
                                            "' not found: ",
                                            ToString(address.takeError())));
  }
  return reinterpret_cast<void*>(address->getAddress());
}

std::string LlvmJit::HostDescription() const { return impl_->host; }

}  // namespace metafuse::runtime

// The compiled program as a value: the pipeline's output for a MAML-style
// inner loop is dumped, serialized, read back and run again, and must give
// the same dump, the same bytes and bit-identical results and meta-gradients
// as the program the compiled function runs. Damaged bytes are refused with
// an error that says what is wrong.
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>
#include <zlib.h>

#include <functional>

#include "compiler/callable/compiled_inner_loop.h"
#include "runtime/executor/autograd_node.h"
#include "runtime/executor/fused_kernel_launch.h"
#include "runtime/jit/host_compiler.h"
#include "runtime/executor/host_object_code.h"
#include "runtime/jit/jit_kernel.h"
#include "runtime/program_value/program_serialization.h"

namespace metafuse::compiler {
namespace {

using TensorList = std::vector<at::Tensor>;

at::Tensor MlpLoss(const TensorList& p, const TensorList& b) {
  auto h = torch::relu(torch::linear(b[0], p[0], p[1]));
  h = torch::relu(torch::linear(h, p[2], p[3]));
  return torch::mse_loss(torch::linear(h, p[4], p[5]), b[1]);
}

struct Task {
  TensorList params, batch;
  TensorList Inputs() const {
    TensorList in = params;
    in.insert(in.end(), batch.begin(), batch.end());
    return in;
  }
};

Task MakeTask() {
  torch::manual_seed(3);
  Task t;
  t.params = {torch::randn({40, 1}), torch::randn({40}), torch::randn({40, 40}) * 0.1,
              torch::randn({40}), torch::randn({1, 40}) * 0.1, torch::randn({1})};
  for (auto& p : t.params) p.requires_grad_(true);
  auto x = torch::rand({10, 1}) * 10 - 5;
  t.batch = {x, torch::sin(x)};
  return t;
}

// Adapted params and the meta-gradient of a query loss through `run`.
std::pair<TensorList, TensorList> AdaptAndDifferentiate(
    const Task& task, const std::function<TensorList(const TensorList&)>& run) {
  TensorList adapted = run(task.Inputs());
  adapted.resize(task.params.size());
  auto meta = torch::autograd::grad({MlpLoss(adapted, task.batch)}, task.params);
  for (auto& a : adapted) a = a.detach();
  return {adapted, meta};
}

void ExpectSameBits(const TensorList& got, const TensorList& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(torch::equal(got[i], want[i])) << what << " " << i;
  }
}

std::shared_ptr<CompiledInnerLoop> CompileTask(const Task& task) {
  OptimizerSpec sgd;
  sgd.kind = "sgd";
  sgd.lr = 0.01;
  return CompileInnerLoop(MlpLoss, task.params, task.batch, sgd, /*steps=*/5);
}

void RoundTrip(bool fusion) {
  Task task = MakeTask();
  auto loop = CompileTask(task);
  loop->function().set_fusion(fusion);
  runtime::CompiledProgram value = loop->function().ProgramFor(task.Inputs());
  if (fusion) {
    EXPECT_GT(value.forward.kernels.size() + value.backward.kernels.size(), 0u);
    EXPECT_GT(value.forward.gemms.size() + value.backward.gemms.size(), 0u);
    EXPECT_FALSE(value.guard.empty());
  } else {
    EXPECT_TRUE(value.guard.empty());
  }
  EXPECT_EQ(value.differentiable_inputs.size(), task.params.size());

  const std::string bytes = runtime::SerializeProgram(value);
  auto loaded = runtime::DeserializeProgram(bytes);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(runtime::Dump(*loaded), runtime::Dump(value));
  EXPECT_EQ(runtime::SerializeProgram(*loaded), bytes);

  auto executable = std::make_shared<runtime::ExecutableProgram>(*std::move(loaded));
  auto [want_adapted, want_meta] =
      AdaptAndDifferentiate(task, [&](const TensorList& in) { return (*loop)(in); });
  auto [got_adapted, got_meta] = AdaptAndDifferentiate(
      task, [&](const TensorList& in) { return runtime::RunDifferentiable(executable, in); });
  ExpectSameBits(got_adapted, want_adapted, "adapted param");
  ExpectSameBits(got_meta, want_meta, "meta-gradient");
}

TEST(ProgramValue, SpecializedFusedProgramRoundTripsExactly) { RoundTrip(true); }

TEST(ProgramValue, GenericProgramRoundTripsExactly) { RoundTrip(false); }

TEST(ProgramValue, DumpNamesInstructionsKernelsAndPlans) {
  Task task = MakeTask();
  auto loop = CompileTask(task);
  const std::string dump = runtime::Dump(loop->function().ProgramFor(task.Inputs()));
  for (const char* part : {"program forward", "program backward", "= kernel fused_",
                           "= gemm gemm_", "kernel #0 fused_", "launch #0", "version format",
                           "guard"}) {
    EXPECT_NE(dump.find(part), std::string::npos) << part << " missing from\n" << dump;
  }
}

TEST(ProgramValue, DamagedBytesAreRefusedWithTheReason) {
  Task task = MakeTask();
  auto loop = CompileTask(task);
  const std::string bytes =
      runtime::SerializeProgram(loop->function().ProgramFor(task.Inputs()));
  auto truncated = runtime::DeserializeProgram(bytes.substr(0, bytes.size() / 2));
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().ToString().find("recompile"), std::string::npos)
      << truncated.status();
  auto garbage = runtime::DeserializeProgram("not a program");
  EXPECT_FALSE(garbage.ok());
  // Well-formed pickles that are not programs.
  const std::vector<char> list = torch::jit::pickle_save(c10::IValue(std::vector<int64_t>{1}));
  auto wrong = runtime::DeserializeProgram(std::string(list.begin(), list.end()));
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().ToString().find("program.magic"), std::string::npos)
      << wrong.status();
}

// Found by tests/fuzz/program_serialization_fuzzer: LibTorch 1.13's zip
// reader read past the bytes on a damaged directory (heap-buffer-overflow
// in mz_zip_reader_init), leaked its state when the version record was
// missing, and allocated what damaged size fields claimed. The container is
// now checked before LibTorch sees it, and each refusal names the damage.
TEST(ProgramValue, DamagedArchivesAreRefusedBeforeLibTorchReadsThem) {
  const std::string bytes = runtime::SerializeProgram(runtime::CompiledProgram{});
  ASSERT_TRUE(runtime::DeserializeProgram(bytes).ok());
  auto refused = [](const std::string& damaged, const std::string& reason) {
    auto loaded = runtime::DeserializeProgram(damaged);
    ASSERT_FALSE(loaded.ok()) << reason;
    EXPECT_NE(loaded.status().ToString().find(reason), std::string::npos) << loaded.status();
    EXPECT_NE(loaded.status().ToString().find("recompile"), std::string::npos);
  };
  // The end record's directory offset (its bytes 16-19) pointed past the end.
  std::string moved = bytes;
  moved[moved.size() - 22 + 19] = '\x7f';
  refused(moved, "the zip64 end record disagrees");
  // One bit of a member flipped (the pickle, near the start of its data).
  std::string flipped = bytes;
  const size_t pickle = flipped.find("data.pkl") + 8;
  flipped[flipped.find('\x80', pickle) + 1] ^= 1;
  refused(flipped, "CRC-32 differs");
  // The version record renamed, in the local header and the directory.
  std::string renamed = bytes;
  for (size_t at = renamed.find("/version"); at != std::string::npos;
       at = renamed.find("/version", at + 1)) {
    renamed[at + 1] = 'w';
  }
  refused(renamed, "no version record");
  refused(bytes.substr(0, bytes.size() - 1), "no end record");
  refused(bytes + "comment", "no end record");
}

uint32_t LittleEndian(const std::string& bytes, size_t at, int n) {
  uint32_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(bytes[at + i]);
  return v;
}

// Where the directory entry of the member whose name ends with `name` starts.
size_t DirectoryEntry(const std::string& bytes, const std::string& name) {
  for (size_t at = bytes.find("PK\x01\x02"); at != std::string::npos;
       at = bytes.find("PK\x01\x02", at + 4)) {
    const std::string member = bytes.substr(at + 46, LittleEndian(bytes, at + 28, 2));
    if (member.size() >= name.size() &&
        member.compare(member.size() - name.size(), name.size(), name) == 0) {
      return at;
    }
  }
  ADD_FAILURE() << "no member " << name;
  return 0;
}

// `bytes` (a serialized program: a zip of stored members) with member
// `name` changed by `edit` in place and the directory's CRC-32 made to
// match: a damaged pickle that gets past the container check.
std::string EditMember(std::string bytes, const std::string& name,
                       const std::function<void(std::string&)>& edit) {
  auto le = [&bytes](size_t at, int n) { return LittleEndian(bytes, at, n); };
  const size_t at = DirectoryEntry(bytes, name);
  const size_t local = le(at + 42, 4), size = le(at + 24, 4);
  const size_t data = local + 30 + le(local + 26, 2) + le(local + 28, 2);
  std::string contents = bytes.substr(data, size);
  edit(contents);
  bytes.replace(data, size, contents);
  const uint32_t crc = crc32(0, reinterpret_cast<const Bytef*>(contents.data()), size);
  for (int i = 0; i < 4; ++i) bytes[at + 16 + i] = static_cast<char>(crc >> (8 * i));
  return bytes;
}

// Found by the long fuzz run: an entry flagged as a patch (or encrypted, or
// a directory) passed the container check, and miniz refused it only once
// LibTorch's reader constructor had opened the archive, which leaks.
TEST(ProgramValue, ArchiveEntriesMinizRefusesLateAreRefusedFirst) {
  const std::string bytes = runtime::SerializeProgram(runtime::CompiledProgram{});
  const size_t version = DirectoryEntry(bytes, "/version");
  auto refused = [](const std::string& damaged, const std::string& reason) {
    auto loaded = runtime::DeserializeProgram(damaged);
    ASSERT_FALSE(loaded.ok()) << reason;
    EXPECT_NE(loaded.status().ToString().find(reason), std::string::npos) << loaded.status();
  };
  std::string patched = bytes;
  patched[version + 8] |= 0x20;  // "compressed patched data"
  refused(patched, "is not a plain stored member");
  std::string folder = bytes;
  folder[version + 38] |= 0x10;  // the DOS directory attribute
  refused(folder, "is a directory");
}

// Found by tests/fuzz/program_serialization_fuzzer once CRC-32s no longer
// stopped it: LibTorch 1.13's unpickler reserved the 3.5 GB a string's
// length field claimed, and it pops marks and values that are not there
// and gives a tensor sizes past its storage unchecked. The pickle is now
// replayed on a model of the stack before LibTorch runs it.
TEST(ProgramValue, DamagedPicklesAreRefusedBeforeLibTorchRunsThem) {
  const std::string bytes = runtime::SerializeProgram(runtime::CompiledProgram{});
  auto refused = [&bytes](const std::function<void(std::string&)>& edit,
                          const std::string& reason) {
    auto loaded = runtime::DeserializeProgram(EditMember(bytes, "data.pkl", edit));
    ASSERT_FALSE(loaded.ok()) << reason;
    EXPECT_NE(loaded.status().ToString().find(reason), std::string::npos) << loaded.status();
  };
  // Unchanged, it loads: the edit itself keeps a pickle readable.
  ASSERT_TRUE(runtime::DeserializeProgram(EditMember(bytes, "data.pkl", [](std::string&) {})).ok());
  refused([](std::string& p) {  // the magic string's length, 0xF0000000
    p[p.find("metafuse-program") - 1] = '\xf0';
  }, "a string longer than the pickle");
  refused([](std::string& p) { p[2] = 't'; }, "no mark");  // a tuple with no mark
  refused([](std::string& p) {  // an empty byte tensor's size (0,) made (5,)
    // Its sizes and strides, (0,) and (1,), as torch 1.13 and 2.x write them.
    for (const std::string& form : {std::string("(K\x00t(K\x01t", 8),
                                    std::string("K\x00\x85K\x01\x85", 6)}) {
      const size_t at = p.find(form);
      if (at != std::string::npos) {
        p[at + form.find('\0')] = 5;
        return;
      }
    }
    ADD_FAILURE() << "no empty tensor's sizes in the pickle";
  }, "a tensor reaching outside its storage");
  refused([](std::string& p) { p[p.find('q') + 1] = 9; }, "a memo entry out of order");
}

TEST(ProgramValue, OutOfRangeRegistersAreRefused) {
  Task task = MakeTask();
  auto loop = CompileTask(task);
  runtime::CompiledProgram value = loop->function().ProgramFor(task.Inputs());
  value.forward.instructions[0].inputs[0] = value.forward.num_registers + 7;
  auto loaded = runtime::DeserializeProgram(runtime::SerializeProgram(value));
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().ToString().find("out of range"), std::string::npos)
      << loaded.status();
}

// Artifacts carry each kernel's host object code: it survives serialization
// byte for byte, a program loaded with it runs bit-identically, and object
// code made for a CPU feature this machine lacks is refused (by the check
// artifacts run on load, and by the kernel loader itself), naming the feature.
TEST(ProgramValue, HostObjectCodeRoundTripsAndAForeignCpuIsRefused) {
  Task task = MakeTask();
  auto loop = CompileTask(task);
  runtime::CompiledProgram value = loop->function().ProgramFor(task.Inputs());
  ASSERT_GT(value.forward.kernels.size(), 0u);
  ASSERT_TRUE(runtime::AttachObjectCode(value).ok());
  const runtime::KernelCode& first = value.forward.kernels[0];
  EXPECT_GT(first.object_code.size(), 100u);
  EXPECT_EQ(first.object_target, runtime::LlvmHostTarget());
  auto loaded = runtime::DeserializeProgram(runtime::SerializeProgram(value));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->forward.kernels[0].object_code, first.object_code);
  EXPECT_TRUE(runtime::CheckObjectTargets(*loaded).ok());
  auto expected = runtime::RunDifferentiable(
      std::make_shared<runtime::ExecutableProgram>(value), task.Inputs());
  auto got = runtime::RunDifferentiable(
      std::make_shared<runtime::ExecutableProgram>(*loaded), task.Inputs());
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(torch::equal(got[i], expected[i]));

  runtime::CompiledProgram foreign = *loaded;
  foreign.backward.kernels.at(0).object_target += ",mf-imaginary-feature";
  absl::Status refused = runtime::CheckObjectTargets(
      *runtime::DeserializeProgram(runtime::SerializeProgram(foreign)));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.ToString().find("lacks: mf-imaginary-feature"), std::string::npos)
      << refused;
  EXPECT_NE(refused.ToString().find("recompile"), std::string::npos) << refused;
  runtime::KernelCode renamed = foreign.backward.kernels.at(0);
  renamed.name += "_foreign";  // not in the process registry
  auto kernel = runtime::JitKernel::Create(renamed);
  ASSERT_FALSE(kernel.ok());
  EXPECT_NE(kernel.status().ToString().find("mf-imaginary-feature"), std::string::npos);
}

// The C++ back end's host code: one shared object per program, attached
// with the LLVM object code, carried through serialization, run
// bit-identically by a process on the C++ back end without a compiler, and
// refused for an x86-64 level this CPU does not have.
TEST(ProgramValue, SharedObjectsRoundTripAndRunWithoutACompiler) {
  if (!runtime::FindHostCompiler().ok()) GTEST_SKIP() << "no C++ compiler on PATH";
  Task task = MakeTask();
  auto loop = CompileTask(task);
  runtime::CompiledProgram value = loop->function().ProgramFor(task.Inputs());
  ASSERT_TRUE(runtime::AttachObjectCode(value).ok());
  ASSERT_GT(value.forward.shared_object.size(), 1000u);
  EXPECT_EQ(value.forward.shared_object_target, runtime::HostCodeTarget());
  auto loaded = runtime::DeserializeProgram(runtime::SerializeProgram(value));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->forward.shared_object, value.forward.shared_object);
  auto expected = runtime::RunDifferentiable(
      std::make_shared<runtime::ExecutableProgram>(value), task.Inputs());

  setenv("METAFUSE_HOST_BACKEND", "cpp", 1);
  setenv("METAFUSE_CXX", "/nonexistent/c++", 1);  // the artifact's object is all there is
  const runtime::FusedKernelStats before = runtime::GetFusedKernelStats();
  EXPECT_TRUE(runtime::CheckObjectTargets(*loaded).ok());
  auto got = runtime::RunDifferentiable(
      std::make_shared<runtime::ExecutableProgram>(*loaded), task.Inputs());
  const runtime::FusedKernelStats after = runtime::GetFusedKernelStats();
  EXPECT_GT(after.libraries_from_artifact, before.libraries_from_artifact);
  EXPECT_EQ(after.libraries_compiled, before.libraries_compiled);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(torch::equal(got[i], expected[i]));

  runtime::CompiledProgram foreign = *loaded;
  foreign.forward.shared_object_target = "x86-64-v9";
  absl::Status refused = runtime::CheckObjectTargets(foreign);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.ToString().find("x86-64-v9"), std::string::npos) << refused;
  EXPECT_NE(refused.ToString().find("recompile"), std::string::npos) << refused;
  foreign.forward.shared_object.clear();
  foreign.forward.shared_object_target.clear();
  refused = runtime::CheckObjectTargets(foreign);  // no object and no compiler
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.ToString().find("METAFUSE_CXX"), std::string::npos) << refused;
  unsetenv("METAFUSE_HOST_BACKEND");
  unsetenv("METAFUSE_CXX");
}

// A looped inner loop's value carries its loop: it round-trips exactly, and
// the loaded program runs the loop (checkpointed under its memory setting)
// with the live loop's bits. A loop section that points outside the
// program's inputs is refused.
TEST(ProgramValue, LoopedInnerLoopRoundTripsAndRunsItsLoop) {
  // Both loops run their fused programs: the fusion cost check could keep
  // the unfused one for either, whose bits differ.
  setenv("METAFUSE_FUSION_CHECK", "0", 1);
  Task task = MakeTask();
  OptimizerSpec adam;
  adam.kind = "adam";
  adam.lr = 0.01;
  auto stored = CompileInnerLoop(MlpLoss, task.params, task.batch, adam, /*steps=*/30,
                                 /*return_losses=*/false, /*looped=*/true, /*memory=*/-1);
  auto checkpointed = CompileInnerLoop(MlpLoss, task.params, task.batch, adam, 30, false,
                                       true, /*memory: auto*/ 0);
  ASSERT_TRUE(checkpointed->looped());
  const auto live = AdaptAndDifferentiate(task, [&](const TensorList& in) { return (*stored)(in); });
  const auto ckpt =
      AdaptAndDifferentiate(task, [&](const TensorList& in) { return (*checkpointed)(in); });
  ExpectSameBits(ckpt.first, live.first, "checkpointed adapted param");
  ExpectSameBits(ckpt.second, live.second, "checkpointed meta-gradient");
  const auto schedule = checkpointed->last_schedule();
  ASSERT_NE(schedule, nullptr);
  EXPECT_FALSE(schedule->store_all);
  EXPECT_EQ(schedule->recomputed_steps, schedule->planned_recomputed_steps);

  runtime::CompiledProgram value = checkpointed->ProgramFor(task.Inputs());
  EXPECT_EQ(value.loop.steps, 30);
  EXPECT_EQ(value.num_inputs, static_cast<int64_t>(task.Inputs().size()));
  const std::string bytes = runtime::SerializeProgram(value);
  auto loaded = runtime::DeserializeProgram(bytes);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(runtime::Dump(*loaded), runtime::Dump(value));
  EXPECT_NE(runtime::Dump(value).find("loop: 30 steps of the body below; memory auto"),
            std::string::npos);
  EXPECT_EQ(runtime::SerializeProgram(*loaded), bytes);
  auto executable = std::make_shared<runtime::ExecutableProgram>(*loaded);
  const auto again = AdaptAndDifferentiate(
      task, [&](const TensorList& in) { return runtime::RunDifferentiable(executable, in); });
  ExpectSameBits(again.first, live.first, "loaded adapted param");
  ExpectSameBits(again.second, live.second, "loaded meta-gradient");

  runtime::CompiledProgram bad = value;
  bad.loop.state_inputs[0] = 99;
  auto refused = runtime::DeserializeProgram(runtime::SerializeProgram(bad));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().ToString().find("state input 99 out of range"), std::string::npos)
      << refused.status();
  unsetenv("METAFUSE_FUSION_CHECK");
}

}  // namespace
}  // namespace metafuse::compiler

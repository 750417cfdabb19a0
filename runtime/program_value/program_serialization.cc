#include "runtime/program_value/program_serialization.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "absl/strings/str_cat.h"
#include "runtime/program_value/pickle_archive_check.h"

namespace metafuse::runtime {
namespace {

using c10::IValue;
using List = c10::impl::GenericList;

constexpr const char* kMagic = "metafuse-program";
// 2: wrapped-number flags; 3: kernels' host object code; 4: kernels' CUDA
// source; 5: programs' C++/OpenMP shared objects
constexpr int64_t kFormat = 8;  // 6: launches' reductions and scratch outputs; 7: pooled launches;
                                // 8: the loop section

// ---- writing: every struct is a list of its fields, in declaration order.

List NewList() { return List(c10::AnyType::get()); }

IValue Ints(const std::vector<int64_t>& xs) { return IValue(xs); }
IValue DTypes(const std::vector<c10::ScalarType>& xs) {
  std::vector<int64_t> v;
  for (auto t : xs) v.push_back(static_cast<int64_t>(t));
  return IValue(v);
}
IValue Bools(const std::vector<bool>& xs) {
  return IValue(std::vector<int64_t>(xs.begin(), xs.end()));
}

// Bytes as a uint8 tensor: the pickler's strings are text.
IValue Bytes(const std::string& bytes) {
  return at::from_blob(const_cast<char*>(bytes.data()), {static_cast<int64_t>(bytes.size())},
                       at::kByte)
      .clone();
}

IValue Write(const KernelCode& k) {
  List l = NewList();
  l.push_back(k.name);
  l.push_back(k.kernel_ir);
  l.push_back(k.llvm_ir);
  l.push_back(k.cuda_source);
  l.push_back(DTypes(k.input_dtypes));
  l.push_back(Ints(k.input_access));
  l.push_back(Ints(k.input_inner));
  l.push_back(Ints(k.input_mid));
  l.push_back(DTypes(k.output_dtypes));
  l.push_back(k.num_scalars);
  l.push_back(c10::List<std::string>(k.input_names));
  l.push_back(c10::List<std::string>(k.output_names));
  l.push_back(k.object_target);
  l.push_back(Bytes(k.object_code));
  return l;
}

IValue Write(const LaunchPlan& p) {
  List l = NewList();
  l.push_back(p.kernel);
  l.push_back(p.segments);
  l.push_back(Ints(p.binding));
  l.push_back(Bools(p.is_tensor));
  l.push_back(DTypes(p.input_dtypes));
  l.push_back(DTypes(p.output_dtypes));
  l.push_back(Ints(p.numel));
  List sizes = NewList();
  for (const auto& s : p.out_sizes) sizes.push_back(Ints(s));
  l.push_back(sizes);
  l.push_back(Ints(p.reuse));
  List reductions = NewList();
  for (const LaunchPlan::Reduction& r : p.reductions) {
    List item = NewList();
    item.push_back(Ints({r.source, r.access, r.inner, r.mid}));
    item.push_back(r.scale);
    item.push_back(Ints(r.out_sizes));
    reductions.push_back(item);
  }
  l.push_back(reductions);
  l.push_back(p.scratch);
  l.push_back(Ints(p.pool));
  return l;
}

IValue Write(const GemmPlan& g) {
  return Ints({g.trans_a, g.trans_b, g.accumulate});
}

IValue Write(const ReductionPlan& r) {
  List l = NewList();
  l.push_back(static_cast<int64_t>(r.form));
  l.push_back(r.mean);
  l.push_back(Ints(r.out_sizes));
  l.push_back(r.fallback_schema);
  if (r.form == ReductionPlan::kBlock) l.push_back(Ints(r.block));
  return l;
}

IValue Write(const InstructionCode& ins) {
  List l = NewList();
  l.push_back(static_cast<int64_t>(ins.kind));
  l.push_back(ins.name);
  l.push_back(ins.schema);
  l.push_back(ins.plan);
  l.push_back(Ints(ins.inputs));
  l.push_back(Ints(ins.outputs));
  return l;
}

template <typename T>
IValue WriteAll(const std::vector<T>& xs) {
  List l = NewList();
  for (const T& x : xs) l.push_back(Write(x));
  return l;
}

IValue Write(const ProgramCode& p) {
  List l = NewList();
  l.push_back(p.label);
  l.push_back(p.num_registers);
  l.push_back(Ints(p.input_registers));
  l.push_back(Ints(p.output_registers));
  List constants = NewList();
  for (const auto& [reg, value] : p.constants) {
    List c = NewList();
    c.push_back(reg);
    c.push_back(value);
    // The pickler drops a 0-dim tensor's wrapped-number flag, which decides
    // type promotion (float32 tensor / wrapped 4.0 stays float32).
    c.push_back(value.isTensor() && value.toTensor().unsafeGetTensorImpl()->is_wrapped_number());
    constants.push_back(c);
  }
  l.push_back(constants);
  l.push_back(WriteAll(p.instructions));
  l.push_back(WriteAll(p.kernels));
  l.push_back(WriteAll(p.launches));
  l.push_back(WriteAll(p.gemms));
  l.push_back(WriteAll(p.reductions));
  l.push_back(p.shared_object_target);
  l.push_back(Bytes(p.shared_object));
  return l;
}

// ---- reading: a cursor over one list that names the field it is reading
// when the data are not what the format says.

class Reader {
 public:
  Reader(const IValue& v, std::string where) : where_(std::move(where)) {
    if (!v.isList()) throw Bad(where_ + " is not a list");
    list_ = v.toList();
  }
  const IValue& Next(const char* field) {
    field_ = field;
    if (index_ >= list_.size()) throw Bad(absl::StrCat(where_, ".", field, " is missing"));
    current_ = list_.get(index_++);
    return current_;
  }
  int64_t Int(const char* field) {
    const IValue& v = Next(field);
    if (!v.isInt()) throw Bad(Here() + " is not an integer");
    return v.toInt();
  }
  bool Bool(const char* field) {
    const IValue& v = Next(field);
    if (v.isBool()) return v.toBool();
    if (v.isInt()) return v.toInt() != 0;
    throw Bad(Here() + " is not a boolean");
  }
  double Double(const char* field) {
    const IValue& v = Next(field);
    if (!v.isDouble()) throw Bad(Here() + " is not a number");
    return v.toDouble();
  }
  std::string String(const char* field) {
    const IValue& v = Next(field);
    if (!v.isString()) throw Bad(Here() + " is not a string");
    return v.toStringRef();
  }
  std::string Bytes(const char* field) {
    const IValue& v = Next(field);
    // Contiguous, as written: a broadcast view would be copied out to its
    // full size here.
    if (!v.isTensor() || v.toTensor().scalar_type() != at::kByte || v.toTensor().dim() != 1 ||
        !v.toTensor().is_contiguous()) {
      throw Bad(Here() + " is not a contiguous 1-D uint8 tensor");
    }
    const at::Tensor& bytes = v.toTensor();
    return std::string(static_cast<const char*>(bytes.data_ptr()), bytes.numel());
  }
  std::vector<int64_t> Ints(const char* field) {
    const IValue& v = Next(field);
    if (!v.isIntList()) throw Bad(Here() + " is not a list of integers");
    return v.toIntVector();
  }
  std::vector<std::string> Strings(const char* field) {
    const IValue& v = Next(field);
    if (!v.isList()) throw Bad(Here() + " is not a list of strings");
    std::vector<std::string> out;
    for (const IValue& s : v.toListRef()) {
      if (!s.isString()) throw Bad(Here() + " holds a non-string");
      out.push_back(s.toStringRef());
    }
    return out;
  }
  std::vector<c10::ScalarType> DTypes(const char* field) {
    std::vector<c10::ScalarType> out;
    for (int64_t t : Ints(field)) {
      if (t < 0 || t >= static_cast<int64_t>(c10::ScalarType::NumOptions)) {
        throw Bad(Here() + " holds an unknown dtype code " + std::to_string(t));
      }
      out.push_back(static_cast<c10::ScalarType>(t));
    }
    return out;
  }
  std::vector<bool> Bools(const char* field) {
    std::vector<int64_t> v = Ints(field);
    return std::vector<bool>(v.begin(), v.end());
  }
  template <typename T, typename F>
  std::vector<T> Each(const char* field, F read) {
    const IValue& v = Next(field);
    if (!v.isList()) throw Bad(Here() + " is not a list");
    std::vector<T> out;
    const std::string where = Here();
    List items = v.toList();
    for (size_t i = 0; i < items.size(); ++i) {
      Reader r(items.get(i), absl::StrCat(where, "[", i, "]"));
      out.push_back(read(r));
    }
    return out;
  }
  std::string Here() const { return absl::StrCat(where_, ".", field_); }

  struct Bad : std::runtime_error {
    using std::runtime_error::runtime_error;
  };

 private:
  List list_ = NewList();
  size_t index_ = 0;
  std::string where_;
  const char* field_ = "";
  IValue current_;
};

KernelCode ReadKernel(Reader& r) {
  KernelCode k;
  k.name = r.String("name");
  k.kernel_ir = r.String("kernel_ir");
  k.llvm_ir = r.String("llvm_ir");
  k.cuda_source = r.String("cuda_source");
  k.input_dtypes = r.DTypes("input_dtypes");
  k.input_access = r.Ints("input_access");
  k.input_inner = r.Ints("input_inner");
  k.input_mid = r.Ints("input_mid");
  k.output_dtypes = r.DTypes("output_dtypes");
  k.num_scalars = r.Int("num_scalars");
  k.input_names = r.Strings("input_names");
  k.output_names = r.Strings("output_names");
  k.object_target = r.String("object_target");
  k.object_code = r.Bytes("object_code");
  if (k.object_code.empty() != k.object_target.empty()) {
    throw Reader::Bad(r.Here() + ": object code without its target, or a target without code");
  }
  if (k.input_access.size() != k.input_dtypes.size() ||
      k.input_inner.size() != k.input_dtypes.size() ||
      k.input_mid.size() != k.input_dtypes.size()) {
    throw Reader::Bad(r.Here() + ": per-input fields of different lengths");
  }
  return k;
}

LaunchPlan ReadLaunch(Reader& r) {
  LaunchPlan p;
  p.kernel = r.Int("kernel");
  p.segments = r.Int("segments");
  p.binding = r.Ints("binding");
  p.is_tensor = r.Bools("is_tensor");
  p.input_dtypes = r.DTypes("input_dtypes");
  p.output_dtypes = r.DTypes("output_dtypes");
  p.numel = r.Ints("numel");
  const IValue& sizes = r.Next("out_sizes");
  if (!sizes.isList()) throw Reader::Bad(r.Here() + " is not a list");
  List items = sizes.toList();
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items.get(i).isIntList()) throw Reader::Bad(r.Here() + " holds a non-size");
    p.out_sizes.push_back(items.get(i).toIntVector());
  }
  p.reuse = r.Ints("reuse");
  p.reductions = r.Each<LaunchPlan::Reduction>("reductions", [](Reader& item) {
    LaunchPlan::Reduction red;
    const std::vector<int64_t> form = item.Ints("form");
    if (form.size() != 4 || form[0] < 0 || form[1] < 1 || form[1] > 5 || form[2] < 1 ||
        form[3] < 1) {
      throw Reader::Bad(item.Here() + ": expected {source >= 0, access 1-5, inner >= 1, mid >= 1}");
    }
    red.source = form[0], red.access = form[1], red.inner = form[2], red.mid = form[3];
    red.scale = item.Double("scale");
    red.out_sizes = item.Ints("out_sizes");
    return red;
  });
  p.scratch = r.Int("scratch");
  p.pool = r.Ints("pool");
  if (!p.pool.empty() && (p.pool.size() != 2 || p.pool[0] < 1 || p.pool[1] < 1)) {
    throw Reader::Bad(r.Here() + ": expected an empty pool or {kh >= 1, kw >= 1}");
  }
  return p;
}

GemmPlan ReadGemm(Reader& r) {
  GemmPlan g;
  g.trans_a = r.Bool("trans_a");
  g.trans_b = r.Bool("trans_b");
  g.accumulate = r.Bool("accumulate");
  return g;
}

ReductionPlan ReadReduction(Reader& r) {
  ReductionPlan p;
  const int64_t form = r.Int("form");
  if (form < 0 || form > 3) throw Reader::Bad(r.Here() + ": unknown reduction form");
  p.form = static_cast<ReductionPlan::Form>(form);
  p.mean = r.Bool("mean");
  p.out_sizes = r.Ints("out_sizes");
  p.fallback_schema = r.String("fallback_schema");
  if (p.form == ReductionPlan::kBlock) {
    p.block = r.Ints("block");
    if (p.block.size() != 3 || p.block[0] < 1 || p.block[1] < 1 || p.block[2] < 1) {
      throw Reader::Bad(r.Here() + ": a block reduction needs {outer, reduce, inner} >= 1");
    }
  }
  return p;
}

InstructionCode ReadInstruction(Reader& r) {
  InstructionCode ins;
  const int64_t kind = r.Int("kind");
  if (kind < 0 || kind > static_cast<int64_t>(InstructionKind::kReduction)) {
    throw Reader::Bad(r.Here() + ": unknown instruction kind " + std::to_string(kind));
  }
  ins.kind = static_cast<InstructionKind>(kind);
  ins.name = r.String("name");
  ins.schema = r.String("schema");
  ins.plan = r.Int("plan");
  ins.inputs = r.Ints("inputs");
  ins.outputs = r.Ints("outputs");
  return ins;
}

// Register and plan indices in range: a loaded program never reads outside
// its register file or its plan tables.
void CheckIndices(const ProgramCode& p, const std::string& where) {
  auto reg = [&](int64_t r, const std::string& what) {
    if (r < 0 || r >= p.num_registers) {
      throw Reader::Bad(absl::StrCat(where, ": ", what, " register %", r, " out of range [0, ",
                                     p.num_registers, ")"));
    }
  };
  for (int64_t r : p.input_registers) reg(r, "input");
  for (int64_t r : p.output_registers) reg(r, "output");
  for (const auto& c : p.constants) reg(c.first, "constant");
  for (size_t i = 0; i < p.instructions.size(); ++i) {
    const InstructionCode& ins = p.instructions[i];
    const std::string what = absl::StrCat("instruction ", i);
    for (int64_t r : ins.inputs) reg(r, what + " input");
    for (int64_t r : ins.outputs) reg(r, what + " output");
    size_t table = 0;
    switch (ins.kind) {
      case InstructionKind::kFusedKernel: table = p.launches.size(); break;
      case InstructionKind::kGemm: table = p.gemms.size(); break;
      case InstructionKind::kReduction: table = p.reductions.size(); break;
      default: continue;
    }
    if (ins.plan < 0 || ins.plan >= static_cast<int64_t>(table)) {
      throw Reader::Bad(absl::StrCat(where, ": ", what, " names plan #", ins.plan,
                                     " of ", table));
    }
  }
  for (size_t k = 0; k < p.launches.size(); ++k) {
    if (p.launches[k].kernel < 0 ||
        p.launches[k].kernel >= static_cast<int64_t>(p.kernels.size())) {
      throw Reader::Bad(absl::StrCat(where, ": launch #", k, " names kernel #",
                                     p.launches[k].kernel, " of ", p.kernels.size()));
    }
  }
}

ProgramCode ReadProgram(Reader& r) {
  ProgramCode p;
  p.label = r.String("label");
  p.num_registers = r.Int("num_registers");
  p.input_registers = r.Ints("input_registers");
  p.output_registers = r.Ints("output_registers");
  p.constants = r.Each<std::pair<int64_t, IValue>>("constants", [](Reader& c) {
    const int64_t reg = c.Int("register");
    IValue value = c.Next("value");
    const bool wrapped = c.Bool("wrapped_number");
    if (wrapped) {
      if (!value.isTensor() || value.toTensor().dim() != 0) {
        throw Reader::Bad("a wrapped-number constant that is not a 0-dim tensor");
      }
      value.toTensor().unsafeGetTensorImpl()->set_wrapped_number(true);
    }
    return std::make_pair(reg, value);
  });
  p.instructions = r.Each<InstructionCode>("instructions", ReadInstruction);
  p.kernels = r.Each<KernelCode>("kernels", ReadKernel);
  p.launches = r.Each<LaunchPlan>("launches", ReadLaunch);
  p.gemms = r.Each<GemmPlan>("gemms", ReadGemm);
  p.reductions = r.Each<ReductionPlan>("reductions", ReadReduction);
  p.shared_object_target = r.String("shared_object_target");
  p.shared_object = r.Bytes("shared_object");
  if (p.shared_object.empty() != p.shared_object_target.empty()) {
    throw Reader::Bad(r.Here() + ": a shared object without its target, or a target without one");
  }
  CheckIndices(p, p.label);
  return p;
}

List WriteLoop(const LoopSection& loop) {
  List l = NewList();
  l.push_back(loop.steps);
  l.push_back(Ints(loop.state_inputs));
  l.push_back(Ints(loop.state_zeros));
  l.push_back(Ints(loop.fixed_inputs));
  List tables = NewList();
  for (const at::Tensor& t : loop.per_step) tables.push_back(t.contiguous().cpu());
  l.push_back(tables);
  l.push_back(Ints(loop.body_differentiable_inputs));
  l.push_back(loop.num_results);
  l.push_back(loop.return_losses);
  l.push_back(loop.memory_budget);
  return l;
}

// The loop section, checked against the program it belongs to: every index
// in range, one table row per step.
LoopSection ReadLoop(Reader& r, const CompiledProgram& p) {
  LoopSection loop;
  loop.steps = r.Int("steps");
  loop.state_inputs = r.Ints("state_inputs");
  loop.state_zeros = r.Ints("state_zeros");
  loop.fixed_inputs = r.Ints("fixed_inputs");
  const IValue& tables = r.Next("per_step");
  if (!tables.isList()) throw Reader::Bad(r.Here() + " is not a list of tensors");
  for (const IValue& t : tables.toListRef()) {
    if (!t.isTensor() || t.toTensor().dim() < 1 || !t.toTensor().is_contiguous()) {
      throw Reader::Bad(r.Here() + " holds something other than a contiguous table tensor");
    }
    loop.per_step.push_back(t.toTensor());
  }
  loop.body_differentiable_inputs = r.Ints("body_differentiable_inputs");
  loop.num_results = r.Int("num_results");
  loop.return_losses = r.Bool("return_losses");
  loop.memory_budget = r.Int("memory_budget");
  if (loop.steps == 0) return loop;
  const int64_t num_state = static_cast<int64_t>(loop.state_inputs.size());
  const int64_t body_inputs =
      num_state + static_cast<int64_t>(loop.fixed_inputs.size() + loop.per_step.size());
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) throw Reader::Bad("program.loop: " + what);
  };
  check(loop.steps > 0, absl::StrCat("steps ", loop.steps, " is not positive"));
  check(loop.state_zeros.size() == loop.state_inputs.size(),
        "state_zeros and state_inputs differ in length");
  for (int64_t i : loop.state_inputs) {
    check(i >= 0 && i < p.num_inputs, absl::StrCat("state input ", i, " out of range"));
  }
  for (int64_t i : loop.fixed_inputs) {
    check(i >= 0 && i < p.num_inputs, absl::StrCat("fixed input ", i, " out of range"));
  }
  for (const at::Tensor& t : loop.per_step) {
    check(t.size(0) >= loop.steps, "a per-step table has fewer rows than steps");
  }
  for (int64_t i : loop.body_differentiable_inputs) {
    check(i >= 0 && i < body_inputs, absl::StrCat("body gradient of input ", i, " out of range"));
  }
  check(loop.num_results >= 0 && loop.num_results <= num_state, "num_results out of range");
  check(static_cast<int64_t>(p.forward.input_registers.size()) == body_inputs,
        "the body's forward does not take the state, fixed and per-step inputs");
  check(static_cast<int64_t>(p.forward.output_registers.size()) >= num_state + 1,
        "the body's forward does not return the next state and the loss");
  check(static_cast<int64_t>(p.backward.output_registers.size()) ==
            static_cast<int64_t>(loop.body_differentiable_inputs.size()),
        "the body's backward does not return one gradient per body gradient input");
  return loop;
}

}  // namespace

std::string SerializeProgram(const CompiledProgram& program) {
  List root = NewList();
  root.push_back(std::string(kMagic));
  root.push_back(kFormat);
  List versions = NewList();
  for (const auto& [k, v] : program.versions) {
    versions.push_back(k);
    versions.push_back(v);
  }
  root.push_back(versions);
  root.push_back(program.num_inputs);
  root.push_back(program.num_outputs);
  root.push_back(Ints(program.differentiable_inputs));
  root.push_back(Ints(program.guard));
  root.push_back(Write(program.forward));
  root.push_back(Write(program.backward));
  root.push_back(WriteLoop(program.loop));
  std::vector<char> bytes = torch::jit::pickle_save(root);
  return std::string(bytes.begin(), bytes.end());
}

absl::StatusOr<CompiledProgram> DeserializeProgram(const std::string& bytes) {
  // LibTorch's reader and unpickler trust their input: check it first.
  if (absl::Status archive = CheckPickleArchive(bytes); !archive.ok()) {
    return absl::DataLossError(
        absl::StrCat("compiled program: ", archive.message(), "; recompile it"));
  }
  IValue root;
  try {
    root = torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const std::exception& e) {
    return absl::DataLossError(
        absl::StrCat("compiled program: the bytes are not a readable program (", e.what(),
                     "); recompile it"));
  }
  try {
    Reader r(root, "program");
    if (r.String("magic") != kMagic) {
      return absl::InvalidArgumentError("compiled program: not a metafuse program");
    }
    const int64_t format = r.Int("format");
    if (format != kFormat) {
      return absl::FailedPreconditionError(
          absl::StrCat("compiled program: format ", format, ", this metafuse reads format ",
                       kFormat, "; recompile it with this version"));
    }
    CompiledProgram p;
    const IValue& versions = r.Next("versions");
    if (!versions.isList() || versions.toList().size() % 2 != 0) {
      throw Reader::Bad("program.versions is not a list of (name, value) pairs");
    }
    List kv = versions.toList();
    for (size_t i = 0; i + 1 < kv.size(); i += 2) {
      if (!kv.get(i).isString() || !kv.get(i + 1).isString()) {
        throw Reader::Bad("program.versions holds a non-string");
      }
      p.versions[kv.get(i).toStringRef()] = kv.get(i + 1).toStringRef();
    }
    p.num_inputs = r.Int("num_inputs");
    p.num_outputs = r.Int("num_outputs");
    p.differentiable_inputs = r.Ints("differentiable_inputs");
    p.guard = r.Ints("guard");
    Reader fr(r.Next("forward"), "forward");
    p.forward = ReadProgram(fr);
    Reader br(r.Next("backward"), "backward");
    p.backward = ReadProgram(br);
    Reader lr(r.Next("loop"), "loop");
    p.loop = ReadLoop(lr, p);
    return p;
  } catch (const Reader::Bad& e) {
    return absl::DataLossError(absl::StrCat("compiled program: ", e.what(), "; recompile it"));
  }
}

}  // namespace metafuse::runtime

#include "compiler/codegen/llvm_printer.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <chrono>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/codegen/kernel_contract.h"
#include "compiler/codegen/kernel_math.h"

namespace metafuse::codegen {
namespace {

using kir::Access;
using kir::Cmp;
using kir::DType;
using kir::Kernel;
using kir::Node;
using kir::Op;

const char* Ty(DType t) { return t == DType::kF32 ? "float" : "double"; }
const char* Sfx(DType t) { return t == DType::kF32 ? "f32" : "f64"; }
int Align(DType t) { return t == DType::kF32 ? 4 : 8; }

// LLVM's exact constant syntax: the bits of the value as a double (a float
// constant is written as the double it widens to).
std::string Literal(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return absl::StrFormat("0x%016X", bits);
}

const char* FCmp(Cmp c) {
  switch (c) {
    case Cmp::kGt: return "ogt";
    case Cmp::kLt: return "olt";
    case Cmp::kGe: return "oge";
    case Cmp::kLe: return "ole";
    case Cmp::kEq: return "oeq";
    case Cmp::kNe: return "une";  // unordered: NaN != NaN, as in C and torch
  }
  return "ogt";
}

class Printer {
 public:
  explicit Printer(const Kernel& k) : k_(k), names_(k.nodes.size()) {}

  std::string Module() {
    const std::string sym = LlvmKernelSymbol(k_);
    // Index arithmetic (i % inner, i / inner, the middle and periodic reads)
    // in 64 bits has no vector form on x86 (no 64-bit multiply-high), so
    // such a loop would run scalar. Rows: when every positional input's
    // period is a multiple of a row length L worth a loop of its own, the
    // loop runs row by row (rows aligned to L): within a row each such
    // input is one value or a contiguous run, with no division at all.
    // Otherwise a second body computes the index in 32 bits, which
    // vectorizes, and the entry takes it whenever the range fits.
    row_ = RowLength();
    bool narrow = false;
    for (const kir::InputSpec& in : k_.inputs) narrow = narrow || kir::HasInner(in.access);
    for (const kir::InputSpec& in : k_.inputs) {
      narrow = narrow && in.mid * in.inner < (int64_t{1} << 31);
    }
    std::string body;
    if (row_ > 0) {
      body = Body(sym + ".rows", Mode::kRows);
    } else {
      body = Body(sym + ".body", Mode::kWide);
      if (narrow) body += Body(sym + ".body32", Mode::kNarrow);
    }
    // The entry point: unpack pointer arrays and scalars, call the body.
    std::string entry;
    absl::StrAppend(&entry, "define void @", sym,
                    "(i64 %begin, i64 %end, i8** nocapture readonly %inputs, "
                    "i8** nocapture readonly %outputs, double* nocapture readonly "
                    "%scalars) #1 {\nentry:\n");
    std::vector<std::string> args = {"i64 %begin", "i64 %end"};
    auto unpack = [&](const char* array, const char* prefix, size_t j, DType t) {
      absl::StrAppend(&entry, "  %", prefix, j, ".slot = getelementptr inbounds i8*, i8** %",
                      array, ", i64 ", j, "\n", "  %", prefix, j, ".raw = load i8*, i8** %",
                      prefix, j, ".slot, align 8\n", "  %", prefix, j, " = bitcast i8* %",
                      prefix, j, ".raw to ", Ty(t), "*\n");
      args.push_back(absl::StrCat(Ty(t), "* %", prefix, j));
    };
    for (size_t j = 0; j < k_.inputs.size(); ++j) unpack("inputs", "in", j, k_.inputs[j].dtype);
    for (size_t j = 0; j < k_.outputs.size(); ++j) unpack("outputs", "out", j, OutType(j));
    for (size_t j = 0; j < k_.scalars.size(); ++j) {
      absl::StrAppend(&entry, "  %s", j, ".slot = getelementptr inbounds double, double* "
                      "%scalars, i64 ", j, "\n  %s", j, ".d = load double, double* %s", j,
                      ".slot, align 8\n");
      if (k_.scalars[j].dtype == DType::kF32) {
        absl::StrAppend(&entry, "  %s", j, " = fptrunc double %s", j, ".d to float\n");
        args.push_back(absl::StrCat("float %s", j));
      } else {
        args.push_back(absl::StrCat("double %s", j, ".d"));
      }
    }
    const std::string call_args = absl::StrCat("(", absl::StrJoin(args, ", "), ")\n  ret void\n");
    if (row_ > 0) {
      absl::StrAppend(&entry, "  call void @", sym, ".rows", call_args);
    } else {
      if (narrow) {
        absl::StrAppend(&entry,
                        "  %fits = icmp sle i64 %end, 2147483647\n"
                        "  br i1 %fits, label %narrow, label %wide\n"
                        "narrow:\n"
                        "  call void @", sym, ".body32", call_args, "wide:\n");
      }
      absl::StrAppend(&entry, "  call void @", sym, ".body", call_args);
    }
    entry += "}\n\n";

    std::string module = absl::StrCat("; metafuse kernel ", k_.name, "\n\n");
    for (const std::string& d : decls_) absl::StrAppend(&module, d, "\n");
    absl::StrAppend(&module, "\n", body, entry,
                    "attributes #0 = { alwaysinline nounwind }\n"
                    "attributes #1 = { nounwind }\n");
    return module;
  }

 private:
  // How Body runs the element loop: flat with 64-bit index arithmetic, flat
  // with 32-bit (the caller guarantees end < 2^31), or row by row.
  enum class Mode { kWide, kNarrow, kRows };

  // The row length for Mode::kRows: the gcd of the periods of the inputs
  // read by position (inner, and mid * inner for the middle access), if it
  // is at least 16 elements; else 0 (the flat loop).
  int64_t RowLength() const {
    int64_t g = 0;
    for (const kir::InputSpec& in : k_.inputs) {
      if (!kir::HasInner(in.access)) continue;
      g = std::gcd(g, in.inner);
      if (kir::HasMid(in.access)) g = std::gcd(g, in.mid * in.inner);
    }
    return g >= 16 ? g : 0;
  }

  // One definition of the element loop, `name`(begin, end, buffers,
  // scalars).
  std::string Body(const std::string& name, Mode mode) {
    std::fill(names_.begin(), names_.end(), std::string());
    row_bases_.clear();
    mode_ = mode;
    std::vector<std::string> params = {"i64 %begin", "i64 %end"};
    for (size_t j = 0; j < k_.inputs.size(); ++j) {
      params.push_back(absl::StrCat(Ty(k_.inputs[j].dtype),
                                    "* noalias nocapture readonly %in", j));
    }
    for (size_t j = 0; j < k_.outputs.size(); ++j) {
      params.push_back(absl::StrCat(Ty(OutType(j)), "* noalias nocapture writeonly %out", j));
    }
    for (size_t j = 0; j < k_.scalars.size(); ++j) {
      params.push_back(absl::StrCat(Ty(k_.scalars[j].dtype), " %s", j));
    }
    std::string body;
    absl::StrAppend(&body, "define internal void @", name, "(", absl::StrJoin(params, ", "),
                    ") #0 {\n");
    body +=
        "entry:\n"
        "  %empty = icmp sge i64 %begin, %end\n"
        "  br i1 %empty, label %exit, label %preheader\n"
        "preheader:\n";
    // Broadcast inputs are read once, before the loop.
    const std::vector<int> order = kir::LiveTopologicalOrder(k_);
    for (int id : order) {
      const Node& n = k_.nodes[id];
      if (n.op == Op::kInput && k_.inputs[n.index].access == Access::kBroadcast) {
        names_[id] = absl::StrCat("%v", id);
        absl::StrAppend(&body, "  %v", id, " = load ", Ty(n.dtype), ", ", Ty(n.dtype),
                        "* %in", n.index, ", align ", Align(n.dtype), "\n");
      }
    }
    if (mode_ == Mode::kRows) {
      // row: [rs, re) = [rs, min(end, (rs / L + 1) * L)); the positional
      // inputs' values or run starts are computed here, once per row.
      absl::StrAppend(&body,
                      "  br label %row\n"
                      "row:\n"
                      "  %rs = phi i64 [ %begin, %preheader ], [ %re, %rowlatch ]\n"
                      "  %rq = udiv i64 %rs, ", row_, "\n"
                      "  %rq1 = add nuw i64 %rq, 1\n"
                      "  %rnext = mul nuw i64 %rq1, ", row_, "\n"
                      "  %rshort = icmp slt i64 %rnext, %end\n"
                      "  %re = select i1 %rshort, i64 %rnext, i64 %end\n");
      for (int id : order) {
        const Node& n = k_.nodes[id];
        if (n.op != Op::kInput || !kir::HasInner(k_.inputs[n.index].access)) continue;
        const kir::InputSpec& in = k_.inputs[n.index];
        const std::string j = IndexAt(id, "%rs", "i64", &body);
        if (in.access == Access::kOuter || in.access == Access::kPeriodic) {
          // One value per row: loaded here, read by every element.
          names_[id] = absl::StrCat("%v", id);
          absl::StrAppend(&body, "  %rp", id, " = getelementptr inbounds ", Ty(n.dtype), ", ",
                          Ty(n.dtype), "* %in", n.index, ", i64 ", j, "\n  %v", id,
                          " = load ", Ty(n.dtype), ", ", Ty(n.dtype), "* %rp", id,
                          ", align ", Align(n.dtype), "\n");
        } else {
          row_bases_[id] = j;  // a contiguous run from here
        }
      }
      body +=
          "  br label %loop\n"
          "loop:\n"
          "  %i = phi i64 [ %rs, %row ], [ %i.next, %loop ]\n"
          "  %off = sub nuw i64 %i, %rs\n";
    } else {
      body +=
          "  br label %loop\n"
          "loop:\n"
          "  %i = phi i64 [ %begin, %preheader ], [ %i.next, %loop ]\n";
    }
    if (mode_ == Mode::kNarrow) body += "  %i32 = trunc i64 %i to i32\n";
    for (int id : order) {
      if (names_[id].empty()) Emit(id, &body);
    }
    for (size_t j = 0; j < k_.outputs.size(); ++j) {
      const DType t = OutType(j);
      absl::StrAppend(&body, "  %po", j, " = getelementptr inbounds ", Ty(t), ", ", Ty(t),
                      "* %out", j, ", i64 %i\n");
      absl::StrAppend(&body, "  store ", Ty(t), " ", names_[k_.outputs[j].node], ", ",
                      Ty(t), "* %po", j, ", align ", Align(t), "\n");
    }
    if (mode_ == Mode::kRows) {
      body +=
          "  %i.next = add nsw i64 %i, 1\n"
          "  %more = icmp slt i64 %i.next, %re\n"
          "  br i1 %more, label %loop, label %rowlatch\n"
          "rowlatch:\n"
          "  %morerows = icmp slt i64 %re, %end\n"
          "  br i1 %morerows, label %row, label %exit\n";
    } else {
      body +=
          "  %i.next = add nsw i64 %i, 1\n"
          "  %more = icmp slt i64 %i.next, %end\n"
          "  br i1 %more, label %loop, label %exit\n";
    }
    body +=
        "exit:\n"
        "  ret void\n"
        "}\n\n";
    return body;
  }

  // The element input node `id` reads at loop index `i` (an SSA value of
  // integer type `w`), by its access: appended to `out`, returned.
  std::string IndexAt(int id, const std::string& i, const char* w, std::string* out) {
    const kir::InputSpec& in = k_.inputs[k_.nodes[id].index];
    const std::string j = Fresh(id);
    switch (in.access) {
      case Access::kInner:
      case Access::kOuter:
        absl::StrAppend(out, "  ", j, " = ", in.access == Access::kInner ? "urem" : "udiv", " ",
                        w, " ", i, ", ", in.inner, "\n");
        break;
      case Access::kMiddle: {
        // (i / (mid * inner)) * inner + i % inner
        const std::string q = Fresh(id), base = Fresh(id), r = Fresh(id);
        absl::StrAppend(out, "  ", q, " = udiv ", w, " ", i, ", ", in.mid * in.inner, "\n");
        absl::StrAppend(out, "  ", base, " = mul nuw ", w, " ", q, ", ", in.inner, "\n");
        absl::StrAppend(out, "  ", r, " = urem ", w, " ", i, ", ", in.inner, "\n");
        absl::StrAppend(out, "  ", j, " = add nuw ", w, " ", base, ", ", r, "\n");
        break;
      }
      case Access::kPeriodic: {
        // (i / inner) % mid
        const std::string q = Fresh(id);
        absl::StrAppend(out, "  ", q, " = udiv ", w, " ", i, ", ", in.inner, "\n");
        absl::StrAppend(out, "  ", j, " = urem ", w, " ", q, ", ", in.mid, "\n");
        break;
      }
      default:
        return i;
    }
    return j;
  }

  DType OutType(size_t j) const { return k_.nodes[k_.outputs[j].node].dtype; }

  std::string Fresh(int id) { return absl::StrCat("%t", id, ".", temp_++); }

  std::string Intrinsic(const char* base, DType t, int arity = 1) {
    std::string name = absl::StrCat("llvm.", base, ".", Sfx(t));
    std::vector<std::string> ps(arity, Ty(t));
    decls_.insert(absl::StrCat("declare ", Ty(t), " @", name, "(",
                               absl::StrJoin(ps, ", "), ")"));
    return name;
  }

  // Appends `%dst = call T @fn(T a)`.
  std::string Call(const std::string& fn, DType t, const std::string& a,
                   const std::string& dst, std::string* out) {
    absl::StrAppend(out, "  ", dst, " = call ", Ty(t), " @", fn, "(", Ty(t), " ", a, ")\n");
    return dst;
  }

  std::string Bin(const char* inst, DType t, const std::string& a, const std::string& b,
                  const std::string& dst, std::string* out) {
    absl::StrAppend(out, "  ", dst, " = ", inst, " ", Ty(t), " ", a, ", ", b, "\n");
    return dst;
  }

  // mf_kernel_math::Exp (compiler/codegen/kernel_math.h), the same operations in the
  // same order, so that the JIT agrees with the interpreter bit for bit.
  template <typename C>
  void ExpBody(int id, DType t, const std::string& x, const std::string& dst,
               std::string* out) {
    const char* T = Ty(t);
    const char* bits = t == DType::kF32 ? "i32" : "i64";
    auto lit = [](double v) { return Literal(v); };
    std::string lo = Fresh(id), hi = Fresh(id), ok = Fresh(id), xs = Fresh(id);
    absl::StrAppend(out, "  ", lo, " = fcmp oge ", T, " ", x, ", ", lit(C::kMin), "\n");
    absl::StrAppend(out, "  ", hi, " = fcmp ole ", T, " ", x, ", ", lit(C::kMax), "\n");
    absl::StrAppend(out, "  ", ok, " = and i1 ", lo, ", ", hi, "\n");
    absl::StrAppend(out, "  ", xs, " = select i1 ", ok, ", ", T, " ", x, ", ", T, " ",
                    lit(0.0), "\n");
    std::string m = Bin("fmul", t, xs, lit(C::kLog2e), Fresh(id), out);
    std::string a = Bin("fadd", t, m, lit(C::kRound), Fresh(id), out);
    std::string k = Bin("fsub", t, a, lit(C::kRound), Fresh(id), out);
    std::string kh = Bin("fmul", t, k, lit(C::kLn2Hi), Fresh(id), out);
    std::string s1 = Bin("fsub", t, xs, kh, Fresh(id), out);
    std::string kl = Bin("fmul", t, k, lit(C::kLn2Lo), Fresh(id), out);
    std::string r = Bin("fsub", t, s1, kl, Fresh(id), out);
    std::string p = lit(C::kCoeff[C::kDegree]);
    for (int d = C::kDegree - 1; d >= 0; --d) {
      std::string pm = Bin("fmul", t, p, r, Fresh(id), out);
      p = Bin("fadd", t, pm, lit(C::kCoeff[d]), Fresh(id), out);
    }
    std::string ki = Fresh(id), k1 = Fresh(id), k2 = Fresh(id);
    absl::StrAppend(out, "  ", ki, " = fptosi ", T, " ", k, " to i32\n");
    absl::StrAppend(out, "  ", k1, " = sdiv i32 ", ki, ", 2\n");
    absl::StrAppend(out, "  ", k2, " = sub i32 ", ki, ", ", k1, "\n");
    auto pow2 = [&](const std::string& e) {
      std::string biased = Fresh(id), wide = biased, shifted = Fresh(id), f = Fresh(id);
      absl::StrAppend(out, "  ", biased, " = add i32 ", e, ", ", C::kBias, "\n");
      if (t == DType::kF64) {
        wide = Fresh(id);
        absl::StrAppend(out, "  ", wide, " = sext i32 ", biased, " to i64\n");
      }
      absl::StrAppend(out, "  ", shifted, " = shl ", bits, " ", wide, ", ", C::kMantissa, "\n");
      absl::StrAppend(out, "  ", f, " = bitcast ", bits, " ", shifted, " to ", T, "\n");
      return f;
    };
    std::string y1 = Bin("fmul", t, p, pow2(k1), Fresh(id), out);
    std::string y = Bin("fmul", t, y1, pow2(k2), Fresh(id), out);
    std::string gt = Fresh(id), lt = Fresh(id), t1 = Fresh(id), t2 = Fresh(id);
    absl::StrAppend(out, "  ", gt, " = fcmp ogt ", T, " ", x, ", ", lit(C::kMax), "\n");
    absl::StrAppend(out, "  ", lt, " = fcmp olt ", T, " ", x, ", ", lit(C::kMin), "\n");
    absl::StrAppend(out, "  ", t1, " = select i1 ", lt, ", ", T, " ", lit(0.0), ", ", T, " ",
                    x, "\n");
    absl::StrAppend(out, "  ", t2, " = select i1 ", gt, ", ", T, " ",
                    lit(std::numeric_limits<double>::infinity()), ", ", T, " ", t1, "\n");
    absl::StrAppend(out, "  ", dst, " = select i1 ", ok, ", ", T, " ", y, ", ", T, " ", t2,
                    "\n");
  }

  // mf_kernel_math::Tanh(double), the same operations in the same order.
  void TanhBody(int id, const std::string& x, const std::string& dst, std::string* out) {
    using C = mf_kernel_math::TanhConstants;
    const DType t = DType::kF64;
    const char* T = Ty(t);
    auto lit = [](double v) { return Literal(v); };
    std::string negative = Fresh(id), minus_x = Fresh(id), a = Fresh(id);
    absl::StrAppend(out, "  ", negative, " = fcmp olt ", T, " ", x, ", ", lit(0.0), "\n");
    absl::StrAppend(out, "  ", minus_x, " = fneg ", T, " ", x, "\n");
    absl::StrAppend(out, "  ", a, " = select i1 ", negative, ", ", T, " ", minus_x, ", ", T, " ",
                    x, "\n");
    std::string s = Bin("fmul", t, x, x, Fresh(id), out);
    std::string p = lit(C::kCoeff[C::kTerms - 1]);
    for (int d = C::kTerms - 2; d >= 0; --d) {
      std::string ps = Bin("fmul", t, p, s, Fresh(id), out);
      p = Bin("fadd", t, ps, lit(C::kCoeff[d]), Fresh(id), out);
    }
    std::string small = Bin("fmul", t, x, p, Fresh(id), out);
    std::string twice = Bin("fmul", t, lit(-2.0), a, Fresh(id), out);
    std::string e = Exp(id, t, twice, Fresh(id), out);
    std::string num = Bin("fsub", t, lit(1.0), e, Fresh(id), out);
    std::string den = Bin("fadd", t, lit(1.0), e, Fresh(id), out);
    std::string big = Bin("fdiv", t, num, den, Fresh(id), out);
    std::string minus_big = Fresh(id), away = Fresh(id), near = Fresh(id);
    absl::StrAppend(out, "  ", minus_big, " = fneg ", T, " ", big, "\n");
    absl::StrAppend(out, "  ", away, " = select i1 ", negative, ", ", T, " ", minus_big, ", ", T,
                    " ", big, "\n");
    absl::StrAppend(out, "  ", near, " = fcmp olt ", T, " ", a, ", ", lit(C::kSmall), "\n");
    absl::StrAppend(out, "  ", dst, " = select i1 ", near, ", ", T, " ", small, ", ", T, " ",
                    away, "\n");
  }

  std::string Exp(int id, DType t, const std::string& x, const std::string& dst,
                  std::string* out) {
    if (t == DType::kF32) {
      ExpBody<mf_kernel_math::ExpConstants<float>>(id, t, x, dst, out);
    } else {
      ExpBody<mf_kernel_math::ExpConstants<double>>(id, t, x, dst, out);
    }
    return dst;
  }

  void Emit(int id, std::string* out) {
    const Node& n = k_.nodes[id];
    const DType t = n.dtype;
    const std::string dst = absl::StrCat("%v", id);
    auto arg = [&](int i) { return names_[n.args[i]]; };
    const std::string one = Literal(1.0), zero = Literal(0.0);
    std::string& name = names_[id];
    switch (n.op) {
      case Op::kInput: {
        const kir::InputSpec& in = k_.inputs[n.index];
        std::string index = "%i";
        if (mode_ == Mode::kRows && kir::HasInner(in.access)) {
          // Inside a row: the run start plus the offset in the row.
          index = absl::StrCat("%j", id);
          absl::StrAppend(out, "  ", index, " = add nuw i64 ", row_bases_.at(id), ", %off\n");
        } else if (kir::HasInner(in.access)) {
          if (mode_ == Mode::kNarrow) {
            const std::string j = IndexAt(id, "%i32", "i32", out);
            index = absl::StrCat("%j", id);
            absl::StrAppend(out, "  ", index, " = zext i32 ", j, " to i64\n");
          } else {
            index = IndexAt(id, "%i", "i64", out);
          }
        }
        absl::StrAppend(out, "  %p", id, " = getelementptr inbounds ", Ty(t), ", ", Ty(t),
                        "* %in", n.index, ", i64 ", index, "\n");
        absl::StrAppend(out, "  ", dst, " = load ", Ty(t), ", ", Ty(t), "* %p", id,
                        ", align ", Align(t), "\n");
        name = dst;
        return;
      }
      case Op::kScalar: name = absl::StrCat("%s", n.index); return;
      case Op::kConst: name = Literal(n.value); return;
      case Op::kCast: {
        const DType from = k_.nodes[n.args[0]].dtype;
        if (from == t) {
          name = arg(0);
        } else {
          absl::StrAppend(out, "  ", dst, " = ", t == DType::kF64 ? "fpext" : "fptrunc", " ",
                          Ty(from), " ", arg(0), " to ", Ty(t), "\n");
          name = dst;
        }
        return;
      }
      case Op::kNeg:
        absl::StrAppend(out, "  ", dst, " = fneg ", Ty(t), " ", arg(0), "\n");
        name = dst;
        return;
      case Op::kExp: name = Exp(id, t, arg(0), dst, out); return;
      case Op::kLog: name = Call(Intrinsic("log", t), t, arg(0), dst, out); return;
      case Op::kSqrt: name = Call(Intrinsic("sqrt", t), t, arg(0), dst, out); return;
      case Op::kAbs: name = Call(Intrinsic("fabs", t), t, arg(0), dst, out); return;
      case Op::kTanh:
        if (t == DType::kF32) {  // in double, rounded once (kernel_math.h)
          std::string wide = Fresh(id), result = Fresh(id);
          absl::StrAppend(out, "  ", wide, " = fpext float ", arg(0), " to double\n");
          TanhBody(id, wide, result, out);
          absl::StrAppend(out, "  ", dst, " = fptrunc double ", result, " to float\n");
        } else {
          TanhBody(id, arg(0), dst, out);
        }
        name = dst;
        return;
      case Op::kSigmoid: {
        std::string neg = Fresh(id), e = Fresh(id), d = Fresh(id);
        absl::StrAppend(out, "  ", neg, " = fneg ", Ty(t), " ", arg(0), "\n");
        Exp(id, t, neg, e, out);
        Bin("fadd", t, one, e, d, out);
        name = Bin("fdiv", t, one, d, dst, out);
        return;
      }
      case Op::kRelu: {
        std::string c = Fresh(id);
        absl::StrAppend(out, "  ", c, " = fcmp olt ", Ty(t), " ", arg(0), ", ", zero, "\n");
        absl::StrAppend(out, "  ", dst, " = select i1 ", c, ", ", Ty(t), " ", zero, ", ",
                        Ty(t), " ", arg(0), "\n");
        name = dst;
        return;
      }
      case Op::kRsqrt: {
        std::string s = Fresh(id);
        Call(Intrinsic("sqrt", t), t, arg(0), s, out);
        name = Bin("fdiv", t, one, s, dst, out);
        return;
      }
      case Op::kPowConst: {
        const std::string x = arg(0);
        switch (kir::PowFormFor(n.value)) {
          case kir::PowForm::kOne: name = x; return;
          case kir::PowForm::kSquare: name = Bin("fmul", t, x, x, dst, out); return;
          case kir::PowForm::kCube: {
            std::string sq = Bin("fmul", t, x, x, Fresh(id), out);
            name = Bin("fmul", t, sq, x, dst, out);
            return;
          }
          case kir::PowForm::kSqrt: name = Call(Intrinsic("sqrt", t), t, x, dst, out); return;
          case kir::PowForm::kRecip: name = Bin("fdiv", t, one, x, dst, out); return;
          case kir::PowForm::kRsqrt: {
            std::string s = Call(Intrinsic("sqrt", t), t, x, Fresh(id), out);
            name = Bin("fdiv", t, one, s, dst, out);
            return;
          }
          case kir::PowForm::kCall: {
            const double e = t == DType::kF32
                                 ? static_cast<double>(static_cast<float>(n.value))
                                 : n.value;
            absl::StrAppend(out, "  ", dst, " = call ", Ty(t), " @", Intrinsic("pow", t, 2),
                            "(", Ty(t), " ", x, ", ", Ty(t), " ", Literal(e), ")\n");
            name = dst;
            return;
          }
        }
        return;
      }
      case Op::kAdd: name = Bin("fadd", t, arg(0), arg(1), dst, out); return;
      case Op::kSub: name = Bin("fsub", t, arg(0), arg(1), dst, out); return;
      case Op::kMul: name = Bin("fmul", t, arg(0), arg(1), dst, out); return;
      case Op::kDiv: name = Bin("fdiv", t, arg(0), arg(1), dst, out); return;
      case Op::kMax:
      case Op::kMin: {
        // NaN propagating: a is NaN ? a : (a > b ? a : b)  (min: a < b).
        std::string nan = Fresh(id), c = Fresh(id), pick = Fresh(id);
        absl::StrAppend(out, "  ", nan, " = fcmp uno ", Ty(t), " ", arg(0), ", ", arg(0), "\n");
        absl::StrAppend(out, "  ", c, " = fcmp ", n.op == Op::kMax ? "ogt" : "olt", " ",
                        Ty(t), " ", arg(0), ", ", arg(1), "\n");
        absl::StrAppend(out, "  ", pick, " = select i1 ", c, ", ", Ty(t), " ", arg(0), ", ",
                        Ty(t), " ", arg(1), "\n");
        absl::StrAppend(out, "  ", dst, " = select i1 ", nan, ", ", Ty(t), " ", arg(0), ", ",
                        Ty(t), " ", pick, "\n");
        name = dst;
        return;
      }
      case Op::kSelect: {
        const DType ct = k_.nodes[n.args[0]].dtype;
        std::string c = Fresh(id);
        absl::StrAppend(out, "  ", c, " = fcmp ", FCmp(n.cmp), " ", Ty(ct), " ", arg(0), ", ",
                        arg(1), "\n");
        absl::StrAppend(out, "  ", dst, " = select i1 ", c, ", ", Ty(t), " ", arg(2), ", ",
                        Ty(t), " ", arg(3), "\n");
        name = dst;
        return;
      }
    }
  }

  const Kernel& k_;
  std::vector<std::string> names_;  // SSA value or constant per node
  std::set<std::string> decls_;
  int temp_ = 0;
  Mode mode_ = Mode::kWide;  // the body being printed (Body)
  int64_t row_ = 0;      // the row length, 0 for the flat loop (RowLength)
  std::map<int, std::string> row_bases_;  // a contiguous input's run start in a row
};

}  // namespace

std::string LlvmKernelSymbol(const Kernel& kernel) { return "mf_" + kernel.name; }

absl::StatusOr<std::string> PrintLlvmIr(const Kernel& kernel) {
  if (absl::Status s = kir::Validate(kernel); !s.ok()) return s;
  return Printer(kernel).Module();
}

absl::StatusOr<runtime::KernelCode> HostKernelCode(const Kernel& kernel) {
  auto ir = PrintLlvmIr(kernel);
  if (!ir.ok()) return ir.status();
  runtime::KernelCode code = KernelContract(kernel);
  code.llvm_ir = *std::move(ir);
  return code;
}

}  // namespace metafuse::codegen

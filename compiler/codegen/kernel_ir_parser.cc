#include "compiler/codegen/kernel_ir_parser.h"

#include <cstring>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace metafuse::codegen::kir {
namespace {

// One line's cursor: consumes expected text and numbers, remembers the
// first failure with the line number.
class Line {
 public:
  Line(int number, absl::string_view text) : number_(number), rest_(text) {}

  bool Take(absl::string_view prefix) {
    if (absl::ConsumePrefix(&rest_, prefix)) return true;
    return Fail(absl::StrCat("'", prefix, "'"));
  }
  bool TakeInt(int64_t* out) {
    size_t n = 0;
    while (n < rest_.size() && (rest_[n] == '-' || (rest_[n] >= '0' && rest_[n] <= '9'))) ++n;
    if (n > 0 && absl::SimpleAtoi(rest_.substr(0, n), out)) {
      rest_.remove_prefix(n);
      return true;
    }
    return Fail("an integer");
  }
  bool TakeNode(int* out) {
    int64_t v = 0;
    if (!Take("%") || !TakeInt(&v)) return false;
    *out = static_cast<int>(v);
    return true;
  }
  // Text up to the last occurrence of `sep`.
  bool TakeUntilLast(absl::string_view sep, std::string* out) {
    const size_t at = rest_.rfind(sep);
    if (at == absl::string_view::npos) return Fail(absl::StrCat("'", sep, "'"));
    *out = std::string(rest_.substr(0, at));
    rest_.remove_prefix(at + sep.size());
    return true;
  }
  bool TakeWord(std::string* out) {
    const size_t end = std::min(rest_.find(' '), rest_.size());
    if (end == 0) return Fail("a word");
    *out = std::string(rest_.substr(0, end));
    rest_.remove_prefix(end);
    return true;
  }
  bool TakeDType(DType* out) {
    for (DType t : {DType::kF32, DType::kF64}) {
      if (absl::ConsumePrefix(&rest_, DTypeName(t))) {
        *out = t;
        return true;
      }
    }
    return Fail("a dtype (f32 or f64)");
  }
  bool AtEnd() { return rest_.empty() || Fail("the end of the line"); }
  bool Peek(absl::string_view prefix) const { return absl::StartsWith(rest_, prefix); }
  bool Fail(absl::string_view expected) {
    if (error_.ok()) {
      error_ = absl::InvalidArgumentError(absl::StrCat(
          "kernel IR line ", number_, ": expected ", expected, " at '", rest_, "'"));
    }
    return false;
  }
  const absl::Status& error() const { return error_; }

 private:
  int number_;
  absl::string_view rest_;
  absl::Status error_;
};

// "<word><index> " where index must be `count`: entries are numbered in
// order.
bool TakeNumbered(Line& l, absl::string_view word, size_t count, absl::string_view what) {
  int64_t index = 0;
  if (!l.Take(word) || !l.TakeInt(&index) || !l.Take(" ")) return false;
  if (index != static_cast<int64_t>(count)) {
    return l.Fail(absl::StrCat(what, " numbered in order"));
  }
  return true;
}

bool ParseInput(Line& l, Kernel& k) {
  InputSpec in;
  if (!TakeNumbered(l, "in ", k.inputs.size(), "inputs")) return false;
  if (!l.TakeUntilLast(": ", &in.name) || !l.TakeDType(&in.dtype) || !l.Take(" ")) {
    return false;
  }
  bool found = false;
  for (Access a : {Access::kElement, Access::kBroadcast, Access::kInner, Access::kOuter,
                   Access::kMiddle, Access::kPeriodic}) {
    if (l.Peek(AccessName(a))) {
      l.Take(AccessName(a));
      in.access = a;
      found = true;
      break;
    }
  }
  if (!found) {
    return l.Fail("an access pattern ([i], [0], [i % inner], [i / inner], "
                  "[i / (mid * inner) * inner + i % inner], [i / inner % mid])");
  }
  if (kir::HasInner(in.access)) {
    if (!l.Take(" inner=") || !l.TakeInt(&in.inner)) return false;
  }
  if (kir::HasMid(in.access)) {
    if (!l.Take(" mid=") || !l.TakeInt(&in.mid)) return false;
  }
  k.inputs.push_back(std::move(in));
  return l.AtEnd();
}

bool ParseScalar(Line& l, Kernel& k) {
  ScalarSpec s;
  if (!TakeNumbered(l, "scalar ", k.scalars.size(), "scalars")) return false;
  if (!l.TakeUntilLast(": ", &s.name) || !l.TakeDType(&s.dtype)) return false;
  k.scalars.push_back(std::move(s));
  return l.AtEnd();
}

bool ParseNode(Line& l, Kernel& k) {
  int id = 0;
  if (!l.TakeNode(&id) || !l.Take(" = ")) return false;
  if (id != static_cast<int>(k.nodes.size())) return l.Fail("nodes numbered in order");
  std::string op_text;
  if (!l.TakeWord(&op_text)) return false;
  Node n;
  bool found = false;
  for (int o = static_cast<int>(Op::kInput); o <= static_cast<int>(Op::kSelect); ++o) {
    const Op op = static_cast<Op>(o);
    if (op == Op::kSelect ? absl::StartsWith(op_text, "select.") : op_text == OpName(op)) {
      n.op = op;
      found = true;
      break;
    }
  }
  if (n.op == Op::kSelect) {
    found = false;
    for (Cmp c : {Cmp::kGt, Cmp::kLt, Cmp::kGe, Cmp::kLe, Cmp::kEq, Cmp::kNe}) {
      if (op_text == absl::StrCat("select.", CmpName(c))) {
        n.cmp = c;
        found = true;
      }
    }
  }
  if (!found) return l.Fail(absl::StrCat("an op name, not '", op_text, "'"));
  if (n.op == Op::kInput || n.op == Op::kScalar) {
    int64_t index = 0;
    if (!l.Take(" #") || !l.TakeInt(&index)) return false;
    n.index = static_cast<int>(index);
  }
  if (n.op == Op::kConst || n.op == Op::kPowConst) {
    // "<%.17g> [0x<bits>]": the bits are the value.
    std::string shown, bits_text;
    uint64_t bits = 0;
    if (!l.Take(" ") || !l.TakeWord(&shown) || !l.Take(" [0x") ||
        !l.TakeUntilLast("]", &bits_text)) {
      return false;
    }
    if (!absl::SimpleHexAtoi(bits_text, &bits)) return l.Fail("hexadecimal bits in [0x...]");
    std::memcpy(&n.value, &bits, sizeof bits);
  }
  for (int a = 0; a < OpArity(n.op); ++a) {
    int arg = 0;
    if (!l.Take(a == 0 ? " " : ", ") || !l.TakeNode(&arg)) return false;
    n.args.push_back(arg);
  }
  if (!l.Take(" : ") || !l.TakeDType(&n.dtype)) return false;
  k.nodes.push_back(std::move(n));
  return l.AtEnd();
}

bool ParseOutput(Line& l, Kernel& k) {
  OutputSpec out;
  if (!TakeNumbered(l, "out ", k.outputs.size(), "outputs")) return false;
  if (!l.TakeUntilLast(" = ", &out.name) || !l.TakeNode(&out.node)) return false;
  k.outputs.push_back(std::move(out));
  return l.AtEnd();
}

}  // namespace

absl::StatusOr<Kernel> Parse(const std::string& text) {
  Kernel k;
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.empty()) return absl::InvalidArgumentError("kernel IR: expected 'kernel <name> {'");
  Line head(1, lines.front());
  if (!head.Take("kernel ") || !head.TakeUntilLast(" {", &k.name) || !head.AtEnd()) {
    return head.error();
  }
  bool closed = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    Line l(static_cast<int>(i) + 1, lines[i]);
    if (closed) {
      l.Fail("nothing after '}'");
      return l.error();
    }
    bool ok = true;
    if (lines[i] == "}") {
      closed = true;
    } else if (!l.Take("  ")) {
      ok = false;
    } else if (l.Peek("in ")) {
      ok = ParseInput(l, k);
    } else if (l.Peek("scalar ")) {
      ok = ParseScalar(l, k);
    } else if (l.Peek("%")) {
      ok = ParseNode(l, k);
    } else if (l.Peek("out ")) {
      ok = ParseOutput(l, k);
    } else {
      ok = l.Fail("'in', 'scalar', '%<id>', 'out' or '}'");
    }
    if (!ok) return l.error();
  }
  if (!closed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel IR line ", lines.size(), ": expected '}' closing kernel ", k.name));
  }
  if (absl::Status s = Validate(k); !s.ok()) return s;
  return k;
}

}  // namespace metafuse::codegen::kir

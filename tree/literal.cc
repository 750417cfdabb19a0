#include "tree/literal.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "absl/strings/str_cat.h"

namespace metafuse::tree {

Literal Literal::Bool(bool v) {
  Literal l;
  l.type = Type::kBool;
  l.b = v;
  return l;
}
Literal Literal::Int(int64_t v) {
  Literal l;
  l.type = Type::kInt;
  l.i = v;
  return l;
}
Literal Literal::Float(double v) {
  Literal l;
  l.type = Type::kFloat;
  l.f = v;
  return l;
}
Literal Literal::String(std::string v) {
  Literal l;
  l.type = Type::kString;
  l.s = std::move(v);
  return l;
}
Literal Literal::Tuple(std::vector<Literal> v) {
  Literal l;
  l.type = Type::kTuple;
  l.items = std::move(v);
  return l;
}

bool Literal::operator==(const Literal& o) const {
  if (type != o.type) return false;
  switch (type) {
    case Type::kNone: return true;
    case Type::kBool: return b == o.b;
    case Type::kInt: return i == o.i;
    case Type::kFloat: return f == o.f;
    case Type::kString: return s == o.s;
    case Type::kTuple: return items == o.items;
  }
  return false;
}

size_t HashLiteral(const Literal& v) {
  size_t h = static_cast<size_t>(v.type) * 0x9e3779b97f4a7c15ULL;
  switch (v.type) {
    case Literal::Type::kNone: break;
    case Literal::Type::kBool: h ^= v.b; break;
    case Literal::Type::kInt: h ^= std::hash<int64_t>()(v.i); break;
    case Literal::Type::kFloat: h ^= std::hash<double>()(v.f); break;
    case Literal::Type::kString: h ^= std::hash<std::string>()(v.s); break;
    case Literal::Type::kTuple:
      for (const Literal& item : v.items) h = h * 31 + HashLiteral(item);
      break;
  }
  return h;
}

namespace {

std::string QuoteString(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "'";
}

std::string FloatRepr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  // Shortest form that reads back exactly, like Python's repr.
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, f);
    if (std::strtod(buf, nullptr) == f) break;
  }
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

std::string LiteralRepr(const Literal& v) {
  switch (v.type) {
    case Literal::Type::kNone: return "None";
    case Literal::Type::kBool: return v.b ? "True" : "False";
    case Literal::Type::kInt: return std::to_string(v.i);
    case Literal::Type::kFloat: return FloatRepr(v.f);
    case Literal::Type::kString: return QuoteString(v.s);
    case Literal::Type::kTuple: {
      std::string out = "(";
      for (size_t k = 0; k < v.items.size(); ++k) {
        if (k) out += ", ";
        out += LiteralRepr(v.items[k]);
      }
      return out + (v.items.size() == 1 ? ",)" : ")");
    }
  }
  return "?";
}

absl::StatusOr<bool> LiteralLess(const Literal& a, const Literal& b) {
  using T = Literal::Type;
  auto numeric = [](const Literal& l) {
    return l.type == T::kInt || l.type == T::kFloat || l.type == T::kBool;
  };
  if (numeric(a) && numeric(b)) {
    auto value = [](const Literal& l) {
      return l.type == T::kFloat ? l.f : l.type == T::kInt ? double(l.i) : l.b;
    };
    if (a.type != T::kFloat && b.type != T::kFloat) {
      int64_t x = a.type == T::kInt ? a.i : a.b, y = b.type == T::kInt ? b.i : b.b;
      return x < y;
    }
    return value(a) < value(b);
  }
  if (a.type == T::kString && b.type == T::kString) return a.s < b.s;
  if (a.type == T::kTuple && b.type == T::kTuple) {
    for (size_t k = 0; k < a.items.size() && k < b.items.size(); ++k) {
      if (a.items[k] == b.items[k]) continue;
      return LiteralLess(a.items[k], b.items[k]);
    }
    return a.items.size() < b.items.size();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("dict keys ", LiteralRepr(a), " and ", LiteralRepr(b),
                   " cannot be ordered; a tree's dict keys must be sortable"));
}

void EncodeLiteral(const Literal& v, std::string* out) {
  switch (v.type) {
    case Literal::Type::kNone: *out += 'n'; break;
    case Literal::Type::kBool: *out += v.b ? 'T' : 'F'; break;
    case Literal::Type::kInt: absl::StrAppend(out, "i", v.i, ";"); break;
    case Literal::Type::kFloat: {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%a", v.f);
      absl::StrAppend(out, "d", buf, ";");
      break;
    }
    case Literal::Type::kString:
      absl::StrAppend(out, "s", v.s.size(), ":", v.s);
      break;
    case Literal::Type::kTuple:
      *out += '(';
      for (const Literal& item : v.items) EncodeLiteral(item, out);
      *out += ')';
      break;
  }
}

namespace {

absl::Status Truncated() {
  return absl::InvalidArgumentError("truncated or malformed literal");
}

absl::StatusOr<std::string_view> TakeUntil(std::string_view* in, char end) {
  size_t pos = in->find(end);
  if (pos == std::string_view::npos) return Truncated();
  std::string_view head = in->substr(0, pos);
  in->remove_prefix(pos + 1);
  return head;
}

absl::StatusOr<Literal> DecodeAtDepth(std::string_view* in, int depth) {
  if (in->empty()) return Truncated();
  if (depth > 100) return absl::InvalidArgumentError("literal nested too deep");
  char tag = in->front();
  in->remove_prefix(1);
  switch (tag) {
    case 'n': return Literal::None();
    case 'T': return Literal::Bool(true);
    case 'F': return Literal::Bool(false);
    case 'i':
    case 'd': {
      auto text = TakeUntil(in, ';');
      if (!text.ok()) return text.status();
      std::string s(*text);
      char* end = nullptr;
      if (s.empty()) return Truncated();
      if (tag == 'i') {
        long long v = std::strtoll(s.c_str(), &end, 10);
        if (*end) return Truncated();
        return Literal::Int(v);
      }
      double v = std::strtod(s.c_str(), &end);
      if (*end) return Truncated();
      return Literal::Float(v);
    }
    case 's': {
      auto len_text = TakeUntil(in, ':');
      if (!len_text.ok()) return len_text.status();
      std::string len_s(*len_text);
      char* end = nullptr;
      unsigned long long len = std::strtoull(len_s.c_str(), &end, 10);
      if (len_s.empty() || *end || len > in->size()) return Truncated();
      Literal l = Literal::String(std::string(in->substr(0, len)));
      in->remove_prefix(len);
      return l;
    }
    case '(': {
      std::vector<Literal> items;
      while (!in->empty() && in->front() != ')') {
        auto item = DecodeAtDepth(in, depth + 1);
        if (!item.ok()) return item.status();
        items.push_back(*std::move(item));
      }
      if (in->empty()) return Truncated();
      in->remove_prefix(1);
      return Literal::Tuple(std::move(items));
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown literal tag '", std::string(1, tag), "'"));
  }
}

}  // namespace

absl::StatusOr<Literal> DecodeLiteral(std::string_view* in) {
  return DecodeAtDepth(in, 0);
}

}  // namespace metafuse::tree

// Literal: the few plain values (None, bool, int, float, str, tuple) a
// TreeSpec can carry in a form that needs neither Python nor LibTorch. Dict
// keys and custom-node contexts become Literals when a spec is serialized or
// built on the C++ (IValue) side, and the text encoding here is what makes
// TreeSpec serialization stable across processes and languages.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace metafuse::tree {

struct Literal {
  enum class Type : uint8_t { kNone, kBool, kInt, kFloat, kString, kTuple };

  Type type = Type::kNone;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  std::vector<Literal> items;  // kTuple

  static Literal None() { return Literal(); }
  static Literal Bool(bool v);
  static Literal Int(int64_t v);
  static Literal Float(double v);
  static Literal String(std::string v);
  static Literal Tuple(std::vector<Literal> v);

  bool operator==(const Literal& other) const;
  bool operator!=(const Literal& other) const { return !(*this == other); }
};

size_t HashLiteral(const Literal& value);

// Python's repr of the same value: 'a', 3, 1.5, True, None, (1, 'x').
std::string LiteralRepr(const Literal& value);

// Strict weak order for sorting dict keys; only values of the same type (and
// int/float together) are ordered, anything else is an error, as in Python.
absl::StatusOr<bool> LiteralLess(const Literal& a, const Literal& b);

// Self-delimiting text encoding: n | T | F | i<dec>; | d<%a>; | s<len>:<bytes>
// | (<items>). Length prefixes avoid any escaping; hex floats are exact.
void EncodeLiteral(const Literal& value, std::string* out);
// Decodes one literal from the front of `in`, advancing it.
absl::StatusOr<Literal> DecodeLiteral(std::string_view* in);

}  // namespace metafuse::tree

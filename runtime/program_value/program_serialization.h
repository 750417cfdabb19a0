// Writing a compiled program to bytes and reading it back exactly.
//
// The value is encoded as one IValue tree (lists of strings, integers,
// doubles, tensors) and written with LibTorch's pickler, the format of
// torch.save: constants keep their dtype, sizes, strides and data bit for
// bit. Reading checks the format version and the shape of every field and
// says which field was wrong; it never returns half a program.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "runtime/program_value/program_code.h"

namespace metafuse::runtime {

std::string SerializeProgram(const CompiledProgram& program);
absl::StatusOr<CompiledProgram> DeserializeProgram(const std::string& bytes);

}  // namespace metafuse::runtime

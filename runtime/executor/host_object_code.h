// Host code inside a compiled program value, for ahead-of-time artifacts:
// saved with the program so that a loading process runs it instead of a
// code generator, and checked against the loading CPU. Two kinds, one per
// host back end (host_backend.h): LLVM's object code per kernel, and the C++
// back end's shared object per program (ProgramCode::shared_object).
#pragma once

#include "absl/status/status.h"
#include "runtime/program_value/program_code.h"

namespace metafuse::runtime {

// Attaches what this build can make: every kernel's LLVM object code (when
// the build has LLVM) and every program's shared object (when a C++ compiler
// is found), compiling what the process has not compiled yet. Fails only
// when it can make neither, saying why.
absl::Status AttachObjectCode(CompiledProgram& program);

// OK when the back end this process selects can run the program's host
// code here: LLVM checks each kernel's object code's CPU features
// (HostCanRun); C++ checks each shared object's x86-64 level (CpuCanRun), or
// that a compiler exists when the program carries none. Else the first that
// cannot, why, and what to do.
absl::Status CheckObjectTargets(const CompiledProgram& program);

}  // namespace metafuse::runtime

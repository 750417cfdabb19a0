// Host object code inside a compiled program value, for ahead-of-time
// artifacts: saved with each kernel so that a loading process links it
// instead of running LLVM, and checked against the loading CPU.
#pragma once

#include "absl/status/status.h"
#include "runtime/program_code.h"

namespace metafuse::runtime {

// Fills every kernel's object_code / object_target with the object file this
// process runs for it (compiling the kernel first if it was not yet).
void AttachObjectCode(CompiledProgram& program);

// OK when this CPU can run every kernel's object code (HostCanRun); else the
// first kernel that cannot, the features it lacks, and what to do.
absl::Status CheckObjectTargets(const CompiledProgram& program);

}  // namespace metafuse::runtime

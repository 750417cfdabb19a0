// Kernel IR text (a program's KernelCode::kernel_ir, read back to retarget
// its kernels): Parse refuses with an error, or returns a valid kernel that
// prints back to text parsing to the same kernel.
#include <cstdint>
#include <string>

#include "compiler/codegen/kernel_ir_parser.h"
#include "tests/fuzz/fuzz_check.h"

namespace kir = metafuse::codegen::kir;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<kir::Kernel> kernel = kir::Parse(text);
  if (metafuse::fuzz::Refused(kernel)) return 0;
  FUZZ_CHECK(kir::Validate(*kernel).ok(), "a parsed kernel is valid");
  const std::string printed = kir::Print(*kernel);
  absl::StatusOr<kir::Kernel> again = kir::Parse(printed);
  FUZZ_CHECK(again.ok(), "a parsed kernel's text parses");
  FUZZ_CHECK(kir::Print(*again) == printed, "printing is a fixed point");
  return 0;
}

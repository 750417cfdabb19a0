// A process that links only the runtime (as the C++ runner of artifacts
// does) has no kernel printer: the C++ back end refuses to print kernels
// with an error naming what to do, instead of reaching into compiler/.
#include <gtest/gtest.h>

#include "runtime/jit/cpp_kernel_library.h"
#include "runtime/jit/kernel_printer_service.h"

namespace metafuse::runtime {
namespace {

TEST(RuntimeOnly, PrintingCppKernelsNeedsTheCompiler) {
  KernelCode code;
  code.name = "k";
  code.kernel_ir = "kernel k\n";
  auto source = PrintCppLibrarySource({&code});
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(source.status().message().find("links only the runtime"), std::string::npos)
      << source.status();
  EXPECT_NE(source.status().message().find("METAFUSE_HOST_BACKEND=llvm"), std::string::npos);
  auto built = BuildCppKernelLibrary({&code}, nullptr);
  EXPECT_FALSE(built.ok());
}

TEST(RuntimeOnly, ARegisteredPrinterIsUsed) {
  RegisterKernelPrinterService(
      {"// prelude\n", [](const std::string& name, const std::string& ir) {
         return absl::StatusOr<std::string>("// " + name + ": " + std::to_string(ir.size()) + "\n");
       }});
  KernelCode a, b;
  a.name = "a";
  a.kernel_ir = "xyz";
  b.name = "a";  // the same name: printed once
  auto source = PrintCppLibrarySource({&a, &b});
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ(*source, "// prelude\n// a: 3\n");
  UnregisterKernelPrinterServiceForTesting();
  EXPECT_FALSE(PrintCppLibrarySource({&a}).ok());
}

}  // namespace
}  // namespace metafuse::runtime

// Binds the compiler as metafuse._C._compiler.
#pragma once

#include <pybind11/pybind11.h>

namespace metafuse::compiler {

void BindCompiler(pybind11::module_& parent);

}  // namespace metafuse::compiler

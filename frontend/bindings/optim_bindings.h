// Binds the C++ optimizer core as metafuse._C._optim.
#pragma once

#include <pybind11/pybind11.h>

namespace metafuse::optim {

void BindOptim(pybind11::module_& parent);

}  // namespace metafuse::optim

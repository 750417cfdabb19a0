// Binds the tuning library (runtime/tuning) as metafuse._C._tuning: the
// timing rule and the report, for the choices Python
// makes (the fusion check, metafuse.vmap's strategy).
#pragma once

#include <pybind11/pybind11.h>

namespace metafuse::runtime {

void BindTuning(pybind11::module_& parent);

}  // namespace metafuse::runtime

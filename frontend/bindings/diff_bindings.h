// Binds the numeric cores of metafuse.diff as metafuse._C._diff.
#pragma once

#include <pybind11/pybind11.h>

namespace metafuse::diff {

void BindDiff(pybind11::module_& parent);

}  // namespace metafuse::diff

#include "frontend/bindings/tuning_bindings.h"

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "runtime/tuning/measured_choice.h"
#include "runtime/tuning/timing_rule.h"

namespace py = pybind11;

namespace metafuse::runtime {
namespace {

ChoiceSource SourceNamed(const std::string& name) {
  for (ChoiceSource s : {ChoiceSource::kMeasured, ChoiceSource::kMachineFile,
                         ChoiceSource::kSetting}) {
    if (name == ChoiceSourceName(s)) return s;
  }
  throw py::value_error("metafuse._C._tuning.record: source must be 'measured', "
                        "'machine file' or 'setting', got '" + name + "'");
}

}  // namespace

void BindTuning(py::module_& parent) {
  py::module_ m = parent.def_submodule("_tuning", "metafuse's tuning library (runtime/tuning)");
  m.def("rule", [] {
    return py::dict(py::arg("least_repeats") = kTimingRule.least_repeats,
                    py::arg("most_repeats") = kTimingRule.most_repeats,
                    py::arg("repeat_budget_seconds") = kTimingRule.repeat_budget_seconds,
                    py::arg("give_up_factor") = kTimingRule.give_up_factor,
                    py::arg("margin") = kTimingRule.margin);
  });
  m.def("seconds_of", [](const std::function<void()>& run, double give_up_above) {
    return SecondsOf(run, give_up_above);
  }, py::arg("run"), py::arg("give_up_above") = std::numeric_limits<double>::infinity(),
     "Seconds of run() by the timing rule: one untimed run, then the fastest of 2-3 timed "
     "ones; stops after a timed run slower than give_up_above.");
  m.def("beats_default", &BeatsDefault, py::arg("rival_seconds"), py::arg("default_seconds"),
        "Whether a rival replaces the default: faster by the rule's margin.");
  m.def("record",
        [](const std::string& table, const std::string& key, const std::string& choice,
           const std::string& source, const std::string& note) {
          RecordChoice({table, key, choice, SourceNamed(source), note});
        },
        py::arg("table"), py::arg("key"), py::arg("choice"), py::arg("source"),
        py::arg("note") = "");
  m.def("report", [] {
    py::list out;
    for (const ChoiceRecord& r : ChoiceReport()) {
      out.append(py::dict(py::arg("table") = r.table, py::arg("key") = r.key,
                          py::arg("choice") = r.choice,
                          py::arg("source") = ChoiceSourceName(r.source),
                          py::arg("note") = r.note));
    }
    return out;
  }, "Every choice this process made or read: [{table, key, choice, source, note}].");
  m.def("clear_for_testing", &ClearMeasuredChoicesForTesting);
}

}  // namespace metafuse::runtime

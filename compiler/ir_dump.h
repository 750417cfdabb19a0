// IR dumps after every compiler stage, for debugging and for docs.
//
// Set METAFUSE_DUMP_IR=1 to print each stage's graph to stderr, or
// METAFUSE_DUMP_IR=<directory> to write one file per stage there. A
// StageLog passed to the compiler also collects them (the API form).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

class StageLog {
 public:
  // Records `graph` as it is after `stage` (and honours METAFUSE_DUMP_IR).
  void Record(const std::string& stage, const torch::jit::Graph& graph);
  const std::vector<std::pair<std::string, std::string>>& stages() const {
    return stages_;
  }

 private:
  std::vector<std::pair<std::string, std::string>> stages_;
};

}  // namespace metafuse::compiler

// IR dumps after every compiler stage, for debugging and for docs.
//
// Set METAFUSE_DUMP_IR=1 to print each stage's graph to stderr, or
// METAFUSE_DUMP_IR=<directory> to write one file per stage there. A
// StageLog passed to the compiler also collects them (the API form).
// METAFUSE_TIME_STAGES=1 prints the time between recorded stages (where
// compile latency goes).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

class StageLog {
 public:
  // Records `graph` as it is after `stage` (and honours METAFUSE_DUMP_IR).
  void Record(const std::string& stage, const torch::jit::Graph& graph);
  // The same for a graph nobody changes any more (e.g. one a runtime program
  // runs): it is printed only when stages() is asked for (or at once under
  // METAFUSE_DUMP_IR), so specializing at run time does not pay for IR text.
  void RecordFinal(const std::string& stage, std::shared_ptr<const torch::jit::Graph> graph);
  // (stage, IR text) in recording order.
  const std::vector<std::pair<std::string, std::string>>& stages() const;

  // Off: Record() keeps nothing (unless METAFUSE_DUMP_IR asks for it), so a
  // compile does not pay for snapshots of its intermediate graphs; the
  // compiled objects then recompile once, keeping them, when their stages
  // are asked for. RecordFinal() always records.
  void set_keep_snapshots(bool keep) { keep_snapshots_ = keep || DumpRequested(); }
  bool keeps_snapshots() const { return keep_snapshots_; }
  static bool DumpRequested();

 private:
  mutable std::mutex mu_;
  bool keep_snapshots_ = true;
  mutable std::vector<std::pair<std::string, std::string>> stages_;
  // Entries of stages_ whose text is still to be printed from the graph.
  mutable std::vector<std::pair<size_t, std::shared_ptr<const torch::jit::Graph>>> pending_;
};

}  // namespace metafuse::compiler

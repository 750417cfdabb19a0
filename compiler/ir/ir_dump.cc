#include "compiler/ir/ir_dump.h"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "runtime/base/options.h"

namespace metafuse::compiler {

bool StageLog::DumpRequested() { return !runtime::OptionsFromEnvironment().dump_ir.empty(); }

void StageLog::RecordFinal(const std::string& stage,
                           std::shared_ptr<const torch::jit::Graph> graph) {
  if (runtime::OptionsFromEnvironment().time_stages) {
    static auto last = std::chrono::steady_clock::now();
    auto now = std::chrono::steady_clock::now();
    std::cerr << "stage " << stage << " +"
              << std::chrono::duration<double, std::milli>(now - last).count() << " ms\n";
    last = now;
  }
  if (DumpRequested()) {
    Record(stage, *graph);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  pending_.emplace_back(stages_.size(), std::move(graph));
  stages_.emplace_back(stage, std::string());
}

const std::vector<std::pair<std::string, std::string>>& StageLog::stages() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [index, graph] : pending_) {
    std::ostringstream os;
    os << *graph;
    stages_[index].second = os.str();
  }
  pending_.clear();
  return stages_;
}

void StageLog::Record(const std::string& stage,
                      const torch::jit::Graph& graph) {
  if (!DumpRequested()) {
    if (!keep_snapshots_) return;
    // A copy is cheaper than printing; the text is made if someone asks.
    RecordFinal(stage, const_cast<torch::jit::Graph&>(graph).copy());  // copy() reads only
    return;
  }
  std::ostringstream os;
  os << graph;
  size_t count;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stages_.emplace_back(stage, os.str());
    count = stages_.size();
  }
  const std::string env = runtime::OptionsFromEnvironment().dump_ir;
  if (env == "1") {
    std::cerr << "=== metafuse IR after " << stage << " ===\n" << os.str();
    return;
  }
  const std::string path = env + "/" + std::to_string(count) + "_" + stage + ".ir";
  std::ofstream out(path);
  if (!out) {
    std::cerr << "metafuse: METAFUSE_DUMP_IR: cannot write " << path << "\n";
    return;
  }
  out << os.str();
}

}  // namespace metafuse::compiler

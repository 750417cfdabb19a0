#include "compiler/ir_dump.h"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

namespace metafuse::compiler {

void StageLog::Record(const std::string& stage,
                      const torch::jit::Graph& graph) {
  std::ostringstream os;
  os << graph;
  stages_.emplace_back(stage, os.str());
  const char* env = std::getenv("METAFUSE_DUMP_IR");
  if (env == nullptr || *env == '\0' || std::string(env) == "0") return;
  if (std::string(env) == "1") {
    std::cerr << "=== metafuse IR after " << stage << " ===\n" << os.str();
    return;
  }
  const std::string path = std::string(env) + "/" +
                           std::to_string(stages_.size()) + "_" + stage + ".ir";
  std::ofstream out(path);
  if (!out) {
    std::cerr << "metafuse: METAFUSE_DUMP_IR: cannot write " << path << "\n";
    return;
  }
  out << os.str();
}

}  // namespace metafuse::compiler

#include "runtime/executor/operator_lookup.h"

#include <mutex>
#include <unordered_map>

#include <torch/csrc/jit/frontend/function_schema_parser.h>
#include <torch/csrc/jit/runtime/operator.h>

namespace metafuse::runtime {

namespace {

torch::jit::Operation Resolve(const std::string& schema) {
  const c10::OperatorName name = torch::jit::parseSchema(schema).operator_name();
  std::shared_ptr<torch::jit::Operator> op = torch::jit::findOperatorFor(name);
  TORCH_CHECK(op != nullptr, "operator ", name, " is not registered in this process (",
              schema, "); load the library that defines it, or recompile the program");
  TORCH_CHECK(c10::toString(op->schema()) == schema, "operator ", name,
              " has another schema here (", c10::toString(op->schema()), ") than the program (",
              schema, "); recompile the program with this LibTorch");
  // Operators the interpreter makes per node (varargs) cannot be named by
  // schema alone; the compiler never emits them as kOperator.
  TORCH_CHECK(!op->schema().is_vararg(), "operator ", name,
              " takes variable arguments and cannot run from a program value");
  return op->getOperation();
}

}  // namespace

torch::jit::Operation LookUpOperation(const std::string& schema) {
  // Parsing a schema costs more than running most operators once: resolve
  // each schema once per process.
  static std::mutex mu;
  static auto* resolved = new std::unordered_map<std::string, torch::jit::Operation>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = resolved->find(schema);
  if (it == resolved->end()) it = resolved->emplace(schema, Resolve(schema)).first;
  return it->second;
}

}  // namespace metafuse::runtime

// A runtime program that specializes itself to the shapes it is run with.
//
// The first run under a new input signature (dtype, sizes, strides, device
// of every tensor input) records the shape of every value
// (specialize_shapes.h); the graph is then fused vertically and horizontally
// (fuse_elementwise.h, fuse_horizontal.h), its buffers planned
// (plan_buffers.h), and lowered to a runtime::Program whose fused groups
// launch LLVM-compiled kernels (fused_kernel_op.h), which then runs on the
// same inputs and gives the first call's results. Later runs with the same
// signature check it and run that program. If fusion fails, a warning says
// why and the specialized graph runs unfused. With fusion
// off (set_fusion(false), or METAFUSE_DISABLE_FUSION=1 in the environment)
// the generic, unspecialized program runs: the "unfused" side of profiles.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

#include "compiler/ir_dump.h"
#include "runtime/program.h"

namespace metafuse::compiler {

// Specializations keyed by input signature (InputSignature): the one used
// last is checked first, since consecutive calls usually share it; at most
// kMax entries. Not synchronized: its owner holds a lock around it.
template <typename T>
class SignatureCache {
 public:
  static constexpr size_t kMax = 8;
  // The entry for `signature` (it becomes the last used), or nullptr.
  const T* Find(const std::vector<int64_t>& signature) {
    if (last_ != nullptr && last_->first == signature) return &last_->second;
    for (auto& entry : entries_) {
      if (entry->first == signature) {
        last_ = entry.get();
        return &entry->second;
      }
    }
    return nullptr;
  }
  bool full() const { return entries_.size() >= kMax; }
  const T& Insert(std::vector<int64_t> signature, T value) {
    entries_.push_back(std::make_unique<Entry>(std::move(signature), std::move(value)));
    last_ = entries_.back().get();
    return last_->second;
  }
  // The entry used last, or nullptr.
  const T* last() const { return last_ != nullptr ? &last_->second : nullptr; }

 private:
  using Entry = std::pair<std::vector<int64_t>, T>;
  std::vector<std::unique_ptr<Entry>> entries_;
  Entry* last_ = nullptr;
};

struct SpecializationReport {
  int64_t nodes_before = 0;          // generic graph (without constants)
  int64_t nodes_specialized = 0;     // after shape specialization
  int64_t nodes_after = 0;           // after fusion
  int64_t shape_queries_folded = 0;
  int64_t identities_removed = 0;
  int64_t gemms = 0;                 // matrix products lowered to direct GEMM
  int64_t fusion_groups = 0;         // vertical groups formed
  int64_t fused_nodes = 0;           // ops they absorbed
  int64_t horizontal_nodes = 0;      // merged launches
  int64_t horizontal_segments = 0;   // groups they absorbed
  int64_t planned_reuses = 0;        // outputs that may take an input's buffer
  int64_t instructions = 0;          // of the specialized program
  double seconds = 0;                // specialization + fusion + kernel compilation
  std::string fallback;              // why fusion was abandoned, if it was
};

class SpecializingProgram {
 public:
  // `log` (may be null) receives the specialized and fused graphs; it must
  // outlive this program.
  SpecializingProgram(std::shared_ptr<torch::jit::Graph> graph, std::string label,
                      StageLog* log);

  std::vector<c10::IValue> Run(std::vector<c10::IValue> inputs) const;

  const runtime::Program& generic() const { return *generic_; }
  // The program of the most recent specialization; nullptr before one.
  const runtime::Program* specialized() const;
  SpecializationReport report() const;

  void set_fusion(bool enabled);
  bool fusion() const;

  // At most SignatureCache::kMax signatures are specialized; others run
  // generic().

 private:
  std::vector<c10::IValue> Specialize(std::vector<c10::IValue> inputs,
                                      std::vector<int64_t> signature) const;

  std::shared_ptr<torch::jit::Graph> graph_;
  std::string label_;
  StageLog* log_;
  std::unique_ptr<runtime::Program> generic_;
  mutable std::mutex mu_;
  mutable SignatureCache<std::unique_ptr<runtime::Program>> programs_;
  mutable SpecializationReport report_;
  bool fusion_ = true;
};

// The default of set_fusion: false when METAFUSE_DISABLE_FUSION=1.
bool FusionEnabledByDefault();

// The last steps of a specialization, for a graph SpecializeShapes already
// annotated: vertical and horizontal fusion, buffer planning, lowering to a
// runtime::Program whose fused groups launch compiled kernels. If fusion
// fails, `report->fallback` says why (and a warning) and the program runs
// the graph unfused. Fills the fusion fields of `report`.
struct FusedProgram {
  std::unique_ptr<runtime::Program> program;
  std::shared_ptr<torch::jit::Graph> unfused;  // as it was given
  std::shared_ptr<torch::jit::Graph> fused;    // what the program runs
};
FusedProgram BuildFusedProgram(std::shared_ptr<torch::jit::Graph> graph,
                               const std::string& label, SpecializationReport* report);

// What a specialization is keyed by: dtype, device, sizes and strides of
// every tensor input, the value of every integer input.
std::vector<int64_t> InputSignature(const std::vector<c10::IValue>& inputs);
int64_t CountGraphNodes(const torch::jit::Graph& graph);

}  // namespace metafuse::compiler

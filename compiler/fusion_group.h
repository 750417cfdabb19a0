// The fused-group node shared by the fusion passes, buffer planning and the
// lowering: a `metafuse::FusionGroup` node holds its elementwise ops in a
// subgraph (attr::Subgraph) whose inputs are the node's inputs and whose
// outputs are the node's outputs. Every output has the group's loop shape;
// every tensor input broadcasts to it.
//
// A horizontally fused group (fuse_horizontal.h) has attr `segments` = k > 1:
// its inputs and outputs are k copies of the subgraph's, one after the
// other, and it runs one compiled kernel over the k segments.
//
// Buffer planning (plan_buffers.h) sets attr `reuse`: per output (of one
// segment) the input whose buffer it may take when that input is uniquely
// owned at run time, or -1.
#pragma once

#include <ATen/core/interned_strings.h>

namespace metafuse::compiler {

inline c10::Symbol FusionGroupKind() {
  static const c10::Symbol kind = c10::Symbol::fromQualString("metafuse::FusionGroup");
  return kind;
}
inline c10::Symbol SegmentsAttr() {
  static const c10::Symbol attr = c10::Symbol::attr("segments");
  return attr;
}
inline c10::Symbol ReuseAttr() {
  static const c10::Symbol attr = c10::Symbol::attr("reuse");
  return attr;
}

}  // namespace metafuse::compiler

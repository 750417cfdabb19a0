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
// A group may also sum some of its values (fuse_elementwise.h: reductions
// that follow elementwise work): attr `reduce` lists, per reduction, four
// ints {subgraph output, access, inner, mid}: the reduced element of loop
// index i is where an input of that access reads i (codegen::kir::Access);
// attr `reduce_scale` its factor per reduction (1 for a sum, 1/count for a
// mean). The node's outputs are the subgraph's, then one per reduction. The
// last `scratch` subgraph outputs are read by the reductions alone: the
// launch keeps them in a per-thread block, never a whole tensor, and their
// node outputs are left unused. Such a group has one segment.
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

inline c10::Symbol ReduceAttr() {
  static const c10::Symbol attr = c10::Symbol::attr("reduce");
  return attr;
}
inline c10::Symbol ReduceScaleAttr() {
  static const c10::Symbol attr = c10::Symbol::attr("reduce_scale");
  return attr;
}
inline c10::Symbol ScratchAttr() {
  static const c10::Symbol attr = c10::Symbol::attr("scratch");
  return attr;
}
// Attr `pool` = {kh, kw} (fuse_pool_epilogue.h): the group's one output is
// max-pooled as it is computed and never materialized; the node's outputs
// are that (unused) output, then the pooled values and their indices.
inline c10::Symbol PoolAttr() {
  static const c10::Symbol attr = c10::Symbol::attr("pool");
  return attr;
}

}  // namespace metafuse::compiler

// Graph-building shorthands of the codegen unit tests (test_codegen.cpp, test_kernel_template.cpp):
// contiguous tensor meta for a shape, and a node as an argument.
#pragma once

#include <cstdint>
#include <vector>

#include "dynamo/core/graph.h"

namespace dynamo::codegen::testing {

/// The meta of a contiguous CPU tensor of `shape` (row-major strides) and `dtype`.
inline core::NodeMeta meta(std::vector<int64_t> shape, const char* dtype = "torch.float32") {
  core::TensorMeta t;
  t.shape = shape;
  t.dtype = dtype;
  t.device = "cpu";
  std::vector<int64_t> st(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * shape[i + 1];
  t.strides = st;
  core::NodeMeta m;
  m.tensor = t;
  return m;
}

/// A node as a call argument.
inline core::Arg N(const core::NodeRef& n) { return core::Arg::node(n); }

}  // namespace dynamo::codegen::testing

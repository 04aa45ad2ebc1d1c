// Which joint-graph nodes the min-cut partitioner may recompute, and what saving one costs.
// The list of recomputable ops is recompute_ops.def; the sizes come from the nodes' TensorMeta.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dynamo/core/graph_node.h"

namespace dynamo::backends::partition {

/// Every rule name in recompute_ops.def, in file order.
const std::vector<std::string>& recomputeOpNames();

/// True when node n's op is listed in recompute_ops.def and not named in disabled.
bool recomputeListed(const core::Node& n, const std::vector<std::string>& disabled);

/// True when n's op is in recompute_ops.def outside its view group (pointwise, reduction,
/// symbolic), or n is a symbolic int: a fused backend computes it inside a kernel, where a
/// recomputed operand costs no buffer. Every other op (mm, convolution_backward, ...) reads its
/// operands from memory.
bool fusible(const core::Node& n);

/// True for ops that write one of their arguments (ATen names whose base ends in '_', such as
/// "aten::add_.Tensor" or "aten::copy_").
bool isMutating(const core::Node& n);

/// True for random ops (random_ops.def): never recomputed, never dropped from the forward.
bool isRandom(const core::Node& n);

/// True for view ops (their result aliases their first argument).
bool isView(const core::Node& n);

/// Bytes of n's tensor result (shape x dtype size), or nullopt when n has no TensorMeta.
std::optional<int64_t> tensorBytes(const core::Node& n);

/// True when n is a symbolic int (aten::sym_size and friends, or an operator.* on them): no
/// TensorMeta, saved after the tensors.
bool isSymbolicInt(const core::Node& n);

/// The bytes a node counts for when it has no TensorMeta and is not a symbolic int (256 MiB: saving
/// an unknown value is avoided when any alternative exists).
inline constexpr int64_t kUnknownBytes = int64_t{1} << 28;
/// The bytes a symbolic int counts for.
inline constexpr int64_t kSymIntBytes = 8;

}  // namespace dynamo::backends::partition

// The parts of the partitioner that do not choose: classifying joint-graph nodes as forward or
// backward, and building the forward and backward graphs once the saved values are chosen.
#pragma once

#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "dynamo/backends/partition.h"

namespace dynamo::backends::partition {

using NodeSet = std::unordered_set<const core::Node*>;

/// The joint graph seen through its signature.
struct JointView {
  std::vector<core::NodeRef> primals;       ///< forward inputs
  std::vector<core::NodeRef> tangents;      ///< backward inputs
  std::vector<core::NodeRef> forwardNodes;  ///< primals, then body nodes that depend on no tangent
  NodeSet backwardSet;                      ///< tangents and nodes that depend on one
  std::vector<core::NodeRef> neededBackward;  ///< backward body nodes the gradients need, in order
  /// Forward nodes the backward reads directly (inputs of needed backward nodes, or gradients
  /// themselves), in graph order.
  std::vector<core::NodeRef> backwardReads;
  std::vector<core::Arg> forwardOutputs;  ///< the joint output's first numFwdOutputs items
  std::vector<core::Arg> gradients;       ///< the rest: one per primal
};

/// Classifies the joint's nodes. Internal error when the graph does not match sig.
JointView classifyJoint(const core::Graph& joint, const JointSignature& sig);

/// Builds the forward and backward graphs: the forward computes its outputs, the saved values
/// (tensors first, then symbolic ints: saved is reordered so) and every side effect (mutations,
/// random draws, nodes nobody uses); the backward
/// takes the saved values and the tangents, recomputes `recomputed` and runs the needed backward
/// nodes.
/// Returns {forward, backward}.
std::pair<core::Graph, core::Graph> buildGraphs(const core::Graph& joint, const JointView& view,
                                                std::vector<core::NodeRef>& saved, const NodeSet& recomputed);

}  // namespace dynamo::backends::partition

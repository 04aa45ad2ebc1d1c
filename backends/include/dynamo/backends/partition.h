// STAND-IN (branch h-aot only): the partition API of backends/src/partition (engineer
// `partition`), with a save-everything implementation so the AOT layer can be built and tested
// before the min-cut partitioner lands. Replaced by theirs when h-partition is merged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dynamo/core/graph.h"

namespace dynamo::backends {

/// The joint graph's layout. Inputs: primals then tangents; output: a flat tuple of the forward
/// outputs, then one gradient per primal (a None constant where there is none).
struct JointSignature {
  size_t numPrimals = 0;     ///< forward inputs
  size_t numFwdOutputs = 0;  ///< forward outputs at the head of the output tuple
};

/// kMinCut: save what a min-cut picks, recompute cheap ops; kSaveAll: save every forward value
/// the backward uses.
enum class PartitionMode { kMinCut, kSaveAll };

/// Options of partitionJoint.
struct PartitionOptions {
  PartitionMode mode = PartitionMode::kMinCut;   ///< which partitioner
  std::vector<std::string> disabledRecomputeOps; ///< schema names never recomputed
};

/// A forward graph (in: primals; out: forward outputs, then saved values) and a backward graph
/// (in: saved values, then tangents; out: one gradient per primal).
struct Partition {
  core::Graph forward;               ///< the forward graph
  core::Graph backward;              ///< the backward graph
  std::vector<std::string> saved;    ///< joint node names saved for backward, in order
  std::vector<std::string> recomputed;  ///< joint node names recomputed in the backward
  int64_t bytesSaved = 0;            ///< bytes of the saved tensors (from their tensor meta)
  /// One line: counts and bytes.
  std::string summary() const;
};

/// Splits a joint graph. Internal error when the graph does not match sig.
Partition partitionJoint(const core::Graph& joint, const JointSignature& sig,
                         const PartitionOptions& opts = {});

}  // namespace dynamo::backends

// Max-flow / min-cut on a small directed graph with int64 capacities (Dinic's algorithm:
// BFS levels, then blocking flows by DFS with per-node edge cursors; O(V^2 E) worst case, far
// less on the partitioner's layered split-node graphs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace dynamo::backends::partition {

/// A capacity that is never cut (a quarter of int64's range, so sums of finite capacities never
/// reach it and adding two never overflows).
inline constexpr int64_t kInfinite = std::numeric_limits<int64_t>::max() / 4;

/// A flow network: nodes 0..n-1, edges added with addEdge, solved once with minCut.
class MaxFlow {
 public:
  /// A network of numNodes nodes and no edges.
  explicit MaxFlow(int numNodes);
  /// Adds an edge from -> to with capacity cap (>= 0).
  void addEdge(int from, int to, int64_t cap);
  /// Pushes the maximum flow from source to sink and returns its value; afterwards sourceSide()
  /// tells the source side of a minimum cut.
  int64_t solve(int source, int sink);
  /// After solve: true for nodes reachable from the source in the residual network.
  const std::vector<bool>& sourceSide() const { return sourceSide_; }

 private:
  struct Edge {
    int to;
    int64_t cap;  ///< residual capacity
  };
  bool buildLevels(int source, int sink);
  int64_t push(int v, int sink, int64_t limit);

  std::vector<Edge> edges_;            ///< edge 2k and its reverse 2k+1
  std::vector<std::vector<int>> adj_;  ///< edge indices out of each node
  std::vector<int> level_;
  std::vector<size_t> cursor_;
  std::vector<bool> sourceSide_;
};

}  // namespace dynamo::backends::partition

// Dinic's max-flow (max_flow.h). Iterative BFS; the DFS is recursive with depth bounded by the
// BFS level of the sink (the partitioner's networks are a few thousand levels deep at most).
#include "partition/max_flow.h"

#include <algorithm>
#include <deque>

#include "dynamo/common/error.h"

namespace dynamo::backends::partition {

MaxFlow::MaxFlow(int numNodes) : adj_(numNodes), level_(numNodes), cursor_(numNodes) {}

void MaxFlow::addEdge(int from, int to, int64_t cap) {
  DYNAMO_INTERNAL_ASSERT(cap >= 0, "negative capacity in the partitioner's flow network");
  adj_[from].push_back(static_cast<int>(edges_.size()));
  edges_.push_back({to, std::min(cap, kInfinite)});
  adj_[to].push_back(static_cast<int>(edges_.size()));
  edges_.push_back({from, 0});
}

bool MaxFlow::buildLevels(int source, int sink) {
  std::fill(level_.begin(), level_.end(), -1);
  std::deque<int> queue{source};
  level_[source] = 0;
  while (!queue.empty()) {
    int v = queue.front();
    queue.pop_front();
    for (int e : adj_[v]) {
      const Edge& edge = edges_[e];
      if (edge.cap > 0 && level_[edge.to] < 0) {
        level_[edge.to] = level_[v] + 1;
        queue.push_back(edge.to);
      }
    }
  }
  return level_[sink] >= 0;
}

int64_t MaxFlow::push(int v, int sink, int64_t limit) {
  if (v == sink) return limit;
  for (size_t& i = cursor_[v]; i < adj_[v].size(); ++i) {
    int e = adj_[v][i];
    Edge& edge = edges_[e];
    if (edge.cap <= 0 || level_[edge.to] != level_[v] + 1) continue;
    int64_t pushed = push(edge.to, sink, std::min(limit, edge.cap));
    if (pushed > 0) {
      edge.cap -= pushed;
      edges_[e ^ 1].cap += pushed;
      return pushed;
    }
  }
  return 0;
}

int64_t MaxFlow::solve(int source, int sink) {
  int64_t flow = 0;
  while (buildLevels(source, sink)) {
    std::fill(cursor_.begin(), cursor_.end(), 0);
    while (int64_t pushed = push(source, sink, kInfinite)) {
      flow += pushed;
      DYNAMO_INTERNAL_ASSERT(flow < kInfinite, "the partitioner's min cut is infinite");
    }
  }
  buildLevels(source, sink);  // the residual network's reachability from the source
  sourceSide_.assign(level_.size(), false);
  for (size_t v = 0; v < level_.size(); ++v) sourceSide_[v] = level_[v] >= 0;
  return flow;
}

}  // namespace dynamo::backends::partition

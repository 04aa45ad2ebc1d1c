// The pass pipeline (see passes.h): the passes of passes.def, in order, each logged.
#include <algorithm>

#include "dynamo/core/graph_printer.h"
#include "dynamo/core/passes.h"

namespace dynamo::core {

const std::vector<PassInfo>& passList() {
  static const std::vector<PassInfo> kPasses = {
#define DYNAMO_PASS(Name, name, description) {name, description},
#include "dynamo/core/passes.def"
  };
  return kPasses;
}

Graph runPasses(const Graph& graph, const PassOptions& options, std::vector<PassRecord>* records) {
  using PassFn = Graph (*)(const Graph&);
  static const PassFn kFns[] = {
#define DYNAMO_PASS(Name, name, description) &run##Name,
#include "dynamo/core/passes.def"
  };
  Graph g = graph;
  const auto& passes = passList();
  for (size_t i = 0; i < passes.size(); ++i) {
    PassRecord rec;
    rec.name = passes[i].name;
    rec.nodesBefore = g.size();
    const bool off = std::find(options.disabled.begin(), options.disabled.end(), rec.name) != options.disabled.end();
    if (off) {
      rec.status = "disabled";
    } else {
      Graph next = kFns[i](g);
      // A pass returns its input itself when it changes nothing.
      const bool changed = next.size() != g.size() || next.body() != g.body();
      rec.status = changed ? "changed" : "unchanged";
      if (changed && records != nullptr && options.printGraphs) rec.graphText = printGraph(next);
      g = next;
    }
    rec.nodesAfter = g.size();
    if (records != nullptr) records->push_back(std::move(rec));
  }
  return g;
}

}  // namespace dynamo::core

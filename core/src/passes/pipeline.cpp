// The pass pipeline (see passes.h): the passes of passes.def, in order, each logged, each
// application numbered (and, under PassOptions::limits, cut off after the first N).
#include <algorithm>

#include "dynamo/core/graph_printer.h"
#include "dynamo/core/passes.h"

namespace dynamo::core {

const std::vector<PassInfo>& passList() {
  static const std::vector<PassInfo> kPasses = {
#define DYNAMO_PASS(Name, name, description) {name, description, false},
#define DYNAMO_TEST_PASS(Name, name, description) {name, description, true},
#include "dynamo/core/passes.def"
  };
  return kPasses;
}

bool PassContext::apply(const NodeRef& site) {
  PassApplication app;
  app.index = ++counter_;
  app.node = site->name();
  app.op = site->opKey();
  app.where = site->meta().location;
  app.applied = limit_ < 0 || app.index <= limit_;
  out_.push_back(std::move(app));
  return out_.back().applied;
}

Graph runPasses(const Graph& graph, const PassOptions& options, std::vector<PassRecord>* records) {
  using PassFn = Graph (*)(const Graph&, PassContext&);
  static const PassFn kFns[] = {
#define DYNAMO_PASS(Name, name, description) &run##Name,
#define DYNAMO_TEST_PASS(Name, name, description) &run##Name,
#include "dynamo/core/passes.def"
  };
  PassCounters local;  // numbers applications from 1 when the caller shares no counters
  PassCounters& counters = options.counters ? *options.counters : local;
  Graph g = graph;
  const auto& passes = passList();
  for (size_t i = 0; i < passes.size(); ++i) {
    // A test-only pass neither runs nor shows unless a test turned it on.
    if (passes[i].testOnly && options.corruptNode.empty()) continue;
    PassRecord rec;
    rec.name = passes[i].name;
    rec.nodesBefore = g.size();
    const bool off = std::find(options.disabled.begin(), options.disabled.end(), rec.name) != options.disabled.end();
    if (off) {
      rec.status = "disabled";
    } else {
      std::int64_t limit = -1;
      for (const auto& [name, n] : options.limits)
        if (name == rec.name) limit = n;
      PassContext ctx(options, counters.asked[i], limit, rec.applications);
      Graph next = kFns[i](g, ctx);
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

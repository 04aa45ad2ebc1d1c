// The pass pipeline (see passes.h): the passes of passes.def, in order, each logged, each
// application numbered (and, under PassOptions::limits, cut off after the first N).
#include <algorithm>
#include <unordered_set>

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

namespace {

// The body nodes of `before` missing from `after` (by identity: a pass copies what it keeps, so
// compare names), and the reverse.
void bodyDiff(const Graph& before, const Graph& after, std::vector<std::string>& removed,
              std::vector<std::string>& added) {
  std::unordered_set<std::string> a, b;
  for (const NodeRef& n : before.body()) a.insert(n->name());
  for (const NodeRef& n : after.body()) b.insert(n->name());
  for (const NodeRef& n : before.body())
    if (!b.count(n->name())) removed.push_back(n->name());
  for (const NodeRef& n : after.body())
    if (!a.count(n->name())) added.push_back(n->name());
}

}  // namespace

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
      if (changed && records != nullptr && options.printGraphs) {
        rec.graphText = printGraph(next);
        bodyDiff(g, next, rec.removed, rec.added);
        rec.input = std::make_shared<const Graph>(g);
      }
      g = next;
    }
    rec.nodesAfter = g.size();
    if (records != nullptr) records->push_back(std::move(rec));
  }
  return g;
}

}  // namespace dynamo::core

// What the store-wide views need, computed off the UI thread: the explainer's and the
// profiler's reports (the structs every tool shares), the distinct break sites with the graphs
// around them, and the list of every graph for the diff pickers. One call opens its own reader.
#pragma once

#include <QString>

#include <string>
#include <vector>

#include "dynamo/explain/explain_report.h"
#include "dynamo/gui/store_models.h"
#include "dynamo/profiler/profile_report.h"

namespace dynamo::gui {

/// One graph of the store, as the diff pickers list it.
struct GraphEntry {
  RowId runId = 0;          ///< its run
  RowId frameId = 0;        ///< its frame
  RowId compileId = 0;      ///< its compile
  int attempt = 0;          ///< the compile's attempt
  int index = 0;            ///< index in the compile
  int numNodes = 0;         ///< nodes
  QString label;            ///< "run 1 · scale_if_large · compile #1 · graph 0 (4 nodes)"
};

/// The store-wide data.
struct StoreReports {
  explain::ExplainReport explain;
  profiler::ProfileReport profile;
  std::vector<BreakSite> breakSites;
  std::vector<GraphEntry> graphs;
  QString error;  ///< set when the store could not be read (the rest stays empty)
};

/// Builds everything for the store at `path` (any thread).
StoreReports buildStoreReports(const std::string& path);

}  // namespace dynamo::gui

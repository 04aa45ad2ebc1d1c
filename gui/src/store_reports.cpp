// buildStoreReports (see store_reports.h).
#include "dynamo/gui/store_reports.h"

#include "dynamo/gui/store_session.h"

namespace dynamo::gui {

StoreReports buildStoreReports(const std::string& path) {
  StoreReports out;
  try {
    auto reader = storage::TraceReader::open(path);
    out.explain = explain::buildExplainReport(*reader);
    out.profile = profiler::buildProfileReport(*reader);
    out.breakSites = computeBreakSites(*reader, out.explain);
    for (const storage::RunRecord& run : reader->runs()) {
      std::map<RowId, std::string> names;
      for (const storage::FrameRecord& f : reader->frames(run.id)) names[f.id] = f.name;
      for (const storage::CompileRecord& c : reader->compilesOfRun(run.id))
        for (const storage::GraphRecord& g : reader->graphs(c.id)) {
          GraphEntry e;
          e.runId = run.id;
          e.frameId = c.frameId;
          e.compileId = c.id;
          e.attempt = c.attempt;
          e.index = g.index;
          e.numNodes = g.numNodes;
          e.label = QString("run %1 \u00b7 %2 \u00b7 compile #%3 \u00b7 graph %4 (%5 nodes)")
                        .arg(run.id).arg(QString::fromStdString(names[c.frameId]))
                        .arg(c.attempt).arg(g.index).arg(g.numNodes);
          out.graphs.push_back(std::move(e));
        }
    }
  } catch (const std::exception& e) {
    out = StoreReports{};
    out.error = describeError(e);
  }
  return out;
}

}  // namespace dynamo::gui

// buildStoreReports (see store_reports.h).
#include "dynamo/gui/store_reports.h"

#include "dynamo/gui/compile_artifacts.h"
#include "dynamo/gui/store_session.h"

namespace dynamo::gui {
namespace {

// The AOT graphs of a compile, for the diff pickers (dynamo vs AOT forward, joint vs joint).
void addAotEntries(const storage::TraceReader& reader, RowId runId, const storage::CompileRecord& c,
                   const std::string& frame, std::vector<GraphEntry>& out) {
  const std::vector<storage::ArtifactRecord> artifacts = reader.artifactsOfCompile(c.id);
  for (const auto& [index, pass] : passInputGraphs(artifacts)) {  // before each pass that changed it
    GraphEntry e;
    e.runId = runId;
    e.frameId = c.frameId;
    e.compileId = c.id;
    e.attempt = c.attempt;
    e.index = index;
    e.label = QString("run %1 \u00b7 %2 \u00b7 compile #%3 \u00b7 graph 0 before %4")
                  .arg(runId).arg(QString::fromStdString(frame)).arg(c.attempt).arg(QString::fromStdString(pass));
    out.push_back(std::move(e));
  }
  for (const AotRecord& r : aotRecords(artifacts))
    for (const AotGraphRef& g : r.graphs) {
      GraphEntry e;
      e.runId = runId;
      e.frameId = c.frameId;
      e.compileId = c.id;
      e.attempt = c.attempt;
      e.index = g.index;
      e.label = QString("run %1 \u00b7 %2 \u00b7 compile #%3 \u00b7 %4 (%5)")
                    .arg(runId).arg(QString::fromStdString(frame)).arg(c.attempt)
                    .arg(QString::fromStdString(graphIndexLabel(g.index)))
                    .arg(QString::fromStdString(r.backend));
      out.push_back(std::move(e));
    }
}

}  // namespace

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
      for (const storage::CompileRecord& c : reader->compilesOfRun(run.id)) {
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
        addAotEntries(*reader, run.id, c, names[c.frameId], out.graphs);
      }
    }
  } catch (const std::exception& e) {
    out = StoreReports{};
    out.error = describeError(e);
  }
  return out;
}

}  // namespace dynamo::gui

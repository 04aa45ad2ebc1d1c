// StoreSession and graph loading (see store_session.h).
#include "dynamo/gui/store_session.h"

#include <QDateTime>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QtConcurrent/QtConcurrent>

#include "dynamo/common/error.h"
#include "dynamo/gui/compile_artifacts.h"

namespace dynamo::gui {

QString describeError(const std::exception& e) {
  if (const auto* u = dynamic_cast<const UserError*>(&e)) {
    QString text = QString::fromStdString(u->summary());
    if (!u->explanation().empty()) text += ": " + QString::fromStdString(u->explanation());
    if (!u->hint().empty()) text += " (hint: " + QString::fromStdString(u->hint()) + ")";
    return text;
  }
  return QString::fromUtf8(e.what());
}

namespace {

// An AOT graph (index < 0): the artifact's JSON, with the partition roles of its record.
GraphLoad loadAotGraph(const storage::TraceReader& reader, storage::RowId compileId, int index) {
  GraphLoad out;
  QElapsedTimer t;
  t.start();
  const std::vector<storage::ArtifactRecord> artifacts = reader.artifactsOfCompile(compileId);
  const storage::ArtifactRecord* a = aotGraphArtifact(artifacts, index);
  if (!a) {
    out.error = QString("compile %1 has no %2 in '%3'")
                    .arg(compileId).arg(QString::fromStdString(graphIndexLabel(index)))
                    .arg(QString::fromStdString(reader.path()));
    return out;
  }
  out.record.compileId = compileId;
  out.record.index = index;
  out.record.format = a->mediaType;
  out.readMs = static_cast<double>(t.nsecsElapsed()) / 1e6;
  t.restart();
  InspectGraphPtr graph = inspectGraphFromJson(a->data);
  int ordinal = 0;
  AotGraphKind kind{};
  decodeAotGraphIndex(index, ordinal, kind);
  const std::vector<AotRecord> records = aotRecords(artifacts);
  // The Dynamo graph it was traced from (the k-th AOT compile of the k-th graph) lends the
  // joint graph module paths and source lines; the forward and backward graphs take them from
  // the joint graph by node name, so a value sits in the same module in all three.
  const std::vector<storage::GraphRecord> graphs = reader.graphs(compileId);
  if (graphs.size() == records.size() && graphs[static_cast<size_t>(ordinal)].numNodes <= kMaxGraphNodes) {
    try {
      const InspectGraphPtr dynamo = inspectGraphFromJson(graphs[static_cast<size_t>(ordinal)].serialized);
      const storage::ArtifactRecord* joint =
          kind == AotGraphKind::kJoint ? nullptr
                                       : aotGraphArtifact(artifacts, aotGraphIndex(ordinal, AotGraphKind::kJoint));
      graph = joint ? withContextOf(*graph, *withDynamoContext(*inspectGraphFromJson(joint->data), *dynamo))
                    : withDynamoContext(*graph, *dynamo);
    } catch (const std::exception&) {
      // An unreadable Dynamo or joint graph only costs this graph its module paths (opening
      // that one says why).
    }
  }
  out.graph = withKernels(withPartitionRoles(*graph, kind, records[static_cast<size_t>(ordinal)]), index,
                          reader.kernelsOfCompile(compileId));
  out.record.numNodes = static_cast<int>(out.graph->nodes().size());
  out.buildMs = static_cast<double>(t.nsecsElapsed()) / 1e6;
  return out;
}

}  // namespace

GraphLoad loadGraph(const std::string& path, storage::RowId compileId, int index) {
  GraphLoad out;
  QElapsedTimer t;
  t.start();
  try {
    auto reader = storage::TraceReader::open(path);
    if (index <= kPassGraphBase) {  // the graph a pass got (Dynamo's graph before that pass)
      const std::vector<storage::ArtifactRecord> artifacts = reader->artifactsOfCompile(compileId);
      const storage::ArtifactRecord* a = passGraphArtifact(artifacts, index);
      if (!a) {
        out.error = QString("compile %1 has no %2 in '%3'")
                        .arg(compileId).arg(QString::fromStdString(graphIndexLabel(index))).arg(QString::fromStdString(path));
        return out;
      }
      out.record.compileId = compileId;
      out.record.index = index;
      out.record.format = a->mediaType;
      out.readMs = static_cast<double>(t.nsecsElapsed()) / 1e6;
      t.restart();
      out.graph = inspectGraphFromJson(a->data);
      out.record.numNodes = static_cast<int>(out.graph->nodes().size());
      out.buildMs = static_cast<double>(t.nsecsElapsed()) / 1e6;
      return out;
    }
    if (index < 0) return loadAotGraph(*reader, compileId, index);
    std::vector<storage::GraphRecord> graphs = reader->graphs(compileId);
    auto it = std::find_if(graphs.begin(), graphs.end(),
                           [&](const storage::GraphRecord& g) { return g.index == index; });
    if (it == graphs.end()) {
      out.error = QString("compile %1 has no graph %2 in '%3'")
                      .arg(compileId).arg(index).arg(QString::fromStdString(path));
      return out;
    }
    std::string json = std::move(it->serialized);
    out.record = std::move(*it);
    out.readMs = static_cast<double>(t.nsecsElapsed()) / 1e6;
    t.restart();
    if (out.record.numNodes > kMaxGraphNodes) {
      out.error = QString("graph %1 of compile %2 has %3 nodes: the inspector reads graphs of up to "
                          "%4 nodes (use dynamo-trace graph to print it)")
                      .arg(index).arg(compileId).arg(out.record.numNodes).arg(kMaxGraphNodes);
      return out;
    }
    out.graph = withSymbolicInputs(withKernels(inspectGraphFromJson(json), index, reader->kernelsOfCompile(compileId)),
                                   reader->artifactsOfCompile(compileId));
    out.buildMs = static_cast<double>(t.nsecsElapsed()) / 1e6;
  } catch (const std::exception& e) {
    out.error = QString("cannot read %1 of compile %2: %3")
                    .arg(QString::fromStdString(graphIndexLabel(index))).arg(compileId).arg(describeError(e));
  }
  return out;
}

std::unique_ptr<StoreSession> StoreSession::open(const QString& path, QString& error) {
  try {
    auto reader = storage::TraceReader::open(path.toStdString());
    return std::unique_ptr<StoreSession>(new StoreSession(path, std::move(reader)));
  } catch (const std::exception& e) {
    error = describeError(e);
    return nullptr;
  }
}

StoreSession::StoreSession(QString path, std::unique_ptr<storage::TraceReader> reader)
    : path_(std::move(path)), reader_(std::move(reader)) {
  lastStamp_ = stamp();
  lastCounts_ = reader_->counts();
  connect(&timer_, &QTimer::timeout, this, &StoreSession::poll);
}

StoreSession::~StoreSession() = default;

QString StoreSession::emptyMessage() const {
  if (lastCounts_.runs == 0)
    return QString("'%1' is a trace store with no runs yet: nothing was recorded into it (run a "
                   "program with DYNAMO_TRACE=%1); the views fill in when a run writes to it")
        .arg(path_);
  if (lastCounts_.compiles == 0)
    return QString("'%1' holds %2 run(s) but no compiles yet; the views fill in as they are written")
        .arg(path_).arg(lastCounts_.runs);
  return {};
}

QFuture<GraphLoad> StoreSession::loadGraphAsync(storage::RowId compileId, int index) const {
  const std::string path = path_.toStdString();
  return QtConcurrent::run([path, compileId, index] { return loadGraph(path, compileId, index); });
}

QString StoreSession::stamp() const {
  QString s;
  for (const QString& p : {path_, path_ + "-wal"}) {
    QFileInfo fi(p);
    s += QString("%1:%2:%3;").arg(fi.exists()).arg(fi.size()).arg(fi.lastModified().toMSecsSinceEpoch());
  }
  return s;
}

void StoreSession::watch(int intervalMs) { timer_.start(intervalMs); }

void StoreSession::poll() {
  if (lost_) return;
  if (!QFileInfo::exists(path_)) {
    lost_ = true;
    timer_.stop();
    emit lostFile(QString("trace store '%1' was deleted while open: the views show what was read "
                          "before; reopen it from a copy to see more")
                      .arg(path_));
    return;
  }
  const QString now = stamp();
  if (now == lastStamp_) return;
  lastStamp_ = now;
  try {
    const storage::StoreCounts c = reader_->counts();
    const bool moved = c.runs != lastCounts_.runs || c.compiles != lastCounts_.compiles ||
                       c.graphs != lastCounts_.graphs || c.graphBreaks != lastCounts_.graphBreaks ||
                       c.guardFailures != lastCounts_.guardFailures ||
                       c.artifacts != lastCounts_.artifacts;
    lastCounts_ = c;
    if (moved) emit changed();
  } catch (const std::exception&) {
    // A writer mid-checkpoint: the next poll reads again.
  }
}

}  // namespace dynamo::gui

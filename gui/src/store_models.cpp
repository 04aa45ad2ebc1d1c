// The navigation models (see store_models.h).
#include "dynamo/gui/store_models.h"

#include "dynamo/gui/compile_artifacts.h"
#include "dynamo/gui/overlays.h"

#include <QDateTime>
#include <QFileInfo>

#include <algorithm>
#include <map>

#include "dynamo/storage/crash_marker.h"

namespace dynamo::gui {
namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

QString ms(std::int64_t us) { return QString::number(static_cast<double>(us) / 1000.0, 'f', 1); }

QString joinHints(const std::vector<std::string>& v, const char* sep = "; ") {
  QStringList l;
  for (const std::string& s : v) l << qs(s);
  return l.join(sep);
}

/// Worst first: the rank of a frame status.
int statusRank(const QString& s) {
  if (s == "failed" || s == "cache limit") return 4;
  if (s == "recompiled") return 3;
  if (s == "graph break") return 2;
  if (s == "skipped") return 1;
  return 0;
}

QString frameStatus(const std::vector<const storage::CompileRecord*>& compiles) {
  QString worst = "ok";
  for (const storage::CompileRecord* c : compiles) {
    QString s = "ok";
    if (c->status == "failed") s = "failed";
    else if (c->status == "cache_limit") s = "cache limit";
    else if (c->attempt > 0) s = "recompiled";
    else if (c->status == "graph_break") s = "graph break";
    else if (c->status == "skipped") s = "skipped";
    if (statusRank(s) > statusRank(worst)) worst = s;
  }
  return worst;
}

QString runTitle(const storage::RunRecord& r) {
  QString prog = r.argv.empty() ? QString("?") : QFileInfo(qs(r.argv[0])).fileName();
  for (size_t i = 1; i < r.argv.size() && i < 4; ++i) prog += " " + qs(r.argv[i]);
  QString t = QString("run %1: %2 (pid %3)").arg(r.id).arg(prog).arg(r.pid);
  // How it ended, in the reports' words (crashed (SIGSEGV) during the first call of ...).
  if (r.endTimeUs == 0)
    t += ", " + qs(storage::describeRunEnd(r, QFileInfo(qs(r.crash.frameFile)).fileName().toStdString()));
  return t;
}

}  // namespace

QColor statusColour(const QString& status) {
  if (status == "ok") return QColor("#d4f4d4");
  if (status == "graph break" || status == "graph_break") return QColor("#fff2b3");
  if (status == "recompiled") return QColor("#ffd8a8");
  if (status == "skipped") return QColor("#e6e6e6");
  return QColor("#ffb3b3");  // failed, cache limit, unknown
}

// ---------------------------------------------------------------- RunTreeModel

struct RunTreeModel::Item {
  QString kind;  // "root", "run", "file", "frame"
  RowId id = 0;
  QString text, tooltip, status;
  int compiles = 0;
  storage::FrameRecord frame;
  Item* parent = nullptr;
  std::vector<std::unique_ptr<Item>> children;
  Item* add(std::unique_ptr<Item> c) {
    c->parent = this;
    children.push_back(std::move(c));
    return children.back().get();
  }
  int row() const {
    if (!parent) return 0;
    for (size_t i = 0; i < parent->children.size(); ++i)
      if (parent->children[i].get() == this) return static_cast<int>(i);
    return 0;
  }
};

RunTreeModel::RunTreeModel(QObject* parent) : QAbstractItemModel(parent), root_(std::make_unique<Item>()) {
  root_->kind = "root";
}
RunTreeModel::~RunTreeModel() = default;

void RunTreeModel::reload(const storage::TraceReader& reader) {
  beginResetModel();
  root_ = std::make_unique<Item>();
  root_->kind = "root";
  for (const storage::RunRecord& run : reader.runs()) {
    auto r = std::make_unique<Item>();
    r->kind = "run";
    r->id = run.id;
    r->text = runTitle(run);
    QStringList argv;
    for (const std::string& a : run.argv) argv << qs(a);
    r->tooltip = QString("%1\nstarted %2 on %3\npython %4, torch %5, dynamo %6")
                     .arg(argv.join(' '))
                     .arg(QDateTime::fromMSecsSinceEpoch(run.startTimeUs / 1000).toString(Qt::ISODate))
                     .arg(qs(run.hostname), qs(run.pythonVersion), qs(run.torchVersion), qs(run.dynamoVersion));
    Item* runItem = root_->add(std::move(r));
    std::map<RowId, std::vector<const storage::CompileRecord*>> byFrame;
    const std::vector<storage::CompileRecord> compiles = reader.compilesOfRun(run.id);
    for (const storage::CompileRecord& c : compiles) byFrame[c.frameId].push_back(&c);
    std::map<std::string, Item*> files;
    QString runStatus = "ok";
    for (const storage::FrameRecord& f : reader.frames(run.id)) {
      Item*& file = files[f.file];
      if (!file) {
        auto fi = std::make_unique<Item>();
        fi->kind = "file";
        fi->text = QFileInfo(qs(f.file)).fileName();
        fi->tooltip = qs(f.file);
        fi->status = "ok";
        file = runItem->add(std::move(fi));
      }
      auto fr = std::make_unique<Item>();
      fr->kind = "frame";
      fr->id = f.id;
      fr->frame = f;
      fr->text = QString("%1 :%2").arg(qs(f.name)).arg(f.firstLine);
      fr->tooltip = QString("%1 (%2:%3)").arg(qs(f.name), qs(f.file)).arg(f.firstLine);
      fr->compiles = static_cast<int>(byFrame[f.id].size());
      fr->status = frameStatus(byFrame[f.id]);
      file->compiles += fr->compiles;
      if (statusRank(fr->status) > statusRank(file->status)) file->status = fr->status;
      if (statusRank(fr->status) > statusRank(runStatus)) runStatus = fr->status;
      runItem->compiles += fr->compiles;
      file->add(std::move(fr));
    }
    runItem->status = runStatus;
  }
  endResetModel();
}

QModelIndex RunTreeModel::index(int row, int column, const QModelIndex& parent) const {
  const Item* p = parent.isValid() ? static_cast<Item*>(parent.internalPointer()) : root_.get();
  if (row < 0 || static_cast<size_t>(row) >= p->children.size() || column < 0 || column >= 3) return {};
  return createIndex(row, column, p->children[static_cast<size_t>(row)].get());
}

QModelIndex RunTreeModel::parent(const QModelIndex& child) const {
  if (!child.isValid()) return {};
  const Item* it = static_cast<Item*>(child.internalPointer());
  Item* p = it->parent;
  if (!p || p == root_.get()) return {};
  return createIndex(p->row(), 0, p);
}

int RunTreeModel::rowCount(const QModelIndex& parent) const {
  if (parent.isValid() && parent.column() != 0) return 0;
  const Item* p = parent.isValid() ? static_cast<Item*>(parent.internalPointer()) : root_.get();
  return static_cast<int>(p->children.size());
}

int RunTreeModel::columnCount(const QModelIndex&) const { return 3; }

QVariant RunTreeModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid()) return {};
  const Item* it = static_cast<Item*>(index.internalPointer());
  switch (role) {
    case Qt::DisplayRole:
      if (index.column() == 0) return it->text;
      if (index.column() == 1) return it->compiles;
      return it->status;
    case Qt::ToolTipRole: return it->tooltip;
    case Qt::BackgroundRole: return index.column() == 2 ? QVariant(statusColour(it->status)) : QVariant();
    case Qt::DecorationRole:  // a status square beside the name, visible when the tree is narrow
      return index.column() == 0 && it->kind != "root" ? QVariant(statusColour(it->status)) : QVariant();
    case kRowIdRole: return static_cast<qlonglong>(it->id);
    case kKindRole: return it->kind;
    default: return {};
  }
}

QVariant RunTreeModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* kHeaders[] = {"code that compiled", "compiles", "status"};
  return kHeaders[section];
}

QModelIndex RunTreeModel::frameIndex(RowId frameId) const {
  for (const auto& run : root_->children)
    for (const auto& file : run->children)
      for (const auto& frame : file->children)
        if (frame->id == frameId) return createIndex(frame->row(), 0, frame.get());
  return {};
}

QModelIndex RunTreeModel::findFrame(const QString& name) const {
  for (const auto& run : root_->children)
    for (const auto& file : run->children)
      for (const auto& frame : file->children)
        if (qs(frame->frame.name).contains(name)) return createIndex(frame->row(), 0, frame.get());
  return {};
}

const storage::FrameRecord* RunTreeModel::frame(const QModelIndex& index) const {
  if (!index.isValid()) return nullptr;
  const Item* it = static_cast<Item*>(index.internalPointer());
  return it->kind == "frame" ? &it->frame : nullptr;
}

// ---------------------------------------------------------------- RecordTable

int RecordTable::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(cells_.size());
}
int RecordTable::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(headers_.size());
}
QVariant RecordTable::headerData(int section, Qt::Orientation o, int role) const {
  if (o == Qt::Horizontal && role == Qt::DisplayRole && section < headers_.size()) return headers_[section];
  return {};
}
QVariant RecordTable::data(const QModelIndex& index, int role) const {
  if (!index.isValid()) return {};
  const Cell& c = cells_[static_cast<size_t>(index.row())][static_cast<size_t>(index.column())];
  switch (role) {
    case Qt::DisplayRole: return c.text;
    case Qt::ToolTipRole: return c.tooltip.isEmpty() ? c.text : c.tooltip;
    case Qt::BackgroundRole: return c.background.isValid() ? QVariant(c.background) : QVariant();
    case kRowIdRole: return ids_[static_cast<size_t>(index.row())];
    case kIndexRole:
      return static_cast<size_t>(index.row()) < extra_.size() ? extra_[static_cast<size_t>(index.row())] : 0;
    default: return {};
  }
}
void RecordTable::setRows(QStringList headers, std::vector<std::vector<Cell>> cells,
                          std::vector<qlonglong> ids, std::vector<int> extra) {
  beginResetModel();
  headers_ = std::move(headers);
  cells_ = std::move(cells);
  ids_ = std::move(ids);
  extra_ = std::move(extra);
  endResetModel();
}

// ---------------------------------------------------------------- tables of a compile

FrameCompiles readFrameCompiles(const storage::TraceReader& reader, RowId frameId) {
  FrameCompiles out;
  out.frameId = frameId;
  if (!frameId) return out;
  out.compiles = reader.compilesOfFrame(frameId);
  for (const storage::CompileRecord& c : out.compiles) {
    out.graphCounts.push_back(reader.graphs(c.id).size());
    out.breakCounts.push_back(reader.graphBreaks(c.id).size());
  }
  return out;
}

CompileContents readCompileContents(const storage::TraceReader& reader, RowId compileId) {
  CompileContents out;
  out.compileId = compileId;
  if (!compileId) return out;
  out.graphs = reader.graphs(compileId);
  for (storage::GraphRecord& g : out.graphs) std::string().swap(g.serialized);  // not shown here
  out.artifacts = reader.artifactsOfCompile(compileId);
  out.aot = aotRecords(out.artifacts);
  out.breaks = reader.graphBreaks(compileId);
  out.guards = reader.guards(compileId);
  out.details = compileDetailsText(out.artifacts);
  return out;
}

void CompilesModel::setFrame(const storage::TraceReader& reader, RowId frameId) {
  setFrame(readFrameCompiles(reader, frameId));
}

void CompilesModel::setFrame(const FrameCompiles& data) {
  compiles_ = data.compiles;
  std::vector<std::vector<Cell>> rows;
  std::vector<qlonglong> ids;
  for (size_t i = 0; i < compiles_.size(); ++i) {
    const storage::CompileRecord& c = compiles_[i];
    QStringList phases;
    for (const storage::CompilePhase& p : c.phases) phases << qs(p.name) + " " + ms(p.durationUs);
    const bool entry = storage::compileMadeEntry(c);
    rows.push_back({{QString("#%1").arg(c.attempt), {}, {}},
                    {qs(c.status), {}, statusColour(qs(c.status) == "ok" && c.attempt > 0 ? "recompiled" : qs(c.status))},
                    {qs(c.reason), qs(c.reason), {}},
                    {ms(c.durationUs), {}, {}},
                    {phases.join(", "), {}, {}},
                    {entry ? QString("entry %1").arg(c.id) : QString("none"), {}, {}},
                    {QString::number(data.graphCounts[i]), {}, {}},
                    {QString::number(data.breakCounts[i]), {}, {}}});
    ids.push_back(c.id);
  }
  setRows({"attempt", "status", "reason", "ms", "phases (ms)", "cache entry", "graphs", "breaks"},
          std::move(rows), std::move(ids));
}

void GraphsModel::setCompile(const storage::TraceReader& reader, RowId compileId) {
  setCompile(std::make_shared<const CompileContents>(readCompileContents(reader, compileId)));
}

void GraphsModel::setCompile(std::shared_ptr<const CompileContents> data) {
  data_ = std::move(data);
  const RowId compileId = data_->compileId;
  std::vector<std::vector<Cell>> rows;
  std::vector<qlonglong> ids;
  std::vector<int> indexes;
  for (const storage::GraphRecord& g : data_->graphs) {
    QStringList in, out;
    for (const std::string& s : g.inputs) in << qs(s);
    for (const std::string& s : g.outputs) out << qs(s);
    rows.push_back({{QString("graph %1").arg(g.index), {}, {}},
                    {QString::number(g.numNodes), {}, {}},
                    {QString::number(g.inputs.size()), in.join(", "), {}},
                    {out.join(", "), {}, {}}});
    ids.push_back(compileId);
    indexes.push_back(g.index);
  }
  for (const AotRecord& r : data_->aot) {
    const QString note = r.fallback.empty() ? qs(r.summary) : "runs on the eager runner: " + qs(r.fallback);
    for (const AotGraphRef& g : r.graphs) {
      rows.push_back({{qs(graphIndexLabel(g.index)), qs(r.backend), {}},
                      {QString("%1 of JSON").arg(qs(formatBytes(static_cast<std::int64_t>(g.bytes)))), {}, {}},
                      {g.kind == AotGraphKind::kBackward ? QString("saved values, tangents") : QString("primals"), {}, {}},
                      {note, note, {}}});
      ids.push_back(compileId);
      indexes.push_back(g.index);
    }
  }
  setRows({"graph", "size (recorded)", "inputs", "outputs"}, std::move(rows), std::move(ids), std::move(indexes));
}

void BreaksModel::setCompile(const storage::TraceReader& reader, RowId compileId) {
  CompileContents data;
  if (compileId) data.breaks = reader.graphBreaks(compileId);
  setCompile(data);
}

void BreaksModel::setCompile(const CompileContents& data) {
  breaks_ = data.breaks;
  std::vector<std::vector<Cell>> rows;
  std::vector<qlonglong> ids;
  for (const storage::GraphBreakRecord& b : breaks_) {
    rows.push_back({{qs(b.kind), {}, statusColour("graph break")},
                    {qs(b.location.str()), qs(b.location.file), {}},
                    {qs(b.location.sourceLine), {}, {}},
                    {qs(b.explanation), qs(b.explanation), {}},
                    {joinHints(b.hints), joinHints(b.hints, "\n"), {}}});
    ids.push_back(b.id);
  }
  setRows({"kind", "where", "source line", "explanation", "hints"}, std::move(rows), std::move(ids));
}

void GuardsModel::setCompile(const storage::TraceReader& reader, RowId compileId) {
  CompileContents data;
  if (compileId) data.guards = reader.guards(compileId);
  setCompile(data);
}

void GuardsModel::setCompile(const CompileContents& data) {
  guards_ = data.guards;
  std::vector<std::vector<Cell>> rows;
  std::vector<qlonglong> ids;
  for (const storage::GuardRecord& g : guards_) {
    rows.push_back({{qs(g.kind), {}, {}},
                    {qs(g.source), {}, {}},
                    {qs(g.checks), qs(g.checks), {}},
                    {qs(g.location.str()), qs(g.location.sourceLine), {}}});
    ids.push_back(g.id);
  }
  setRows({"kind", "value", "checks", "created at"}, std::move(rows), std::move(ids));
}

void FailuresModel::setCompile(const profiler::ProfileReport& report, const storage::CompileRecord& compile) {
  failures_.clear();
  for (const profiler::RunProfile& run : report.runs)
    for (const profiler::FunctionProfile& f : run.functions)
      for (const profiler::Recompile& r : f.recompiles)
        if (r.compileId == compile.id) failures_ = r.failures;
  std::vector<std::vector<Cell>> rows;
  std::vector<qlonglong> ids;
  for (const profiler::GuardFailureInfo& g : failures_) {
    rows.push_back({{QString("entry %1").arg(g.failedEntry), {}, {}},
                    {qs(g.guardKind), {}, {}},
                    {qs(g.source), {}, {}},
                    {qs(g.property) + (g.dim >= 0 ? QString(" [dim %1]").arg(g.dim) : QString()), {}, {}},
                    {qs(g.expected), {}, {}},
                    {qs(g.seen), {}, statusColour("recompiled")},
                    {qs(g.createdAt.str()), qs(g.createdAt.sourceLine), {}},
                    {qs(g.reason), qs(g.reason), {}}});
    ids.push_back(g.failedEntry);
  }
  setRows({"failed entry", "guard", "value", "what", "expected", "seen", "guard created at", "reason"},
          std::move(rows), std::move(ids));
}

// ---------------------------------------------------------------- store-wide views

std::vector<BreakSite> computeBreakSites(const storage::TraceReader& reader,
                                         const explain::ExplainReport& report) {
  std::vector<BreakSite> sites_;
  for (const explain::RunExplain& run : report.runs) {
    const std::vector<storage::CompileRecord> compiles = reader.compilesOfRun(run.run.id);
    std::map<RowId, const storage::FrameRecord*> frameOf;
    const std::vector<storage::FrameRecord> frames = reader.frames(run.run.id);
    for (const storage::FrameRecord& f : frames) frameOf[f.id] = &f;
    for (const explain::BreakGroup& g : run.breaks) {
      BreakSite site;
      site.group = g;
      for (const storage::CompileRecord& c : compiles)
        for (const storage::GraphBreakRecord& b : reader.graphBreaks(c.id))
          if (b.kind == g.kind && b.location.file == g.location.file && b.location.line == g.location.line) {
            site.compiles.push_back(c.id);
            break;
          }
      if (!site.compiles.empty()) {
        const RowId first = site.compiles.front();
        const std::vector<storage::GraphRecord> before = reader.graphs(first);
        if (!before.empty()) {
          site.graphBefore = first;
          site.graphBeforeIndex = before.back().index;
        }
        // The graph after: the next compile of a resume function of the same file.
        const storage::CompileRecord* breaking = nullptr;
        for (const storage::CompileRecord& c : compiles)
          if (c.id == first) breaking = &c;
        const std::string file = breaking && frameOf.count(breaking->frameId) ? frameOf[breaking->frameId]->file : "";
        for (const storage::CompileRecord& c : compiles) {
          if (c.id <= first || !frameOf.count(c.frameId)) continue;
          const storage::FrameRecord* f = frameOf[c.frameId];
          if (f->file != file || f->name.rfind("<resume in", 0) != 0) continue;
          const std::vector<storage::GraphRecord> after = reader.graphs(c.id);
          if (after.empty()) continue;
          site.graphAfter = c.id;
          site.graphAfterIndex = after.front().index;
          break;
        }
      }
      sites_.push_back(std::move(site));
    }
  }
  return sites_;
}

void BreakGroupsModel::setSites(std::vector<BreakSite> sites) {
  sites_ = std::move(sites);
  std::vector<std::vector<Cell>> rows;
  std::vector<qlonglong> ids;
  for (const BreakSite& s : sites_) {
    const explain::BreakGroup& g = s.group;
    rows.push_back({{qs(g.kind), {}, statusColour("graph break")},
                    {qs(g.location.str()), qs(g.location.file), {}},
                    {QString::number(g.occurrences), {}, {}},
                    {QString::number(g.compiles), {}, {}},
                    {qs(g.location.sourceLine), {}, {}},
                    {qs(g.explanation), qs(g.explanation), {}}});
    ids.push_back(s.compiles.empty() ? 0 : s.compiles.front());
  }
  setRows({"kind", "where", "occurrences", "compiles", "source line", "explanation"}, std::move(rows),
          std::move(ids));
}

void RecompilesModel::reload(const profiler::ProfileReport& report) {
  beginResetModel();
  functions_.clear();
  for (const profiler::RunProfile& run : report.runs)
    for (const profiler::FunctionProfile& f : run.functions)
      if (!f.recompiles.empty()) functions_.push_back(f);
  endResetModel();
}

QModelIndex RecompilesModel::index(int row, int column, const QModelIndex& parent) const {
  if (column < 0 || column >= 7 || row < 0) return {};
  if (!parent.isValid()) {
    if (static_cast<size_t>(row) >= functions_.size()) return {};
    return createIndex(row, column, quintptr(0));
  }
  if (parent.internalId() != 0) return {};
  const auto& f = functions_[static_cast<size_t>(parent.row())];
  if (static_cast<size_t>(row) >= f.recompiles.size()) return {};
  return createIndex(row, column, quintptr(parent.row() + 1));
}

QModelIndex RecompilesModel::parent(const QModelIndex& child) const {
  if (!child.isValid() || child.internalId() == 0) return {};
  return createIndex(static_cast<int>(child.internalId() - 1), 0, quintptr(0));
}

int RecompilesModel::rowCount(const QModelIndex& parent) const {
  if (!parent.isValid()) return static_cast<int>(functions_.size());
  if (parent.internalId() != 0 || parent.column() != 0) return 0;
  return static_cast<int>(functions_[static_cast<size_t>(parent.row())].recompiles.size());
}

int RecompilesModel::columnCount(const QModelIndex&) const { return 7; }

const profiler::FunctionProfile* RecompilesModel::function(const QModelIndex& index) const {
  if (!index.isValid()) return nullptr;
  const size_t f = index.internalId() == 0 ? static_cast<size_t>(index.row()) : index.internalId() - 1;
  return f < functions_.size() ? &functions_[f] : nullptr;
}

const profiler::Recompile* RecompilesModel::recompile(const QModelIndex& index) const {
  if (!index.isValid() || index.internalId() == 0) return nullptr;
  const auto* f = function(index);
  return f ? &f->recompiles[static_cast<size_t>(index.row())] : nullptr;
}

QVariant RecompilesModel::data(const QModelIndex& index, int role) const {
  const profiler::FunctionProfile* f = function(index);
  if (!f) return {};
  const profiler::Recompile* r = recompile(index);
  if (role == kRowIdRole) return static_cast<qlonglong>(r ? r->compileId : 0);
  if (role == Qt::BackgroundRole && index.column() == 1)
    return statusColour(r ? (r->status == "cache_limit" ? "cache limit" : "recompiled") : "recompiled");
  if (role != Qt::DisplayRole && role != Qt::ToolTipRole) return {};
  if (!r) {
    switch (index.column()) {
      case 0: return QString("%1 (%2:%3)").arg(qs(f->name), QFileInfo(qs(f->file)).fileName()).arg(f->firstLine);
      case 1: return QString("%1 recompile(s)").arg(f->recompileCount());
      case 6: return f->suggestions.empty() ? QString() : qs(f->suggestions.front().message);
      default: return {};
    }
  }
  const profiler::GuardFailureInfo* g = r->failures.empty() ? nullptr : &r->failures.front();
  switch (index.column()) {
    case 0: return QString("compile #%1").arg(r->attempt);
    case 1: return qs(r->status);
    case 2: return g ? qs(g->guardKind + " " + g->source + " " + g->property) : QString("(reason not recorded)");
    case 3: return g ? qs(g->expected) : QString();
    case 4: return g ? qs(g->seen) : QString();
    case 5: return g ? qs(g->createdAt.str()) : QString();
    case 6: {
      for (const profiler::Suggestion& s : f->suggestions)
        if (g && s.where.file == g->createdAt.file && s.where.line == g->createdAt.line) return qs(s.message);
      return f->suggestions.empty() ? QString() : qs(f->suggestions.front().message);
    }
    default: return {};
  }
}

QVariant RecompilesModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* kHeaders[] = {"function / compile", "status", "failing guard", "expected",
                                   "seen", "guard created at", "suggestion"};
  return kHeaders[section];
}

}  // namespace dynamo::gui

// TraceReader: read-only queries over a trace store (schema versions 1..kSchemaVersion).
#include "dynamo/storage/trace_reader.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <sstream>
#include <tuple>

#include "dynamo/common/compile_status.h"
#include "dynamo/common/error.h"
#include "dynamo/storage/crash_marker.h"
#include "dynamo/storage/trace_store.h"
#include "store_file.h"
#include "string_list.h"

namespace dynamo::storage {

struct TraceReader::Impl {
  std::string path;
  int version = 0;
  mutable sql::Database db;

  // A list column that fails to parse is damage, reported with the file and the row.
  std::vector<std::string> list(const sql::Statement& s, int column, const char* what,
                                RowId id) const {
    std::vector<std::string> out;
    if (!decodeStringList(s.columnText(column), out))
      throw UserError(UserErrorKind::kTraceStore,
                      detail::concat("trace store '", path, "': malformed ", what, " in row ", id),
                      SourceLocation{}, "the column should hold a JSON array of strings",
                      "the file was changed by another program; write a new trace");
    return out;
  }

  template <typename Fn>
  void query(const char* sqlText, RowId param, Fn&& onRow) const {
    sql::Statement s(db, sqlText);
    if (param != 0) s.bind(1, param);
    while (s.step()) onRow(s);
  }
};

TraceReader::TraceReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TraceReader::~TraceReader() = default;

std::unique_ptr<TraceReader> TraceReader::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->db = openStoreForReading(path, impl->version);
  // Rows a writer that died had persisted (TraceWriter::persist) but not committed: like SQLite
  // rolling back a hot journal, the reader inserts them (row_journal.h), on a connection of its
  // own, before reading. Nothing changes when no journal of a dead writer lies beside the store.
  if (hasRowJournals(path)) {
    try {
      sql::Database rw(path, SQLITE_OPEN_READWRITE, 30000);
      recoverRowJournals(rw, path, impl->version);
    } catch (const std::exception&) {
      // A read-only directory or file: the rows stay in the journal for a writer to recover.
    }
  }
  return std::unique_ptr<TraceReader>(new TraceReader(std::move(impl)));
}

const std::string& TraceReader::path() const { return impl_->path; }
int TraceReader::schemaVersion() const { return impl_->version; }

std::vector<RunRecord> TraceReader::runs() const {
  // Version 1 files have no rank / world_size columns: read the defaults v2 would give them.
  const char* sqlText = impl_->version >= 2
      ? "SELECT run_id, pid, hostname, argv, python_version, torch_version, dynamo_version, "
        "rank, world_size, start_time_us, end_time_us FROM runs ORDER BY run_id"
      : "SELECT run_id, pid, hostname, argv, python_version, torch_version, dynamo_version, "
        "-1, 0, start_time_us, end_time_us FROM runs ORDER BY run_id";
  std::vector<RunRecord> out;
  impl_->query(sqlText, 0, [&](const sql::Statement& s) {
    RunRecord r;
    r.id = s.columnInt(0);
    r.pid = s.columnInt(1);
    r.hostname = s.columnText(2);
    r.argv = impl_->list(s, 3, "runs.argv", r.id);
    r.pythonVersion = s.columnText(4);
    r.torchVersion = s.columnText(5);
    r.dynamoVersion = s.columnText(6);
    r.rank = static_cast<int>(s.columnInt(7));
    r.worldSize = static_cast<int>(s.columnInt(8));
    r.startTimeUs = s.columnInt(9);
    r.endTimeUs = s.columnInt(10);
    out.push_back(std::move(r));
  });
  for (RunRecord& r : out)
    if (r.endTimeUs == 0) readCrash(r);
  return out;
}

// A run that did not close: its merged "dynamo.crash" artifact, else a marker file beside the
// store that no writer has merged yet (reading never changes the file or removes the marker).
void TraceReader::readCrash(RunRecord& run) const {
  std::optional<CrashMarker> marker;
  impl_->query("SELECT data FROM artifacts WHERE run_id = ?1 AND name = 'dynamo.crash' "
               "ORDER BY artifact_id LIMIT 1",
               run.id, [&](const sql::Statement& s) { marker = parseCrashMarker(s.columnText(0)); });
  if (!marker) {
    std::ifstream in(crashMarkerPath(impl_->path, run.id), std::ios::binary);
    if (in) marker = parseCrashMarker(std::string(std::istreambuf_iterator<char>(in), {}));
  }
  if (!marker || marker->runId != run.id) return;
  run.crash.signal = marker->signal;
  run.crash.stage = std::string(crashStageName(marker->stage));
  run.crash.timeUs = marker->timeUs;
  if (marker->compileId == 0) return;
  impl_->query("SELECT c.compile_id, c.attempt, f.name, f.file, f.first_line FROM compiles c "
               "LEFT JOIN frames f ON f.frame_id = c.frame_id WHERE c.compile_id = ?1",
               marker->compileId, [&](const sql::Statement& s) {
                 run.crash.compileId = s.columnInt(0);
                 run.crash.attempt = static_cast<int>(s.columnInt(1));
                 run.crash.frameName = s.columnText(2);
                 run.crash.frameFile = s.columnText(3);
                 run.crash.frameLine = static_cast<int>(s.columnInt(4));
               });
}

std::vector<FrameRecord> TraceReader::frames(RowId runId) const {
  std::vector<FrameRecord> out;
  // A run's rows have ids (run << 32) | seq (see "Ids" in docs/trace-store.md): a key range, no
  // index (v3 dropped the by-run ones, which cost every compile's commit a page each).
  impl_->query("SELECT frame_id, run_id, file, first_line, name FROM frames WHERE frame_id "
               "BETWEEN (?1 << 32) AND ((?1 << 32) | 4294967295) AND run_id = ?1 "
               "ORDER BY frame_id",
               runId, [&](const sql::Statement& s) {
                 out.push_back({s.columnInt(0), s.columnInt(1), s.columnText(2),
                                static_cast<int>(s.columnInt(3)), s.columnText(4)});
               });
  return out;
}

namespace {
const char* kCompileColumns =
    "SELECT compile_id, run_id, frame_id, attempt, status, reason, start_time_us, duration_us "
    "FROM compiles ";
}  // namespace

static std::vector<CompileRecord> readCompiles(const TraceReader::Impl& impl, const char* where,
                                               RowId param) {
  std::string sqlText = std::string(kCompileColumns) + where;
  std::vector<CompileRecord> out;
  impl.query(sqlText.c_str(), param, [&](const sql::Statement& s) {
    CompileRecord c;
    c.id = s.columnInt(0);
    c.runId = s.columnInt(1);
    c.frameId = s.columnInt(2);
    c.attempt = static_cast<int>(s.columnInt(3));
    c.status = s.columnText(4);
    c.reason = s.columnText(5);
    c.startTimeUs = s.columnInt(6);
    c.durationUs = s.columnInt(7);
    out.push_back(std::move(c));
  });
  sql::Statement phases(impl.db, "SELECT name, duration_us FROM compile_phases "
                                 "WHERE compile_id = ?1 ORDER BY seq");
  for (CompileRecord& c : out) {
    phases.bind(1, c.id);
    while (phases.step()) c.phases.push_back({phases.columnText(0), phases.columnInt(1)});
    phases.reset();
  }
  return out;
}

std::vector<CompileRecord> TraceReader::compilesOfFrame(RowId frameId) const {
  return readCompiles(*impl_, "WHERE frame_id = ?1 ORDER BY attempt, compile_id", frameId);
}

std::vector<CompileRecord> TraceReader::compilesOfRun(RowId runId) const {
  return readCompiles(*impl_,
                      "WHERE compile_id BETWEEN (?1 << 32) AND ((?1 << 32) | 4294967295) "
                      "AND run_id = ?1 ORDER BY compile_id",
                      runId);
}

std::vector<GraphRecord> TraceReader::graphs(RowId compileId) const {
  std::vector<GraphRecord> out;
  impl_->query("SELECT graph_id, run_id, compile_id, graph_index, format, serialized, printed, "
               "num_nodes, inputs, outputs FROM graphs WHERE compile_id = ?1 "
               "ORDER BY graph_index, graph_id",
               compileId, [&](const sql::Statement& s) {
                 GraphRecord g;
                 g.id = s.columnInt(0);
                 g.runId = s.columnInt(1);
                 g.compileId = s.columnInt(2);
                 g.index = static_cast<int>(s.columnInt(3));
                 g.format = s.columnText(4);
                 g.serialized = s.columnText(5);
                 g.printed = s.columnText(6);
                 g.numNodes = static_cast<int>(s.columnInt(7));
                 g.inputs = impl_->list(s, 8, "graphs.inputs", g.id);
                 g.outputs = impl_->list(s, 9, "graphs.outputs", g.id);
                 out.push_back(std::move(g));
               });
  return out;
}

std::vector<GraphBreakRecord> TraceReader::graphBreaks(RowId compileId) const {
  std::vector<GraphBreakRecord> out;
  const char* sqlText =
      impl_->version >= 3
          ? "SELECT break_id, run_id, compile_id, kind, user_file, user_line, source_line, "
            "explanation, hints, user_stack, detail FROM graph_breaks WHERE compile_id = ?1 "
            "ORDER BY break_id"
          : "SELECT break_id, run_id, compile_id, kind, user_file, user_line, source_line, "
            "explanation, hints, user_stack FROM graph_breaks WHERE compile_id = ?1 "
            "ORDER BY break_id";
  bool hasDetail = impl_->version >= 3;
  impl_->query(sqlText, compileId, [&](const sql::Statement& s) {
                 GraphBreakRecord b;
                 b.id = s.columnInt(0);
                 b.runId = s.columnInt(1);
                 b.compileId = s.columnInt(2);
                 b.kind = s.columnText(3);
                 b.location = {s.columnText(4), static_cast<int>(s.columnInt(5)),
                               s.columnText(6)};
                 b.explanation = s.columnText(7);
                 b.hints = impl_->list(s, 8, "graph_breaks.hints", b.id);
                 b.userStack = impl_->list(s, 9, "graph_breaks.user_stack", b.id);
                 if (hasDetail) b.detail = s.columnText(10);
                 out.push_back(std::move(b));
               });
  return out;
}

bool compileMadeEntry(const CompileRecord& c) { return compileStatusNameMadeEntry(c.status); }

void BreakTally::add(const CompileRecord& c, const GraphBreakRecord& b, const EntryHits& hits) {
  std::int64_t n = 1;
  if (compileMadeEntry(c)) {
    auto it = hits.byCompile.find(c.id);
    if (it != hits.byCompile.end()) n += it->second;
  }
  std::vector<std::string> callers;
  if (!b.userStack.empty()) callers.assign(b.userStack.rbegin() + 1, b.userStack.rend());
  passes_[callers] += n;
  ++records_;
}

void BreakTally::merge(const BreakTally& other) {
  for (const auto& [callers, n] : other.passes_) passes_[callers] += n;
  records_ += other.records_;
}

namespace {

using ChainPasses = std::map<std::vector<std::string>, std::int64_t>;

// The passes through the chain that [first, last) share as their first `depth` callers: the
// larger of the records of exactly that chain (the map orders it first) and the sum over the
// longer chains one caller further out.
std::int64_t chainPasses(ChainPasses::const_iterator first, ChainPasses::const_iterator last,
                         size_t depth) {
  std::int64_t own = 0;
  if (first != last && first->first.size() == depth) own = (first++)->second;
  std::int64_t callers = 0;
  while (first != last) {
    const std::string& next = first->first[depth];
    auto end = std::find_if(first, last, [&](const auto& e) { return e.first[depth] != next; });
    callers += chainPasses(first, end, depth + 1);
    first = end;
  }
  return std::max(own, callers);
}

}  // namespace

std::int64_t BreakTally::occurrences() const {
  return std::max<std::int64_t>(chainPasses(passes_.begin(), passes_.end(), 0), 1);
}

EntryHits TraceReader::entryHits(RowId runId) const {
  EntryHits hits;
  if (impl_->version >= 3) {
    impl_->query("SELECT compile_id, hits FROM cache_entry_hits WHERE run_id = ?1", runId,
                 [&](const sql::Statement& s) {
                   hits.recorded = true;
                   hits.byCompile[s.columnInt(0)] = s.columnInt(1);
                 });
    if (hits.recorded) return hits;
  }
  // Schema v1-v2 (and v3 files written by a build before the table): the artifact.
  for (const ArtifactRecord& a : artifacts(runId)) {
    if (a.name != kEntryHitsArtifact) continue;
    hits.recorded = true;
    hits.byCompile.clear();
    std::istringstream in(a.data);
    RowId compileId = 0;
    std::int64_t count = 0;
    while (in >> compileId >> count) hits.byCompile[compileId] = count;
  }
  return hits;
}

std::vector<GraphBreakGroup> TraceReader::graphBreakGroups(RowId runId) const {
  // Per run: the sites in first-seen order with their tallies; then summed over the runs.
  std::vector<GraphBreakGroup> out;
  auto find = [](std::vector<GraphBreakGroup>& groups, const GraphBreakRecord& b) {
    return std::find_if(groups.begin(), groups.end(), [&](const GraphBreakGroup& g) {
      return g.kind == b.kind && g.location.file == b.location.file &&
             g.location.line == b.location.line;
    });
  };
  for (const RunRecord& run : runs()) {
    if (runId != 0 && run.id != runId) continue;
    EntryHits hits = entryHits(run.id);
    std::vector<GraphBreakGroup> groups;
    std::vector<BreakTally> tallies;
    for (const CompileRecord& c : compilesOfRun(run.id)) {
      for (const GraphBreakRecord& b : graphBreaks(c.id)) {
        auto it = find(groups, b);
        if (it == groups.end()) {
          groups.push_back({b.kind, b.location, b.explanation, b.hints, 0, 0});
          tallies.emplace_back();
          it = groups.end() - 1;
        }
        tallies[static_cast<size_t>(it - groups.begin())].add(c, b, hits);
      }
    }
    for (size_t i = 0; i < groups.size(); ++i) {
      GraphBreakRecord site;
      site.kind = groups[i].kind;
      site.location = groups[i].location;
      auto it = find(out, site);
      if (it == out.end()) {
        out.push_back(groups[i]);
        it = out.end() - 1;
      }
      it->count += tallies[i].occurrences();
      it->records += tallies[i].records();
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const GraphBreakGroup& a, const GraphBreakGroup& b) {
    return std::tie(b.count, a.kind, a.location.file, a.location.line) <
           std::tie(a.count, b.kind, b.location.file, b.location.line);
  });
  return out;
}

std::vector<GuardRecord> TraceReader::guards(RowId compileId) const {
  std::vector<GuardRecord> out;
  impl_->query("SELECT guard_id, run_id, compile_id, kind, checks, source, user_file, user_line, "
               "source_line FROM guards WHERE compile_id = ?1 ORDER BY guard_id",
               compileId, [&](const sql::Statement& s) {
                 GuardRecord g;
                 g.id = s.columnInt(0);
                 g.runId = s.columnInt(1);
                 g.compileId = s.columnInt(2);
                 g.kind = s.columnText(3);
                 g.checks = s.columnText(4);
                 g.source = s.columnText(5);
                 g.location = {s.columnText(6), static_cast<int>(s.columnInt(7)),
                               s.columnText(8)};
                 out.push_back(std::move(g));
               });
  return out;
}

static std::vector<GuardFailureRecord> readFailures(const TraceReader::Impl& impl,
                                                    const char* where, RowId param) {
  bool structured = impl.version >= 3;
  std::string sqlText =
      std::string("SELECT failure_id, run_id, compile_id, frame_id, guard_id, time_us, reason") +
      (structured ? ", guard_kind, guard_source, property, dim, expected, seen, user_file, "
                    "user_line, source_line, caused_compile_id "
                  : " ") +
      "FROM guard_failures " + where;
  std::vector<GuardFailureRecord> out;
  sql::Statement s(impl.db, sqlText.c_str());
  s.bindIdOrNull(1, param);
  while (s.step()) {
    GuardFailureRecord f;
    f.id = s.columnInt(0);
    f.runId = s.columnInt(1);
    f.compileId = s.columnInt(2);
    f.frameId = s.columnInt(3);
    f.guardId = s.columnInt(4);
    f.timeUs = s.columnInt(5);
    f.reason = s.columnText(6);
    if (structured) {
      f.guardKind = s.columnText(7);
      f.guardSource = s.columnText(8);
      f.property = s.columnText(9);
      f.dim = static_cast<int>(s.columnInt(10));
      f.expected = s.columnText(11);
      f.seen = s.columnText(12);
      f.location = {s.columnText(13), static_cast<int>(s.columnInt(14)), s.columnText(15)};
      f.causedCompileId = s.columnInt(16);
    }
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<GuardFailureRecord> TraceReader::guardFailures(RowId runId) const {
  if (runId == 0) return readFailures(*impl_, "WHERE ?1 IS NULL ORDER BY time_us, failure_id", 0);
  return readFailures(*impl_,
                      "WHERE failure_id BETWEEN (?1 << 32) AND ((?1 << 32) | 4294967295) "
                      "AND run_id = ?1 ORDER BY time_us, failure_id",
                      runId);
}

std::vector<GuardFailureRecord> TraceReader::guardFailuresOfCompile(RowId compileId) const {
  return readFailures(*impl_, "WHERE compile_id = ?1 ORDER BY time_us, failure_id", compileId);
}

std::vector<CodeRecord> TraceReader::code(RowId runId, RowId compileId) const {
  std::vector<CodeRecord> out;
  sql::Statement s(impl_->db, "SELECT code_id, run_id, compile_id, kind, name, content FROM code "
                              "WHERE run_id = ?1 AND compile_id IS ?2 ORDER BY code_id");
  s.bind(1, runId).bindIdOrNull(2, compileId);
  while (s.step()) {
    CodeRecord c;
    c.id = s.columnInt(0);
    c.runId = s.columnInt(1);
    c.compileId = s.columnInt(2);
    std::string kind = s.columnText(3);
    c.kind = codeKindFromName(kind).value_or(CodeKind::kOther);
    c.name = s.columnText(4);
    c.content = s.columnText(5);
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<ArtifactRecord> TraceReader::artifacts(RowId runId) const {
  std::vector<ArtifactRecord> out;
  impl_->query("SELECT artifact_id, run_id, compile_id, name, media_type, data, time_us "
               "FROM artifacts WHERE run_id = ?1 ORDER BY artifact_id",
               runId, [&](const sql::Statement& s) {
                 out.push_back({s.columnInt(0), s.columnInt(1), s.columnInt(2), s.columnText(3),
                                s.columnText(4), s.columnText(5), s.columnInt(6)});
               });
  return out;
}

std::vector<ArtifactRecord> TraceReader::artifactsOfCompile(RowId compileId) const {
  // Artifacts are indexed by run: look the compile's run up first.
  std::vector<ArtifactRecord> out;
  impl_->query("SELECT artifact_id, run_id, compile_id, name, media_type, data, time_us "
               "FROM artifacts WHERE run_id = (SELECT run_id FROM compiles WHERE compile_id = ?1) "
               "AND compile_id = ?1 ORDER BY artifact_id",
               compileId, [&](const sql::Statement& s) {
                 out.push_back({s.columnInt(0), s.columnInt(1), s.columnInt(2), s.columnText(3),
                                s.columnText(4), s.columnText(5), s.columnInt(6)});
               });
  return out;
}

StoreCounts TraceReader::counts(RowId runId) const {
  auto count = [&](const char* table) {
    std::string sqlText = detail::concat("SELECT count(*) FROM ", table,
                                         " WHERE (?1 IS NULL OR run_id = ?1)");
    sql::Statement s(impl_->db, sqlText.c_str());
    s.bindIdOrNull(1, runId);
    return s.step() ? s.columnInt(0) : 0;
  };
  StoreCounts c;
  c.runs = count("runs");
  c.frames = count("frames");
  c.compiles = count("compiles");
  c.graphs = count("graphs");
  c.graphBreaks = count("graph_breaks");
  c.guards = count("guards");
  c.guardFailures = count("guard_failures");
  c.code = count("code");
  c.artifacts = count("artifacts");
  return c;
}

std::string TraceReader::integrityCheck() const {
  std::string out;
  sql::Statement s(impl_->db, "PRAGMA integrity_check");
  while (s.step()) {
    if (!out.empty()) out += '\n';
    out += s.columnText(0);
  }
  return out;
}

}  // namespace dynamo::storage

// dynamo._C._recording, the trace store's compile sink: the compiler's records go to the trace writer in C++, with no
// Python in between (docs/trace-store.md, "What the compiler records").
//
//   core::CompileRecord --TraceSink::compiled--> storage rows --TraceWriter (queue, commit)--> file
//
//   record                     rows
//   ------                     ----
//   function, where            frames            (one per (file, first line, name) per run)
//   attempt, status, timings   compiles          (+ compile_phases: capture, guards, backend)
//   graphs[i]                  graphs            (the core's JSON serialization, printed text)
//   breaks[i]                  graph_breaks      (kind, file:line, detail, explanation, hints)
//   guards[i]                  guards
//   misses[i] (recompile)      guard_failures    (the failing guard as data, joined by id to the
//                                                 guard row, the failed entry and this compile)
//   bytecode                   code              (transformed_bytecode)
//   passes (changed ones)      artifacts         ("dynamo.passes": status, nodes removed/added;
//                                                 "dynamo.pass.input/NAME": the graph it got)
//   kernels[i] (fused backend) code + artifacts  (cpp_kernel source; "dynamo.kernel" metadata:
//                                                 graph, nodes covered, cache hit, compile time)
//   entry (weak)               cache_entry_hits  (the entry's own hit count, when the run ends)
//   BackendCompileRecord       artifacts         ("dynamo.aot_per_size": a compile per input signature;
//                                                 the fused backend's lowerings with their kernels,
//                                                 new ones as kernel rows of graph "per_size")
//
// It lives in the binding layer because it is where core and storage meet: core does not depend
// on storage (core/include/dynamo/core/compile_sink.h). dynamo.recording (Python) decides which
// store is written: it installs the sink with an opener called before a compile when no run is
// attached (DYNAMO_TRACE / dynamo.config.trace_path), so the store exists before the first
// compile's backend runs. It prints the DYNAMO_LOGS lines of each record too (log_bindings.cpp),
// before its rows. All methods hold the GIL.
#include "recording_bindings.h"

#include "bindings.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <map>
#include <tuple>
#include <unordered_map>

#include "dynamo/core/compile_sink.h"
#include "dynamo/core/graph_printer.h"
#include "dynamo/core/graph_serializer.h"
#include "dynamo/storage/trace_writer.h"
#include "log_bindings.h"
#include "py_util.h"

#include <nlohmann/json.hpp>

namespace dynamo::py {

namespace {

using storage::RowId;

std::int64_t nowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::int64_t msToUs(double ms) { return static_cast<std::int64_t>(ms * 1000.0 + 0.5); }

// A warning of category dynamo.trace.TraceWarning (RuntimeWarning when it cannot be found).
void traceWarning(const std::string& text) {
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
  PyObject* category = PyExc_RuntimeWarning;  // borrowed ref
  PyRef module = PyRef::steal(PyImport_ImportModule("dynamo.trace"));
  PyRef cls;
  if (module) cls = PyRef::steal(PyObject_GetAttrString(module.get(), "TraceWarning"));
  if (cls) category = cls.get();
  PyErr_Clear();
  if (PyErr_WarnEx(category, text.c_str(), 1) < 0) PyErr_Clear();
  PyErr_Restore(et, ev, tb);
}

// "reason\n  (guard created at ...)\nreason 2" -> one string per failed entry, continuation
// lines joined on with a space.
std::vector<std::string> reasonEntries(const std::string& reason) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= reason.size()) {
    std::size_t end = reason.find('\n', start);
    if (end == std::string::npos) end = reason.size();
    std::string line = reason.substr(start, end - start);
    start = end + 1;
    std::size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    std::string trimmed = line.substr(first);
    while (!trimmed.empty() && (trimmed.back() == ' ' || trimmed.back() == '\t')) trimmed.pop_back();
    if (first > 0 && !out.empty())
      out.back() += " " + trimmed;
    else
      out.push_back(trimmed);
  }
  return out;
}

// The compiles.reason of a record: one line ("#1 ok in 0.3ms: <reason>" in the reports).
std::string compileReason(const core::CompileRecord& r) {
  std::string out;
  for (const std::string& e : reasonEntries(r.reason)) out += (out.empty() ? "" : "; ") + e;
  if (out.empty() && r.attempt == 0) return "first call";
  return out;
}

// Leaves of a graph's output structure: node names, or the constant's text.
void outputNames(const core::Arg& a, std::vector<std::string>& out) {
  switch (a.kind()) {
    case core::ArgKind::kNode: out.push_back(a.asNode()->name()); return;
    case core::ArgKind::kTuple:
    case core::ArgKind::kList:
      for (const core::Arg& item : a.items()) outputNames(item, out);
      return;
    case core::ArgKind::kNone: out.push_back("null"); return;
    case core::ArgKind::kBool: out.push_back(a.asBool() ? "true" : "false"); return;
    case core::ArgKind::kInt: out.push_back(std::to_string(a.asInt())); return;
    case core::ArgKind::kFloat: out.push_back(std::to_string(a.asFloat())); return;
    case core::ArgKind::kStr: out.push_back("\"" + a.asString() + "\""); return;
    default: out.push_back(core::argKindName(a.kind())); return;
  }
}

storage::GraphRecord graphRow(RowId compileId, const core::CompileRecord& r, std::size_t index) {
  const core::Graph& g = r.graphs[index];
  storage::GraphRecord row;
  row.compileId = compileId;
  row.index = static_cast<int>(index);
  row.format = "dynamo.graph/" + std::to_string(core::kGraphFormatVersion);
  // Built once by the compiler for the sink and the listeners (CompileRecord::printedGraphs).
  row.serialized = index < r.serializedGraphs.size() ? r.serializedGraphs[index]
                                                     : core::serializeGraph(g);
  row.printed = index < r.printedGraphs.size() ? r.printedGraphs[index] : core::printGraph(g);
  row.numNodes = static_cast<int>(g.body().size());
  for (const core::NodeRef& n : g.inputs()) row.inputs.push_back(n->name());
  if (g.output()) outputNames(g.output()->outputValue(), row.outputs);
  return row;
}

storage::GraphBreakRecord breakRow(RowId compileId, const core::BreakRecord& b) {
  storage::GraphBreakRecord row;
  row.compileId = compileId;
  row.kind = b.kind;
  row.location = b.where;
  row.detail = b.detail;
  row.explanation = b.explanation;
  // The reports print the explanation; it leads with the detail (v3 also keeps it on its own).
  if (!b.detail.empty() && b.explanation.find(b.detail) == std::string::npos)
    row.explanation = b.explanation.empty() ? b.detail : b.detail + ": " + b.explanation;
  if (!b.hint.empty()) row.hints.push_back(b.hint);
  for (const SourceLocation& s : b.userStack) {
    std::string where = s.file + ":" + std::to_string(s.line);
    std::size_t first = s.sourceLine.find_first_not_of(" \t");
    std::string source = first == std::string::npos ? "" : s.sourceLine.substr(first);
    while (!source.empty() && (source.back() == ' ' || source.back() == '\n')) source.pop_back();
    row.userStack.push_back(source.empty() ? where : where + ": " + source);
  }
  return row;
}

storage::KernelRecord kernelRow(RowId compileId, const core::BackendKernel& k) {
  storage::KernelRecord row;
  row.compileId = compileId;
  row.kind = k.language == "cuda" ? storage::CodeKind::kCudaKernel : storage::CodeKind::kCppKernel;
  row.name = k.name;
  row.source = k.source;
  row.graph = k.graph;
  row.graphIndex = k.graphOrdinal;
  row.nodes = k.nodes;
  row.loops = k.loops;
  row.cacheKey = k.cacheKey;
  row.cacheHit = k.cacheHit;
  row.compileUs = msToUs(k.compileMs);
  row.lowerUs = msToUs(k.lowerMs);
  return row;
}

// The "dynamo.passes" artifact: for each pass that changed the graph or was disabled, a line
// "pass NAME: STATUS (A -> B nodes)", then the body nodes it removed and added, and its
// applications; "" when every pass left the graph unchanged (the common case: no row).
std::string passesText(const core::CompileRecord& r) {
  std::string out;
  for (const core::PassRecord& p : r.passes) {
    if (p.status == "unchanged") continue;
    out += "pass " + p.name + ": " + p.status + " (" + std::to_string(p.nodesBefore) + " -> " +
           std::to_string(p.nodesAfter) + " nodes)\n";
    auto names = [&out](const char* what, const std::vector<std::string>& v) {
      if (v.empty()) return;
      out += std::string("  ") + what + ":";
      for (const std::string& n : v) out += " " + n;
      out += "\n";
    };
    names("removed", p.removed);
    names("added", p.added);
    for (const core::PassApplication& a : p.applications)
      out += "  application " + std::to_string(a.index) + ": " + a.node + " (" + a.op + ")" +
             (a.where.known() ? " at " + a.where.file + ":" + std::to_string(a.where.line) : "") +
             (a.applied ? "" : " (skipped: past DYNAMO_BISECT_PASS)") + "\n";
  }
  return out;
}

class TraceSink final : public core::CompileSink {
  struct Entry;  // a cache entry this run made (below)

 public:
  // Asks dynamo.recording which run to record into (it opens DYNAMO_TRACE's run on the first
  // compile, before the backend can crash): a TraceWriter, or None for no recording.
  void compileStarting() override {
    if (writer_ && pid_ != getpid()) detach();  // the parent's run, after fork()
    pendingBackend_.clear();
    if (opener_ == nullptr) return;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyRef w = PyRef::steal(PyObject_CallNoArgs(opener_));  // new ref: a TraceWriter or None
    try {
      if (!w)
        PyErr_WriteUnraisable(opener_);
      else if (w.get() == Py_None)
        detach();
      else
        attach(writerOf(w.get()));
    } catch (const std::exception&) {
      PyErr_Clear();  // a closed writer: nothing to record into
      detach();
    }
    PyErr_Restore(et, ev, tb);
  }

  // A backend's compile for one input signature (aot_eager* with dynamic sizes): an artifact
  // "dynamo.aot_per_size" of the compile that made the entry. Those made while the entry is
  // made wait for its compile row.
  void backendCompiled(const core::BackendCompileRecord& b) override {
    if (!writer_ || pid_ != getpid()) return;
    if (b.entryId == 0) {
      pendingBackend_.push_back(b);
      return;
    }
    auto it = entries_.find(b.entryId);
    if (it == entries_.end()) return;
    try {
      recordBackendCompile(it->second.compileId, b, "call", &it->second);
    } catch (const std::exception&) {
      return;  // nothing of it reaches the store; the program goes on
    }
    if (commitMode_ != kBatch) commit();
  }

  // The fused backend's lowerings also name their kernels: "kernels" [{name, code_id, reused,
  // cache_hit, compile_ms}]; a kernel whose source an earlier lowering of the entry had (its
  // family's template made it equal: the same cache key) is "reused" and names that row, a new
  // one is written as a kernel row of graph "per_size", index = the lowering's number.
  void recordBackendCompile(RowId compileId, const core::BackendCompileRecord& b, const char* when, Entry* entry) {
    nlohmann::json doc = {{"backend", b.backend}, {"when", when}, {"signature", b.signature},
                          {"compile_ms", std::round(b.ms * 1000.0) / 1000.0}};
    nlohmann::json detail = nlohmann::json::parse(b.detailJson, nullptr, /*allow_exceptions=*/false);
    doc["aot"] = detail.is_object() ? detail : nlohmann::json();
    if (b.backend == "fused" && entry != nullptr) {
      const bool first = std::string(when) == "compile";
      const int lowering = first ? 0 : ++entry->lowerings;
      doc["lowering"] = lowering;
      doc["reason"] = b.reason;
      doc["symbols"] = b.symbols;
      if (!b.fallback.empty()) doc["fallback"] = b.fallback;
      double lowerMs = b.lowerMs;
      nlohmann::json kernels = nlohmann::json::array();
      if (first) {  // the compile's own kernels, written with it
        kernels = entry->firstKernels;
        lowerMs += entry->firstLowerMs;
      }
      for (const core::BackendKernel& k : b.kernels) {
        auto known = entry->kernelKeys.find(k.cacheKey);
        const bool reused = known != entry->kernelKeys.end();
        RowId code = reused ? known->second : 0;
        if (!reused) {
          storage::KernelRecord row = kernelRow(compileId, k);
          row.graph = "per_size";
          row.graphIndex = lowering;
          code = writer_->recordKernel(std::move(row));
          entry->kernelKeys.emplace(k.cacheKey, code);
          noteKernelRow(k, compileId, code);
        }
        kernels.push_back({{"name", k.name}, {"code_id", code}, {"reused", reused}, {"cache_hit", k.cacheHit},
                           {"compile_ms", std::round(k.compileMs * 1000.0) / 1000.0}});
      }
      doc["kernels"] = std::move(kernels);
      doc["lower_ms"] = std::round(lowerMs * 1000.0) / 1000.0;
    }
    storage::ArtifactRecord row;
    row.compileId = compileId;
    row.name = "dynamo.aot_per_size";
    row.mediaType = "application/json";
    row.data = doc.dump();
    writer_->recordArtifact(std::move(row));
  }

  bool wantsLateKernels(uint64_t entryId) override {
    return writer_ && pid_ == getpid() && entries_.count(entryId) != 0;
  }

  // The kernels of a graph an entry compiled after it was made (a training compile's backward
  // graph, at its first backward call): late rows of the compile that made the entry.
  void lateKernels(uint64_t entryId, const std::vector<core::BackendKernel>& kernels) override {
    if (!writer_ || pid_ != getpid() || kernels.empty()) return;
    auto it = entries_.find(entryId);
    if (it == entries_.end()) return;
    try {
      for (const core::BackendKernel& k : kernels)
        noteKernelRow(k, it->second.compileId, writer_->recordKernel(kernelRow(it->second.compileId, k)));
    } catch (const std::exception&) {
      return;  // nothing more of it reaches the store; the program goes on
    }
    if (commitMode_ != kBatch) commit();
  }

  // The fused backend's measured kernel run times (core::reportKernelRunTimes): one
  // "dynamo.kernel.run" artifact per kernel, written once, with the compile of its kernel row.
  void kernelRunTimes(uint64_t token, const std::vector<double>& meanUs, int calls) override {
    auto it = kernelRows_.find(token);
    if (it == kernelRows_.end()) return;
    const std::vector<std::pair<RowId, RowId>> rows = std::move(it->second);
    kernelRows_.erase(it);
    if (!writer_ || pid_ != getpid()) return;
    try {
      for (std::size_t i = 0; i < rows.size() && i < meanUs.size(); ++i) {
        if (rows[i].second == 0) continue;
        writer_->recordKernelRunTime(rows[i].first, rows[i].second, static_cast<std::int64_t>(std::llround(meanUs[i])),
                                     calls);
      }
    } catch (const std::exception&) {
      return;
    }
    if (commitMode_ != kBatch) commit();
  }

  // Which (compile, kernel code row) each reported kernel was written as, for its run time.
  void noteKernelRow(const core::BackendKernel& k, RowId compileId, RowId codeId) {
    if (k.runToken == 0 || k.runIndex < 0) return;
    std::vector<std::pair<RowId, RowId>>& rows = kernelRows_[k.runToken];
    if (rows.size() <= static_cast<std::size_t>(k.runIndex)) rows.resize(k.runIndex + 1, {0, 0});
    rows[k.runIndex] = {compileId, codeId};
  }

  void backendStarting() override {
    if (writer_) writer_->noteCrashStage(storage::CrashStage::kBackend, 0);
  }

  // A trace store keeps the listings (graph JSON and text, bytecode); a log may print them.
  bool wantsListings() override { return (writer_ && pid_ == getpid()) || logsWantListings(); }

  void compiled(const core::CompileRecord& r) override {
    logCompile(r);  // DYNAMO_LOGS, from the same record
    if (!writer_ || pid_ != getpid()) return;
    RowId compileId = 0;
    try {
      compileId = record(r);
    } catch (const std::exception& e) {
      warnOnce(warnedInternal_,
               std::string("dynamo: internal error while recording a compile into the trace "
                           "store '") + writer_->path() + "': " + e.what() +
                   ". This is a Dynamo bug; please report it. The program goes on; some "
                   "compiles may be missing from the trace.");
      return;
    }
    recordArtifacts(compileId);
    for (const core::BackendCompileRecord& b : pendingBackend_) {
      try {
        auto it = entries_.find(r.entryId);
        recordBackendCompile(compileId, b, "compile", it == entries_.end() ? nullptr : &it->second);
      } catch (const std::exception&) {
      }
    }
    pendingBackend_.clear();
    // The compiled code runs for the first time right after this: a crash there leaves a
    // marker naming this compile.
    bool ran = compileStatusMadeEntry(r.status);
    writer_->noteCrashStage(ran ? storage::CrashStage::kFirstCall : storage::CrashStage::kUnknown,
                            ran ? compileId : 0);
    if (commitMode_ != kBatch) commit();
  }

  void attach(std::shared_ptr<storage::TraceWriter> writer) {
    if (writer_ == writer) return;
    detach();
    writer_ = std::move(writer);
    pid_ = getpid();
  }

  void detach() {
    writer_.reset();
    frames_.clear();
    entries_.clear();
    kernelRows_.clear();
  }

  // Artifacts produced in Python during this compile (the AOT layer's joint, forward and
  // backward graphs): source() -> [(name, bytes, media type)], linked to the compile's row.
  void recordArtifacts(RowId compileId) {
    if (artifactSource_ == nullptr) return;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyRef items = PyRef::steal(PyObject_CallNoArgs(artifactSource_));
    if (!items) {
      PyErr_WriteUnraisable(artifactSource_);
    } else {
      PyRef seq = PyRef::steal(PySequence_Fast(items.get(), "artifact source: expected a list"));
      Py_ssize_t n = seq ? PySequence_Fast_GET_SIZE(seq.get()) : 0;
      for (Py_ssize_t i = 0; seq && i < n; ++i) {
        PyObject* item = PySequence_Fast_GET_ITEM(seq.get(), i);
        const char *name = nullptr, *media = nullptr;
        char* data = nullptr;
        Py_ssize_t size = 0;
        PyObject* bytes = nullptr;
        if (!PyArg_ParseTuple(item, "sSs", &name, &bytes, &media) ||
            PyBytes_AsStringAndSize(bytes, &data, &size) < 0) {
          PyErr_WriteUnraisable(artifactSource_);
          break;
        }
        storage::ArtifactRecord row;
        row.compileId = compileId;
        row.name = name;
        row.mediaType = media;
        row.data.assign(data, static_cast<std::size_t>(size));
        writer_->recordArtifact(std::move(row));
      }
      if (!seq) PyErr_WriteUnraisable(artifactSource_);
    }
    PyErr_Restore(et, ev, tb);
  }

  void setArtifactSource(PyObject* source) {  // borrowed ref; None: none
    Py_XINCREF(source == Py_None ? nullptr : source);
    Py_XDECREF(artifactSource_);
    artifactSource_ = source == Py_None ? nullptr : source;
  }

  void setOpener(PyObject* opener) {  // borrowed ref; None: no opener
    Py_XINCREF(opener == Py_None ? nullptr : opener);
    Py_XDECREF(opener_);
    opener_ = opener == Py_None ? nullptr : opener;
  }

  bool attachedTo(const storage::TraceWriter* w) const { return writer_.get() == w; }
  const std::shared_ptr<storage::TraceWriter>& writer() const { return writer_; }
  // What happens to a compile's rows before its code runs: nothing (they wait for the writer
  // thread's batch; only for measuring), a commit (flush), or one write to the row journal
  // (persist, the default): both survive the process ending.
  enum CommitMode { kBatch = 0, kFlush = 1, kPersist = 2 };
  void setCommitMode(int mode) { commitMode_ = mode; }
  int commitMode() const { return commitMode_; }

  // Records the hits of every live cache entry this run made; returns {compile id: hits}.
  std::map<RowId, std::int64_t> recordHits() {
    std::map<RowId, std::int64_t> out;
    if (!writer_ || pid_ != getpid()) return out;
    for (auto& [id, e] : entries_) {
      std::shared_ptr<core::CacheEntry> entry = e.entry.lock();
      if (entry) e.lastHits = static_cast<std::int64_t>(entry->hits);
      if (e.lastHits < 0) continue;  // died before it was ever counted
      out[e.compileId] = e.lastHits;
    }
    for (const auto& [compileId, hits] : out) {
      storage::CacheEntryHitsRecord row;
      row.compileId = compileId;
      row.hits = hits;
      writer_->recordCacheEntryHits(row);
    }
    return out;
  }

 private:
  struct GuardRow {
    std::string kind, source, file;
    int line = 0;
    RowId id = 0;
  };
  struct Entry {
    RowId compileId = 0;
    RowId frameId = 0;
    std::weak_ptr<core::CacheEntry> entry;
    std::vector<GuardRow> guards;
    std::int64_t lastHits = -1;
    // The fused backend's kernels of this entry by cache key (its code row), for the lowerings
    // it makes per input signature; its first lowering's kernels as the "kernels" JSON of
    // that lowering's record, and their lowering time.
    std::map<std::string, RowId> kernelKeys;
    nlohmann::json firstKernels = nlohmann::json::array();
    double firstLowerMs = 0;
    int lowerings = 0;  // lowerings made at calls so far
  };

  RowId frameId(const core::CompileRecord& r) {
    auto key = std::make_tuple(r.where.file, r.where.line, r.function);
    auto it = frames_.find(key);
    if (it != frames_.end()) return it->second;
    storage::FrameRecord row;
    row.file = r.where.file;
    row.firstLine = r.where.line;
    row.name = r.function;
    RowId id = writer_->recordFrame(std::move(row));
    frames_.emplace(std::move(key), id);
    return id;
  }

  RowId record(const core::CompileRecord& r) {
    storage::TraceWriter& w = *writer_;
    RowId frame = frameId(r);
    std::int64_t endUs = nowUs(), totalUs = msToUs(r.totalMs);
    storage::CompileRecord c;
    c.frameId = frame;
    c.attempt = r.attempt;
    c.status = std::string(compileStatusName(r.status));
    c.reason = compileReason(r);
    c.startTimeUs = endUs - totalUs;
    c.durationUs = totalUs;
    c.phases = {{"capture", msToUs(r.captureMs)},
                {"guards", msToUs(r.guardMs)},
                {"backend", msToUs(r.backendMs)}};
    RowId compileId = w.recordCompile(std::move(c));
    recordFailures(r, frame, compileId, endUs);
    for (std::size_t i = 0; i < r.graphs.size(); ++i) w.recordGraph(graphRow(compileId, r, i));
    for (const core::BreakRecord& b : r.breaks) w.recordGraphBreak(breakRow(compileId, b));
    Entry entry{compileId, frame, r.entry, {}, -1, {}, nlohmann::json::array(), 0, 0};
    for (const core::GuardInfo& g : r.guards) {
      storage::GuardRecord row;
      row.compileId = compileId;
      row.kind = g.kindName;
      row.checks = g.checked;
      row.source = g.sourceName;
      row.location = g.where;
      RowId id = w.recordGuard(std::move(row));
      entry.guards.push_back({g.kindName, g.sourceName, g.where.file, g.where.line, id});
    }
    if (!r.bytecode.empty()) {
      storage::CodeRecord code;
      code.compileId = compileId;
      code.kind = storage::CodeKind::kTransformedBytecode;
      code.name = r.function;
      code.content = r.bytecode;
      w.recordCode(std::move(code));
    }
    for (const core::BackendKernel& k : r.kernels) {
      const RowId code = w.recordKernel(kernelRow(compileId, k));
      noteKernelRow(k, compileId, code);
      if (k.graph != "dynamo" || k.graphOrdinal != 0) continue;  // a per-size lowering's reference
      entry.kernelKeys.emplace(k.cacheKey, code);
      entry.firstKernels.push_back({{"name", k.name}, {"code_id", code}, {"reused", false}, {"cache_hit", k.cacheHit},
                                    {"compile_ms", std::round(k.compileMs * 1000.0) / 1000.0}});
      entry.firstLowerMs = k.lowerMs;
    }
    if (std::string passes = passesText(r); !passes.empty()) {  // what the passes changed
      storage::ArtifactRecord a;
      a.compileId = compileId;
      a.name = "dynamo.passes";
      a.mediaType = "text/plain";
      a.data = std::move(passes);
      w.recordArtifact(std::move(a));
    }
    for (const core::PassRecord& p : r.passes) {  // the graph each changing pass got
      if (!p.input) continue;
      storage::ArtifactRecord a;
      a.compileId = compileId;
      a.name = "dynamo.pass.input/" + p.name;
      a.mediaType = "application/json";
      a.data = core::serializeGraph(*p.input);
      w.recordArtifact(std::move(a));
    }
    if (!r.dynamicShapes.empty()) {  // which dims are dynamic and the shape guards
      storage::ArtifactRecord a;
      a.compileId = compileId;
      a.name = "dynamo.dynamic_shapes";
      a.mediaType = "text/plain";
      a.data = r.dynamicShapes;
      w.recordArtifact(std::move(a));
    }
    if (compileStatusMadeEntry(r.status) && r.entryId != 0) {
      entries_[r.entryId] = std::move(entry);
    }
    return compileId;
  }

  // One guard_failures row per cache entry that missed: its first failing guard, as data.
  // Recompiles that made an entry, and cache-limit hits (the newest entry only), as before v3.
  void recordFailures(const core::CompileRecord& r, RowId frame, RowId compileId,
                      std::int64_t timeUs) {
    bool recompiled = compileStatusMadeEntry(r.status) && r.attempt > 0;
    bool limit = r.status == CompileStatus::kCacheLimit;
    if (!recompiled && !limit) return;
    for (const core::EntryMiss& miss : r.misses) {
      auto it = entries_.find(miss.entryId);
      if (it == entries_.end() || it->second.frameId != frame || miss.failures.empty()) continue;
      const core::GuardFailure& f = miss.failures.front();
      storage::GuardFailureRecord row;
      row.compileId = it->second.compileId;
      row.frameId = frame;
      row.timeUs = timeUs;
      row.reason = f.reason;
      row.guardKind = core::guardKindInfo(f.kind).name;
      row.guardSource = f.sourceName;
      row.property = f.property;
      row.dim = f.dim;
      row.expected = f.expected;
      row.seen = f.seen;
      row.location = f.where;
      row.causedCompileId = compileId;
      for (const GuardRow& g : it->second.guards) {
        if (g.kind == row.guardKind && g.source == f.sourceName && g.file == f.where.file &&
            g.line == f.where.line) {
          row.guardId = g.id;
          break;
        }
      }
      writer_->recordGuardFailure(std::move(row));
      if (limit) break;
    }
  }

  void commit() {
    std::shared_ptr<storage::TraceWriter> w = writer_;
    try {
      // On this thread: one write() to the row journal, or a commit.
      withoutGil([&] { commitMode_ == kFlush ? w->flush() : w->persist(); });
    } catch (const UserError& e) {
      warnOnce(warnedCommit_,
               "dynamo: the trace store '" + w->path() + "' lost rows: " + e.what() +
                   "; the program goes on, and later compiles are recorded when the disk allows");
    }
  }

  static void warnOnce(bool& warned, const std::string& text) {
    if (warned) return;
    warned = true;
    traceWarning(text);
  }

  std::shared_ptr<storage::TraceWriter> writer_;
  pid_t pid_ = 0;
  PyObject* opener_ = nullptr;  // strong ref, or null
  PyObject* artifactSource_ = nullptr;  // strong ref, or null
  std::map<uint64_t, std::vector<std::pair<RowId, RowId>>> kernelRows_;  // run token -> (compile, code row) per kernel
  std::vector<core::BackendCompileRecord> pendingBackend_;  // made during the compile being made
  int commitMode_ = kPersist;
  bool warnedInternal_ = false;
  bool warnedCommit_ = false;
  std::map<std::tuple<std::string, int, std::string>, RowId> frames_;
  std::unordered_map<std::uint64_t, Entry> entries_;  // cache entry id -> its compile
};

std::shared_ptr<TraceSink>& theSink() {
  static auto* sink = new std::shared_ptr<TraceSink>(std::make_shared<TraceSink>());
  return *sink;
}

// ---- dynamo._C._recording -----------------------------------------------------------------

PyObject* install(PyObject*, PyObject* opener) {
  DYNAMO_PY_TRY
  if (opener != Py_None && !PyCallable_Check(opener)) {
    PyErr_SetString(PyExc_TypeError, "install: expected a callable or None");
    return nullptr;
  }
  theSink()->setOpener(opener);
  core::setCompileSink(theSink());
  Py_RETURN_NONE;
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* setArtifactSource(PyObject*, PyObject* source) {
  DYNAMO_PY_TRY
  if (source != Py_None && !PyCallable_Check(source)) {
    PyErr_SetString(PyExc_TypeError, "set_artifact_source: expected a callable or None");
    return nullptr;
  }
  theSink()->setArtifactSource(source);
  Py_RETURN_NONE;
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* attach(PyObject*, PyObject* writer) {
  DYNAMO_PY_TRY
  if (writer == Py_None)
    theSink()->detach();
  else
    theSink()->attach(writerOf(writer));
  Py_RETURN_NONE;
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* attached(PyObject*, PyObject* writer) {
  DYNAMO_PY_TRY
  const auto& w = theSink()->writer();
  if (writer == Py_None) return PyBool_FromLong(w != nullptr);
  return PyBool_FromLong(w != nullptr && w == writerOf(writer));
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* recordHits(PyObject*, PyObject*) {
  DYNAMO_PY_TRY
  PyRef out = PyRef::steal(checkPy(PyDict_New()));
  for (const auto& [compileId, hits] : theSink()->recordHits()) {
    PyRef k = PyRef::steal(checkPy(PyLong_FromLongLong(compileId)));
    PyRef v = PyRef::steal(checkPy(PyLong_FromLongLong(hits)));
    if (PyDict_SetItem(out.get(), k.get(), v.get()) < 0) throw PythonError{};
  }
  return out.release();
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* setCommitMode(PyObject*, PyObject* mode) {
  long v = PyLong_AsLong(mode);
  if (v == -1 && PyErr_Occurred()) return nullptr;
  if (v < TraceSink::kBatch || v > TraceSink::kPersist) {
    PyErr_SetString(PyExc_ValueError, "set_commit_mode: 0 (batch), 1 (flush) or 2 (persist)");
    return nullptr;
  }
  int previous = theSink()->commitMode();
  theSink()->setCommitMode(static_cast<int>(v));
  return PyLong_FromLong(previous);
}

PyMethodDef methods[] = {
    {"install", install, METH_O,
     "install(opener): make the trace sink the compiler's; opener() -> TraceWriter or None is "
     "called before every compile and names the run to record into."},
    {"set_artifact_source", setArtifactSource, METH_O,
     "set_artifact_source(fn_or_None): fn() -> [(name, bytes, media type)] is called after "
     "every recorded compile; its artifacts are linked to the compile."},
    {"attach", attach, METH_O, "attach(writer_or_None): record every compile into this run."},
    {"attached", attached, METH_O,
     "attached(writer_or_None) -> bool: is this writer (None: any writer) attached?"},
    {"record_hits", recordHits, METH_NOARGS,
     "record_hits() -> {compile_id: hits}: record the live cache entries' hits now."},
    {"set_commit_mode", setCommitMode, METH_O,
     "set_commit_mode(0 batch | 1 flush | 2 persist) -> previous: what secures a compile's "
     "rows before its code runs."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef moduleDef = {PyModuleDef_HEAD_INIT, "dynamo._C._recording",
                         "The compiler's records into the trace store, in C++.", -1, methods,
                         nullptr, nullptr, nullptr, nullptr};

}  // namespace

void beforeWriterClose(const storage::TraceWriter* writer) {
  std::shared_ptr<TraceSink>& sink = theSink();
  if (!sink || !sink->attachedTo(writer)) return;
  try {
    sink->recordHits();
  } catch (const std::exception&) {
    // Hits are best effort: the run's rows are what matters.
  }
  sink->detach();
}

int initRecordingBindings(PyObject* module) {
  return addSubmodule(module, "_recording", PyModule_Create(&moduleDef));
}

}  // namespace dynamo::py

// The AOT records of the trace store and their reports (aot_report.h).
#include "dynamo/explain/aot_report.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "dynamo/common/format.h"
#include "dynamo/explain/render_util.h"

#include <nlohmann/json.hpp>

namespace dynamo::explain {

using storage::ArtifactRecord;
using storage::RowId;

namespace {

constexpr const char* kAotArtifact = "dynamo.aot";
constexpr const char* kGraphPrefix = "dynamo.aot.";
constexpr const char* kPerSizeArtifact = "dynamo.aot_per_size";

// The phases in pipeline order; others (none today) after them, by name.
const std::vector<std::string>& phaseOrder() {
  static const std::vector<std::string> order = {"trace", "import", "partition", "compile_forward",
                                                 "compile_backward"};
  return order;
}

std::string str(const nlohmann::json& doc, const char* key) {
  auto it = doc.find(key);
  return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::vector<std::string> strings(const nlohmann::json& doc, const char* key) {
  std::vector<std::string> out;
  auto it = doc.find(key);
  if (it == doc.end() || !it->is_array()) return out;
  for (const nlohmann::json& v : *it)
    if (v.is_string()) out.push_back(v.get<std::string>());
  return out;
}

std::optional<AotGraphSize> graphSize(const std::string& serialized) {
  nlohmann::json doc = nlohmann::json::parse(serialized, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return std::nullopt;
  auto nodes = doc.find("nodes");
  if (nodes == doc.end() || !nodes->is_array()) return std::nullopt;
  AotGraphSize size;
  for (const nlohmann::json& node : *nodes) {
    ++size.nodes;
    std::string op = node.is_object() ? str(node, "op") : std::string();
    if (op == "call_function" || op == "call_method" || op == "call_module") ++size.ops;
  }
  return size;
}

GraphAot parseRecord(const std::string& data) {
  GraphAot aot;
  nlohmann::json doc = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) {
    aot.backend = "an AOT backend";
    aot.fallback = "(the dynamo.aot artifact is not a JSON object)";
    return aot;
  }
  aot.backend = str(doc, "backend");
  aot.function = str(doc, "function");
  aot.file = str(doc, "file");
  if (auto it = doc.find("line"); it != doc.end() && it->is_number_integer())
    aot.line = it->get<int>();
  if (auto it = doc.find("training"); it != doc.end() && it->is_boolean())
    aot.training = it->get<bool>();
  aot.partitionMode = str(doc, "partition_mode");
  aot.fallback = str(doc, "fallback");
  if (auto it = doc.find("phases_ms"); it != doc.end() && it->is_object()) {
    std::vector<std::pair<std::string, std::int64_t>> phases;
    for (const auto& [name, ms] : it->items())
      if (ms.is_number())
        phases.emplace_back(name, std::llround(ms.get<double>() * 1000.0));
    const auto& order = phaseOrder();
    auto rank = [&](const std::string& name) {
      return std::find(order.begin(), order.end(), name) - order.begin();
    };
    std::stable_sort(phases.begin(), phases.end(),
                     [&](const auto& a, const auto& b) { return rank(a.first) < rank(b.first); });
    aot.phasesUs = std::move(phases);
  }
  aot.mutatedInputs = strings(doc, "mutated_inputs");
  aot.partitioned = doc.contains("summary");
  aot.saved = strings(doc, "saved");
  aot.recomputed = strings(doc, "recomputed");
  if (auto it = doc.find("bytes_saved"); it != doc.end() && it->is_number_integer())
    aot.bytesSaved = it->get<std::int64_t>();
  aot.summary = str(doc, "summary");
  if (auto it = doc.find("decompositions"); it != doc.end() && it->is_object())
    for (const auto& [group, n] : it->items())
      if (n.is_number_integer()) aot.decompositions[group] = n.get<int>();
  return aot;
}

std::string sizeText(const AotGraphSize& s) {
  return plural(s.nodes, "node") + " (" + plural(s.ops, "op") + ")";
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "-" : out;
}

std::string masked(const std::string& file, const ReportOptions& options) {
  RenderOptions r;
  r.masked = options.maskVolatile;
  return displayPath(file, r);
}

std::string duration(std::int64_t us, const ReportOptions& options) {
  return options.maskVolatile ? "<masked>" : formatMicroseconds(us);
}

}  // namespace

std::int64_t GraphAot::compileUs() const {
  std::int64_t total = 0;
  for (const auto& [name, us] : phasesUs) total += us;
  return total;
}

std::vector<GraphAot> readAotRecords(const std::vector<ArtifactRecord>& artifacts, bool keepGraphs) {
  std::vector<const ArtifactRecord*> rows;
  for (const ArtifactRecord& a : artifacts)
    if (a.name.rfind(kAotArtifact, 0) == 0) rows.push_back(&a);
  std::stable_sort(rows.begin(), rows.end(),
                   [](const ArtifactRecord* a, const ArtifactRecord* b) { return a->id < b->id; });
  std::vector<GraphAot> out;
  const std::string prefix = kGraphPrefix;
  for (const ArtifactRecord* a : rows) {
    if (a->name == kAotArtifact) {
      out.push_back(parseRecord(a->data));
      continue;
    }
    if (out.empty() || a->name.size() <= prefix.size() || a->name.rfind(prefix, 0) != 0) continue;
    std::string which = a->name.substr(prefix.size());
    GraphAot& aot = out.back();
    std::optional<AotGraphSize> size = graphSize(a->data);
    if (which == "joint") aot.joint = size;
    else if (which == "forward") aot.forward = size;
    else if (which == "backward") aot.backward = size;
    else continue;
    if (keepGraphs) aot.graphs.emplace_back(which, a->data);
  }
  return out;
}

std::map<RowId, std::vector<GraphAot>> aotRecordsOfRun(const storage::TraceReader& reader,
                                                       RowId runId, bool keepGraphs) {
  std::map<RowId, std::vector<ArtifactRecord>> byCompile;
  for (ArtifactRecord& a : reader.artifacts(runId))
    if (a.compileId != 0 && a.name.rfind(kAotArtifact, 0) == 0)
      byCompile[a.compileId].push_back(std::move(a));
  std::map<RowId, std::vector<GraphAot>> out;
  for (const auto& [compileId, rows] : byCompile) {
    std::vector<GraphAot> records = readAotRecords(rows, keepGraphs);
    if (!records.empty()) out[compileId] = std::move(records);
  }
  return out;
}

std::vector<AotSizeCompile> readAotSizeCompiles(const std::vector<ArtifactRecord>& artifacts) {
  std::vector<const ArtifactRecord*> rows;
  for (const ArtifactRecord& a : artifacts)
    if (a.name == kPerSizeArtifact) rows.push_back(&a);
  std::stable_sort(rows.begin(), rows.end(), [](const ArtifactRecord* a, const ArtifactRecord* b) { return a->id < b->id; });
  std::vector<AotSizeCompile> out;
  for (const ArtifactRecord* a : rows) {
    nlohmann::json doc = nlohmann::json::parse(a->data, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object()) continue;
    AotSizeCompile c;
    c.backend = str(doc, "backend");
    c.when = str(doc, "when");
    c.signature = strings(doc, "signature");
    if (auto it = doc.find("compile_ms"); it != doc.end() && it->is_number())
      c.compileUs = std::llround(it->get<double>() * 1000.0);
    if (auto it = doc.find("aot"); it != doc.end() && it->is_object()) c.fallback = str(*it, "fallback");
    if (c.fallback.empty()) c.fallback = str(doc, "fallback");
    if (auto it = doc.find("lowering"); it != doc.end() && it->is_number_integer()) c.lowering = it->get<int>();
    c.reason = str(doc, "reason");
    c.symbols = strings(doc, "symbols");
    if (auto it = doc.find("lower_ms"); it != doc.end() && it->is_number())
      c.lowerUs = std::llround(it->get<double>() * 1000.0);
    if (auto it = doc.find("kernels"); it != doc.end() && it->is_array()) {
      for (const nlohmann::json& k : *it) {
        if (!k.is_object()) continue;
        AotSizeCompile::Kernel kernel;
        kernel.name = str(k, "name");
        if (auto id = k.find("code_id"); id != k.end() && id->is_number_integer()) kernel.codeId = id->get<RowId>();
        kernel.reused = k.value("reused", false);
        kernel.cacheHit = k.value("cache_hit", false);
        if (auto ms = k.find("compile_ms"); ms != k.end() && ms->is_number())
          kernel.compileUs = std::llround(ms->get<double>() * 1000.0);
        c.kernels.push_back(std::move(kernel));
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::map<RowId, std::vector<AotSizeCompile>> aotSizeCompilesOfRun(const storage::TraceReader& reader, RowId runId) {
  std::map<RowId, std::vector<ArtifactRecord>> byCompile;
  for (ArtifactRecord& a : reader.artifacts(runId))
    if (a.compileId != 0 && a.name == kPerSizeArtifact) byCompile[a.compileId].push_back(std::move(a));
  std::map<RowId, std::vector<AotSizeCompile>> out;
  for (const auto& [compileId, rows] : byCompile) {
    std::vector<AotSizeCompile> compiles = readAotSizeCompiles(rows);
    if (!compiles.empty()) out[compileId] = std::move(compiles);
  }
  return out;
}

std::vector<std::vector<std::string>> varyingSignatures(const std::vector<AotSizeCompile>& compiles) {
  std::vector<std::vector<std::string>> out;
  for (const AotSizeCompile& c : compiles) {
    std::vector<std::string> varying;
    for (const std::string& entry : c.signature) {
      bool everywhere = compiles.size() > 1;
      for (const AotSizeCompile& other : compiles)
        everywhere = everywhere && std::find(other.signature.begin(), other.signature.end(), entry) != other.signature.end();
      if (!everywhere) varying.push_back(entry);
    }
    out.push_back(std::move(varying));
  }
  return out;
}

void jsonAotSizeCompiles(JsonWriter& w, const std::vector<AotSizeCompile>& compiles, const RenderOptions& o) {
  w.beginArray();
  for (const AotSizeCompile& c : compiles) {
    w.beginObject();
    w.key("backend").value(c.backend);
    w.key("when").value(c.when);
    w.key("signature").beginArray();
    for (const std::string& s : c.signature) w.value(s);
    w.endArray();
    w.key("fallback");
    if (c.fallback.empty()) w.null();
    else w.value(c.fallback);
    w.key("compile_time_us");
    jsonTime(w, c.compileUs, o);
    if (c.lowering >= 0) {  // the fused backend's lowering
      w.key("lowering").value(static_cast<std::int64_t>(c.lowering));
      w.key("reason").value(c.reason);
      w.key("symbols").beginArray();
      for (const std::string& s : c.symbols) w.value(s);
      w.endArray();
      w.key("lower_time_us");
      jsonTime(w, c.lowerUs, o);
      w.key("kernels").beginArray();
      for (const AotSizeCompile::Kernel& k : c.kernels) {
        w.beginObject();
        w.key("name").value(k.name);
        w.key("reused").value(k.reused);
        w.key("cache_hit").value(k.cacheHit);
        w.key("compile_time_us");
        jsonTime(w, k.compileUs, o);
        w.endObject();
      }
      w.endArray();
    }
    w.endObject();
  }
  w.endArray();
}

int AotSizeCompile::reusedKernels() const {
  return static_cast<int>(std::count_if(kernels.begin(), kernels.end(), [](const Kernel& k) { return k.reused; }));
}

std::string sizeLoweringLine(const AotSizeCompile& c, const RenderOptions& o) {
  std::ostringstream out;
  out << "lowering #" << c.lowering;
  std::string symbols;
  for (const std::string& s : c.symbols) symbols += (symbols.empty() ? "" : ", ") + s;
  if (!symbols.empty()) out << " at " << symbols;
  if (!c.reason.empty()) out << " (" << c.reason << ")";
  if (!c.fallback.empty()) return out.str() + ": runs on the eager runner: " + c.fallback;
  const int reused = c.reusedKernels();
  const int made = static_cast<int>(c.kernels.size()) - reused;
  int hits = 0;
  for (const AotSizeCompile::Kernel& k : c.kernels) hits += !k.reused && k.cacheHit;
  out << ": " << made << " kernel" << (made == 1 ? "" : "s") << " new";
  if (hits) out << " (" << hits << " from the disk cache)";
  out << ", " << reused << " reused (family hit); lowering " << displayDuration(c.lowerUs, o) << ", total "
      << displayDuration(c.compileUs, o);
  return out.str();
}

std::vector<GraphAot> aotRecordsOfCompile(const storage::TraceReader& reader, RowId compileId) {
  for (const storage::RunRecord& run : reader.runs()) {
    std::vector<ArtifactRecord> rows;
    for (ArtifactRecord& a : reader.artifacts(run.id))
      if (a.compileId == compileId) rows.push_back(std::move(a));
    if (!rows.empty()) return readAotRecords(rows, /*keepGraphs=*/true);
  }
  return {};
}

std::string renderAot(const storage::TraceReader& reader, const ReportOptions& options) {
  std::ostringstream out;
  int shown = 0;
  for (const storage::RunRecord& run : reader.runs()) {
    std::map<RowId, std::vector<GraphAot>> records = aotRecordsOfRun(reader, run.id);
    std::map<RowId, std::vector<AotSizeCompile>> perSize = aotSizeCompilesOfRun(reader, run.id);
    if (records.empty()) continue;
    out << (shown++ ? "\n" : "") << "run " << run.id << "\n";
    for (const storage::FrameRecord& f : reader.frames(run.id)) {
      bool frameShown = false;
      for (const storage::CompileRecord& c : reader.compilesOfFrame(f.id)) {
        auto it = records.find(c.id);
        if (it == records.end()) continue;
        if (!frameShown) {
          out << "  " << f.name << " (" << masked(f.file, options) << ":" << f.firstLine << ")\n";
          frameShown = true;
        }
        int index = 0;
        for (const GraphAot& a : it->second) {
          out << "    compile #" << c.attempt << " (id "
              << (options.maskVolatile ? std::string("<masked>") : std::to_string(c.id))
              << "), graph " << index++ << ": "
              << a.backend;
          if (!a.fallback.empty()) {
            out << " runs it on the eager runner: " << a.fallback << "\n";
            continue;
          }
          out << " (" << (a.training ? "training" : "inference") << ") in "
              << duration(a.compileUs(), options) << "\n";
          std::string sizes;
          for (const auto& [name, size] : {std::pair{"joint", &a.joint}, std::pair{"forward", &a.forward},
                                           std::pair{"backward", &a.backward}})
            if (size->has_value())
              sizes += (sizes.empty() ? "" : ", ") + std::string(name) + " " + sizeText(**size);
          if (!sizes.empty()) out << "       graphs: " << sizes << "\n";
          if (a.partitioned) {
            out << "       partition (" << a.partitionMode << "): " << a.summary << "\n";
            out << "         saved: " << joined(a.saved) << "\n";
            out << "         recomputed: " << joined(a.recomputed) << "\n";
          }
          if (!a.mutatedInputs.empty())
            out << "       mutated inputs: " << joined(a.mutatedInputs) << "\n";
          if (!a.decompositions.empty()) {
            std::string groups;
            for (const auto& [group, n] : a.decompositions)
              groups += (groups.empty() ? "" : ", ") + group + " " + std::to_string(n);
            out << "       decompositions: " << groups << "\n";
          }
          std::string phases;
          for (const auto& [name, us] : a.phasesUs)
            phases += (phases.empty() ? "" : ", ") + name + " " + duration(us, options);
          if (!phases.empty()) out << "       phases: " << phases << "\n";
        }
        auto sizes = perSize.find(c.id);
        if (sizes != perSize.end()) {
          out << "    compile #" << c.attempt << ": " << sizes->second.front().backend << " compiled its graph once per input signature ("
              << plural(static_cast<std::int64_t>(sizes->second.size()), "compile") << "):\n";
          std::vector<std::vector<std::string>> varying = varyingSignatures(sizes->second);
          for (size_t i = 0; i < sizes->second.size(); ++i) {
            const AotSizeCompile& s = sizes->second[i];
            std::string sig;
            for (const std::string& e : varying[i]) sig += (sig.empty() ? "" : "; ") + e;
            out << "       " << (s.when == "compile" ? "with the entry" : "on a call") << ": " << (sig.empty() ? "-" : sig) << " in "
                << duration(s.compileUs, options) << (s.fallback.empty() ? "" : " (eager runner: " + s.fallback + ")") << "\n";
          }
        }
      }
    }
  }
  if (shown == 0) out << "no AOT compiles (no graph went to aot_eager or another AOT backend)\n";
  return out.str();
}

std::string aotLine(const GraphAot& a, const RenderOptions& o) {
  if (!a.fallback.empty()) return a.backend + ": runs on the eager runner: " + a.fallback;
  std::string line = a.backend + " (" + (a.training ? "training" : "inference") + "):";
  std::string sizes;
  for (const auto& [name, size] : {std::pair{"joint", &a.joint}, std::pair{"forward", &a.forward},
                                   std::pair{"backward", &a.backward}})
    if (size->has_value())
      sizes += (sizes.empty() ? " " : ", ") + std::string(name) + " " +
               plural((*size)->nodes, "node");
  line += sizes;
  if (a.partitioned) line += "; " + a.partitionMode + " partition: " + a.summary;
  return line + "; " + displayDuration(a.compileUs(), o);
}

void jsonAot(JsonWriter& w, const GraphAot& a, const RenderOptions& o) {
  w.beginObject();
  w.key("backend").value(a.backend);
  w.key("training").value(a.training);
  w.key("fallback");
  if (a.fallback.empty()) w.null();
  else w.value(a.fallback);
  for (const auto& [name, size] : {std::pair{"joint", &a.joint}, std::pair{"forward", &a.forward},
                                   std::pair{"backward", &a.backward}}) {
    w.key(name);
    if (!size->has_value()) {
      w.null();
      continue;
    }
    w.beginObject();
    w.key("nodes").value((*size)->nodes);
    w.key("ops").value((*size)->ops);
    w.endObject();
  }
  w.key("partition");
  if (!a.partitioned) {
    w.null();
  } else {
    w.beginObject();
    w.key("mode").value(a.partitionMode);
    w.key("saved_values").value(static_cast<std::int64_t>(a.saved.size()));
    w.key("recomputed_nodes").value(static_cast<std::int64_t>(a.recomputed.size()));
    w.key("bytes_saved").value(a.bytesSaved);
    w.key("saved").beginArray();
    for (const std::string& n : a.saved) w.value(n);
    w.endArray();
    w.key("recomputed").beginArray();
    for (const std::string& n : a.recomputed) w.value(n);
    w.endArray();
    w.endObject();
  }
  w.key("mutated_inputs").beginArray();
  for (const std::string& n : a.mutatedInputs) w.value(n);
  w.endArray();
  w.key("decompositions").beginObject();
  for (const auto& [group, n] : a.decompositions) w.key(group).value(n);
  w.endObject();
  w.key("compile_time_us");
  jsonTime(w, a.compileUs(), o);
  w.key("phases_us").beginObject();
  for (const auto& [name, us] : a.phasesUs) {
    w.key(name);
    jsonTime(w, us, o);
  }
  w.endObject();
  w.endObject();
}

}  // namespace dynamo::explain

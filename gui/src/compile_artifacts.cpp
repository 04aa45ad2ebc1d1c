// AOT records, graph indexes, partition roles and the Details text (see compile_artifacts.h).
#include "dynamo/gui/compile_artifacts.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "dynamo/explain/aot_report.h"
#include "dynamo/gui/graph_diff.h"
#include "dynamo/gui/overlays.h"

namespace dynamo::gui {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kGraphPrefix = "dynamo.aot.";

/// The kind of a graph artifact name ("dynamo.aot.forward"), false for any other name.
bool graphKindOf(const std::string& name, AotGraphKind& kind) {
  if (name.rfind(kGraphPrefix, 0) != 0) return false;
  const std::string_view rest = std::string_view(name).substr(kGraphPrefix.size());
  for (AotGraphKind k : {AotGraphKind::kJoint, AotGraphKind::kForward, AotGraphKind::kBackward})
    if (rest == aotGraphKindName(k)) {
      kind = k;
      return true;
    }
  return false;
}

std::vector<std::string> strings(const Json& doc, const char* key) {
  std::vector<std::string> out;
  auto it = doc.find(key);
  if (it == doc.end() || !it->is_array()) return out;
  for (const Json& v : *it)
    if (v.is_string()) out.push_back(v.get<std::string>());
  return out;
}

std::string text(const Json& doc, const char* key) {
  auto it = doc.find(key);
  return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string();
}

void readSummary(const std::string& data, AotRecord& r) {
  Json doc = Json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) {
    r.error = "the dynamo.aot artifact is not a JSON object";
    return;
  }
  r.backend = text(doc, "backend");
  r.partitionMode = text(doc, "partition_mode");
  r.summary = text(doc, "summary");
  if (auto it = doc.find("fallback"); it != doc.end() && it->is_string()) r.fallback = it->get<std::string>();
  if (auto it = doc.find("training"); it != doc.end() && it->is_boolean()) r.training = it->get<bool>();
  if (auto it = doc.find("bytes_saved"); it != doc.end() && it->is_number_integer())
    r.bytesSaved = it->get<std::int64_t>();
  r.saved = strings(doc, "saved");
  r.recomputed = strings(doc, "recomputed");
  r.mutatedInputs = strings(doc, "mutated_inputs");
  if (auto it = doc.find("phases_ms"); it != doc.end() && it->is_object())
    for (auto p = it->begin(); p != it->end(); ++p)
      if (p->is_number()) r.phasesMs.emplace_back(p.key(), p->get<double>());
  if (auto it = doc.find("decompositions"); it != doc.end() && it->is_object())
    for (auto p = it->begin(); p != it->end(); ++p)
      if (p->is_number_integer()) r.decompositions.emplace_back(p.key(), p->get<std::int64_t>());
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string joined(const std::vector<std::string>& v, std::size_t most = 40) {
  std::string out;
  for (std::size_t i = 0; i < v.size() && i < most; ++i) out += (i ? ", " : "") + v[i];
  if (v.size() > most) out += ", ... (" + std::to_string(v.size() - most) + " more)";
  return out.empty() ? "-" : out;
}

}  // namespace

std::string_view aotGraphKindName(AotGraphKind kind) {
  switch (kind) {
    case AotGraphKind::kJoint: return "joint";
    case AotGraphKind::kForward: return "forward";
    case AotGraphKind::kBackward: return "backward";
  }
  return "";
}

int aotGraphIndex(int ordinal, AotGraphKind kind) { return -1 - (3 * ordinal + static_cast<int>(kind)); }

bool decodeAotGraphIndex(int index, int& ordinal, AotGraphKind& kind) {
  if (index >= 0 || index <= kPassGraphBase) return false;
  const int k = -1 - index;
  ordinal = k / 3;
  kind = static_cast<AotGraphKind>(k % 3);
  return true;
}

std::string graphIndexLabel(int index) {
  if (index <= kPassGraphBase) return "graph before pass #" + std::to_string(kPassGraphBase - index + 1);
  int ordinal = 0;
  AotGraphKind kind{};
  if (!decodeAotGraphIndex(index, ordinal, kind)) return "graph " + std::to_string(index);
  return std::string("AOT ") + (ordinal > 0 ? "#" + std::to_string(ordinal + 1) + " " : "") +
         std::string(aotGraphKindName(kind)) + " graph";
}

std::vector<std::pair<int, std::string>> passInputGraphs(const std::vector<storage::ArtifactRecord>& artifacts) {
  std::vector<std::pair<int, std::string>> out;
  for (const storage::ArtifactRecord& a : artifacts)
    if (a.name.rfind(kPassInputPrefix, 0) == 0)
      out.emplace_back(kPassGraphBase - static_cast<int>(out.size()), a.name.substr(kPassInputPrefix.size()));
  return out;
}

const storage::ArtifactRecord* passGraphArtifact(const std::vector<storage::ArtifactRecord>& artifacts, int index) {
  int k = kPassGraphBase - index;
  for (const storage::ArtifactRecord& a : artifacts)
    if (a.name.rfind(kPassInputPrefix, 0) == 0 && k-- == 0) return &a;
  return nullptr;
}

std::vector<AotRecord> aotRecords(const std::vector<storage::ArtifactRecord>& artifacts) {
  std::vector<AotRecord> out;
  for (const storage::ArtifactRecord& a : artifacts) {
    AotGraphKind kind{};
    if (a.name == kAotArtifact) {
      AotRecord r;
      r.ordinal = static_cast<int>(out.size());
      readSummary(a.data, r);
      out.push_back(std::move(r));
    } else if (graphKindOf(a.name, kind)) {
      // A graph with no summary before it, or a second graph of a kind: a record of its own.
      const bool fresh = out.empty() || std::any_of(out.back().graphs.begin(), out.back().graphs.end(),
                                                    [&](const AotGraphRef& g) { return g.kind == kind; });
      if (fresh) {
        AotRecord r;
        r.ordinal = static_cast<int>(out.size());
        r.error = "no dynamo.aot summary was recorded before this graph";
        out.push_back(std::move(r));
      }
      AotRecord& r = out.back();
      r.graphs.push_back({kind, aotGraphIndex(r.ordinal, kind), a.id, a.data.size()});
    }
  }
  return out;
}

const storage::ArtifactRecord* aotGraphArtifact(const std::vector<storage::ArtifactRecord>& artifacts,
                                                int index) {
  const std::vector<AotRecord> records = aotRecords(artifacts);
  for (const AotRecord& r : records)
    for (const AotGraphRef& g : r.graphs)
      if (g.index == index)
        for (const storage::ArtifactRecord& a : artifacts)
          if (a.id == g.artifactId) return &a;
  return nullptr;
}

InspectGraphPtr withPartitionRoles(const InspectGraph& graph, AotGraphKind kind, const AotRecord& record) {
  if (record.error.empty() && !record.training) return std::make_shared<InspectGraph>(graph);  // no partition
  const std::set<std::string> saved(record.saved.begin(), record.saved.end());
  const std::set<std::string> recomputed(record.recomputed.begin(), record.recomputed.end());
  std::vector<InspectNode> nodes = graph.nodes();
  // Joint graph: backward = depends on a tangent (inputs come before their users).
  std::vector<bool> backward(nodes.size(), kind == AotGraphKind::kBackward);
  if (kind == AotGraphKind::kJoint)
    for (InspectNode& n : nodes) {
      if (n.op == "placeholder") backward[static_cast<size_t>(n.index)] = n.target.rfind("tangents", 0) == 0;
      for (int in : n.inputs)
        if (backward[static_cast<size_t>(in)]) backward[static_cast<size_t>(n.index)] = true;
    }
  for (InspectNode& n : nodes) {
    if (n.op == "output") continue;
    if (saved.count(n.name)) n.partition = PartitionRole::kSaved;
    else if (recomputed.count(n.name)) n.partition = PartitionRole::kRecomputed;
    else n.partition = backward[static_cast<size_t>(n.index)] ? PartitionRole::kBackward : PartitionRole::kForward;
  }
  return InspectGraph::make(std::move(nodes), graph.hash());
}

InspectGraphPtr withDynamoContext(const InspectGraph& aot, const InspectGraph& dynamo) {
  const GraphDiff d = diffGraphs(dynamo, aot);
  std::vector<InspectNode> nodes = aot.nodes();
  std::vector<bool> matched(nodes.size(), false);
  for (InspectNode& n : nodes) {
    const int m = d.beforeOfAfter[static_cast<size_t>(n.index)];
    if (m < 0 || n.op == "output") continue;
    const InspectNode& from = dynamo.node(m);
    matched[static_cast<size_t>(n.index)] = true;
    n.modulePath = from.modulePath;
    n.location = from.location;
    n.userStack = from.userStack;
  }
  for (InspectNode& n : nodes) {
    if (matched[static_cast<size_t>(n.index)] || n.op == "placeholder" || n.op == "output") continue;
    const std::string* best = nullptr;
    for (int in : n.inputs) {
      const InspectNode& i = nodes[static_cast<size_t>(in)];
      if (i.modulePath.empty()) continue;
      if (matched[static_cast<size_t>(in)]) {
        best = &i.modulePath;
        break;
      }
      if (!best) best = &i.modulePath;
    }
    if (best) n.modulePath = *best;
  }
  return InspectGraph::make(std::move(nodes), aot.hash());
}

InspectGraphPtr withContextOf(const InspectGraph& graph, const InspectGraph& named) {
  std::unordered_map<std::string, int> byName;
  for (const InspectNode& n : named.nodes())
    if (n.op != "output") byName.emplace(n.name, n.index);
  std::vector<InspectNode> nodes = graph.nodes();
  for (InspectNode& n : nodes) {
    auto it = byName.find(n.name);
    if (it == byName.end() || n.op == "output") continue;
    const InspectNode& from = named.node(it->second);
    n.modulePath = from.modulePath;
    n.location = from.location;
    n.userStack = from.userStack;
  }
  return InspectGraph::make(std::move(nodes), graph.hash());
}

std::string kernelRunText(double runUs, int calls) {
  if (runUs < 0) return "run time not measured";
  char buf[96];
  std::snprintf(buf, sizeof buf, "ran in %.0f us per call (mean of its first %d calls)", runUs, calls);
  return buf;
}

std::string sizeLoweringsText(const std::vector<storage::ArtifactRecord>& artifacts) {
  std::vector<explain::AotSizeCompile> lowerings;
  for (explain::AotSizeCompile& c : explain::readAotSizeCompiles(artifacts))
    if (c.lowering >= 0) lowerings.push_back(std::move(c));  // the fused backend's (the AOT ones: "Other")
  if (lowerings.empty()) return "";
  std::ostringstream o;
  std::set<std::string> dynamic;  // the symbols, without their values
  for (const explain::AotSizeCompile& c : lowerings)
    for (const std::string& s : c.symbols) dynamic.insert(s.substr(0, s.find('=')));
  o << "Lowerings per input signature (" << lowerings.size() << "; dynamic: "
    << (dynamic.empty() ? std::string("none named") : joined(std::vector<std::string>(dynamic.begin(), dynamic.end())))
    << ")\n";
  for (const explain::AotSizeCompile& c : lowerings) {
    o << "  " << explain::sizeLoweringLine(c, explain::RenderOptions{}) << "\n";
    std::string sig;
    for (const std::string& e : c.signature) sig += (sig.empty() ? "" : ", ") + e;
    o << "    inputs: " << sig << "\n";
    for (const explain::AotSizeCompile::Kernel& k : c.kernels)
      o << "    " << k.name << ": "
        << (k.reused ? std::string("reused (family hit)")
                     : k.cacheHit ? std::string("new, from the disk cache")
                                  : fmt("new, compiled in %.0f ms", static_cast<double>(k.compileUs) / 1000.0))
        << "\n";
  }
  o << "\n";
  return o.str();
}

std::string compileDetailsText(const std::vector<storage::ArtifactRecord>& artifacts) {
  std::ostringstream o;
  const std::vector<AotRecord> records = aotRecords(artifacts);
  for (const AotRecord& r : records) {
    o << "AOT compile" << (records.size() > 1 ? " #" + std::to_string(r.ordinal + 1) : std::string()) << "\n";
    if (!r.error.empty()) o << "  note: " << r.error << "\n";
    if (!r.backend.empty())
      o << "  backend: " << r.backend << " (" << (r.training ? "training" : "inference") << ")\n";
    if (!r.fallback.empty()) o << "  runs on the eager runner: " << r.fallback << "\n";
    if (r.training && !r.partitionMode.empty()) o << "  partition: " << r.partitionMode << ": " << r.summary << "\n";
    if (r.training && r.fallback.empty()) {
      o << "  saved for backward (" << r.saved.size() << ", " << formatBytes(r.bytesSaved) << "): "
        << joined(r.saved) << "\n";
      o << "  recomputed in backward (" << r.recomputed.size() << "): " << joined(r.recomputed) << "\n";
    }
    if (!r.mutatedInputs.empty()) o << "  inputs written in place: " << joined(r.mutatedInputs) << "\n";
    if (!r.phasesMs.empty()) {
      o << "  compile time:";
      for (const auto& [phase, ms] : r.phasesMs) o << " " << phase << " " << fmt("%.1f", ms) << " ms";
      o << "\n";
    }
    if (!r.decompositions.empty()) {
      o << "  decompositions:";
      for (const auto& [group, n] : r.decompositions) o << " " << group << " " << n;
      o << "\n";
    }
    o << "  graphs:";
    for (const AotGraphRef& g : r.graphs) o << " " << aotGraphKindName(g.kind) << " (" << formatBytes(static_cast<std::int64_t>(g.bytes)) << " of JSON)";
    if (r.graphs.empty()) o << " none stored";
    o << "\n\n";
  }
  for (const storage::ArtifactRecord& a : artifacts)
    if (a.name == kDynamicShapesArtifact) {
      o << "Dynamic shapes\n";
      std::istringstream in(a.data);
      for (std::string line; std::getline(in, line);) o << "  " << line << "\n";
      o << "\n";
    }
  for (const storage::ArtifactRecord& a : artifacts)
    if (a.name == kPassesArtifact) {
      o << "Passes that changed the graph (the nodes they removed and added)\n";
      std::istringstream in(a.data);
      for (std::string line; std::getline(in, line);) o << "  " << line << "\n";
      o << "\n";
    }
  // Measured run times, by kernel code row (written after the kernels ran; the last one wins).
  std::map<std::int64_t, std::pair<std::int64_t, int>> runs;
  for (const storage::ArtifactRecord& a : artifacts) {
    if (a.name != storage::kKernelRunArtifact) continue;
    const nlohmann::json j = nlohmann::json::parse(a.data, nullptr, false);
    if (!j.is_object() || !j.contains("code_id") || !j["code_id"].is_number_integer() || !j.contains("run_us") ||
        !j["run_us"].is_number_integer())
      continue;
    const nlohmann::json calls = j.value("calls", nlohmann::json());
    runs[j["code_id"].get<std::int64_t>()] = {j["run_us"].get<std::int64_t>(),
                                              calls.is_number_integer() ? calls.get<int>() : 0};
  }
  std::string kernels;
  int numKernels = 0;
  for (const storage::ArtifactRecord& a : artifacts) {
    if (a.name != storage::kKernelArtifact) continue;
    const nlohmann::json j = nlohmann::json::parse(a.data, nullptr, false);
    if (!j.is_object()) continue;
    ++numKernels;
    const nlohmann::json codeId = j.value("code_id", nlohmann::json());
    auto run = codeId.is_number_integer() ? runs.find(codeId.get<std::int64_t>()) : runs.end();
    kernels += "  " + j.value("name", std::string("?")) + " (" + j.value("graph", std::string()) + " graph " +
               std::to_string(j.value("graph_index", 0)) + ", " + j.value("loops", std::string()) + ", " +
               (j.value("cache_hit", false) ? std::string("cache hit")
                                            : fmt("compiled in %.0f ms", static_cast<double>(j.value("compile_us", std::int64_t{0})) / 1000.0)) +
               ", " +
               (run == runs.end() ? kernelRunText(-1, 0)
                                  : kernelRunText(static_cast<double>(run->second.first), run->second.second)) +
               "): " + std::to_string(j.value("nodes", nlohmann::json::array()).size()) + " nodes\n";
  }
  if (numKernels > 0) o << "Generated kernels (" << numKernels << ")\n" << kernels << "\n";
  o << sizeLoweringsText(artifacts);
  bool header = false;
  for (const storage::ArtifactRecord& a : artifacts) {
    AotGraphKind kind{};
    if (a.name == kAotArtifact || a.name == kDynamicShapesArtifact || a.name == kPassesArtifact ||
        a.name == storage::kKernelArtifact || a.name == storage::kKernelRunArtifact || a.name == kSizeLoweringArtifact ||
        a.name.rfind(kPassInputPrefix, 0) == 0 || graphKindOf(a.name, kind))
      continue;
    if (!header) o << "Other artifacts\n";
    header = true;
    o << "  " << a.name << " (" << a.mediaType << ", " << formatBytes(static_cast<std::int64_t>(a.data.size())) << ")\n";
  }
  if (artifacts.empty()) o << "This compile recorded no artifacts (no AOT graphs, no dynamic shapes).\n";
  return o.str();
}

namespace {

// Whether kernel `k` was generated for graph `index` of its compile (see withKernels).
bool kernelOfGraph(const storage::KernelRecord& k, int index) {
  if (index >= 0) return k.graph == "dynamo" && k.graphIndex == index;
  int ordinal = 0;
  AotGraphKind kind{};
  if (!decodeAotGraphIndex(index, ordinal, kind) || k.graphIndex != ordinal) return false;
  switch (kind) {
    case AotGraphKind::kJoint: return k.graph == "aot.forward" || k.graph == "aot.backward";
    case AotGraphKind::kForward: return k.graph == "aot.forward";
    case AotGraphKind::kBackward: return k.graph == "aot.backward";
  }
  return false;
}

}  // namespace

InspectGraphPtr withKernels(const InspectGraphPtr& graph, int index,
                            const std::vector<storage::KernelRecord>& kernels) {
  std::map<std::string, int> byName;
  for (const InspectNode& n : graph->nodes()) byName.emplace(n.name, n.index);
  std::vector<InspectNode> nodes = graph->nodes();
  std::vector<InspectKernel> out;
  for (const storage::KernelRecord& k : kernels) {
    if (!kernelOfGraph(k, index)) continue;
    InspectKernel ik;
    ik.name = k.name;
    ik.language = std::string(storage::codeKindLanguage(k.kind));
    ik.source = k.source;
    ik.loops = k.loops;
    ik.cacheHit = k.cacheHit;
    ik.compileMs = static_cast<double>(k.compileUs) / 1000.0;
    ik.lowerMs = static_cast<double>(k.lowerUs) / 1000.0;
    ik.runUs = static_cast<double>(k.runUs);
    ik.runCalls = k.runCalls;
    const int id = static_cast<int>(out.size());
    for (const std::string& name : k.nodes) {
      auto it = byName.find(name);
      if (it == byName.end()) continue;
      ik.nodes.push_back(it->second);
      nodes[static_cast<size_t>(it->second)].kernels.push_back(id);
    }
    std::sort(ik.nodes.begin(), ik.nodes.end());
    out.push_back(std::move(ik));
  }
  if (out.empty()) return graph;
  return InspectGraph::make(std::move(nodes), graph->hash(), std::move(out));
}

InspectGraphPtr withSymbolicInputs(const InspectGraphPtr& graph,
                                   const std::vector<storage::ArtifactRecord>& artifacts) {
  // source -> (dim -> symbol), and the report line of each symbol.
  std::map<std::string, std::map<size_t, std::string>> dims;
  std::map<std::string, std::vector<std::string>> lines;
  for (const storage::ArtifactRecord& a : artifacts) {
    if (a.name != kDynamicShapesArtifact) continue;
    std::istringstream in(a.data);
    for (std::string line; std::getline(in, line);) {
      // "s0 = x.size()[0] in [2, inf] (dynamic; example 16)"
      const size_t eq = line.find(" = ");
      const size_t size = line.find(".size()[", eq == std::string::npos ? 0 : eq);
      if (line.empty() || line[0] != 's' || eq == std::string::npos || size == std::string::npos) continue;
      const std::string symbol = line.substr(0, eq);
      if (symbol.find(' ') != std::string::npos) continue;
      const std::string source = line.substr(eq + 3, size - eq - 3);
      const size_t close = line.find(']', size);
      if (close == std::string::npos) continue;
      try {
        dims[source][std::stoul(line.substr(size + 8, close - size - 8))] = symbol;
      } catch (const std::exception&) {
        continue;
      }
      lines[source].push_back(line);
    }
  }
  if (dims.empty()) return graph;
  std::vector<InspectNode> nodes = graph->nodes();
  bool any = false;
  for (InspectNode& n : nodes) {
    auto it = n.op == "placeholder" ? dims.find(n.target) : dims.end();
    if (it == dims.end() || n.tensor.empty()) continue;
    // n.tensor is "f32[16, 16]": the sizes between the brackets.
    const size_t open = n.tensor.find('['), end = n.tensor.rfind(']');
    if (open == std::string::npos || end == std::string::npos) continue;
    std::vector<std::string> sizes;
    std::istringstream in(n.tensor.substr(open + 1, end - open - 1));
    for (std::string part; std::getline(in, part, ',');) sizes.push_back(part.substr(part.find_first_not_of(' ')));
    std::string shape = "[";
    for (size_t d = 0; d < sizes.size(); ++d) {
      auto sym = it->second.find(d);
      shape += (d ? ", " : "") + (sym == it->second.end() ? sizes[d] : sym->second);
    }
    n.symbolicShape = shape + "]";
    n.symbols = lines[it->first];
    any = true;
  }
  return any ? InspectGraph::make(std::move(nodes), graph->hash(), graph->kernels()) : graph;
}

}  // namespace dynamo::gui

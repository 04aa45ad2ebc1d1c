// Kernel records (records.h, KernelRecord): the metadata artifact's JSON, and the writer's and
// reader's halves (a code row for the source, an artifact for the rest, joined by the code id).
#include "kernel_rows.h"

#include <nlohmann/json.hpp>

#include "dynamo/storage/trace_reader.h"
#include "dynamo/storage/trace_writer.h"

namespace dynamo::storage {
namespace detail {

std::string kernelMetaJson(const KernelRecord& k, RowId codeId) {
  nlohmann::json j = {{"code_id", codeId},           {"name", k.name},
                      {"graph", k.graph},            {"graph_index", k.graphIndex},
                      {"nodes", k.nodes},            {"loops", k.loops},
                      {"cache_key", k.cacheKey},     {"cache_hit", k.cacheHit},
                      {"compile_us", k.compileUs},   {"lower_us", k.lowerUs},
                      {"run_us", k.runUs}};
  return j.dump();
}

RowId readKernelMeta(const std::string& json, KernelRecord& k) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("code_id") || !j["code_id"].is_number_integer()) return 0;
  try {
    k.graph = j.value("graph", std::string());
    k.graphIndex = j.value("graph_index", 0);
    k.nodes = j.value("nodes", std::vector<std::string>());
    k.loops = j.value("loops", std::string());
    k.cacheKey = j.value("cache_key", std::string());
    k.cacheHit = j.value("cache_hit", false);
    k.compileUs = j.value("compile_us", std::int64_t{0});
    k.lowerUs = j.value("lower_us", std::int64_t{0});
    k.runUs = j.value("run_us", std::int64_t{-1});
  } catch (const nlohmann::json::exception&) {
    return 0;  // a field of the wrong type: the code row alone
  }
  return j["code_id"].get<RowId>();
}

// A kKernelRunArtifact's JSON: {code_id, run_us, calls}; false when unreadable.
bool readKernelRun(const std::string& json, RowId& codeId, std::int64_t& runUs, int& calls) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("code_id") || !j["code_id"].is_number_integer() || !j.contains("run_us") ||
      !j["run_us"].is_number_integer())
    return false;
  codeId = j["code_id"].get<RowId>();
  runUs = j["run_us"].get<std::int64_t>();
  calls = j.contains("calls") && j["calls"].is_number_integer() ? j["calls"].get<int>() : 0;
  return true;
}

}  // namespace detail

RowId TraceWriter::recordKernelRunTime(RowId compileId, RowId kernelId, std::int64_t runUs, int calls) {
  ArtifactRecord a;
  a.compileId = compileId;
  a.name = kKernelRunArtifact;
  a.mediaType = "application/json";
  a.data = nlohmann::json{{"code_id", kernelId}, {"run_us", runUs}, {"calls", calls}}.dump();
  return recordArtifact(std::move(a));
}

RowId TraceWriter::recordKernel(KernelRecord kernel) {
  CodeRecord code;
  code.compileId = kernel.compileId;
  code.kind = kernel.kind;
  code.name = kernel.name;
  code.content = std::move(kernel.source);
  const RowId codeId = recordCode(std::move(code));
  ArtifactRecord meta;
  meta.compileId = kernel.compileId;
  meta.name = kKernelArtifact;
  meta.mediaType = "application/json";
  meta.data = detail::kernelMetaJson(kernel, codeId);
  recordArtifact(std::move(meta));
  return codeId;
}

std::vector<KernelRecord> TraceReader::kernelsOfCompile(RowId compileId) const {
  std::vector<KernelRecord> out;
  std::vector<CodeRecord> rows;
  const std::vector<ArtifactRecord> artifacts = artifactsOfCompile(compileId);
  if (artifacts.empty()) return out;
  for (CodeRecord& c : code(artifacts.front().runId, compileId)) {
    if (c.kind == CodeKind::kCppKernel || c.kind == CodeKind::kCudaKernel || c.kind == CodeKind::kTritonKernel)
      rows.push_back(std::move(c));
  }
  std::vector<bool> used(rows.size(), false);
  for (const ArtifactRecord& a : artifacts) {
    if (a.name != kKernelArtifact) continue;
    KernelRecord k;
    const RowId codeId = detail::readKernelMeta(a.data, k);
    for (size_t i = 0; i < rows.size(); ++i) {
      if (used[i] || rows[i].id != codeId) continue;
      used[i] = true;
      k.id = rows[i].id;
      k.runId = rows[i].runId;
      k.compileId = compileId;
      k.kind = rows[i].kind;
      k.name = rows[i].name;
      k.source = rows[i].content;
      out.push_back(std::move(k));
      break;
    }
  }
  // Measured run times (written after the kernels ran): the last one of a kernel wins.
  for (const ArtifactRecord& a : artifacts) {
    if (a.name != kKernelRunArtifact) continue;
    RowId codeId = 0;
    std::int64_t runUs = -1;
    int calls = 0;
    if (!detail::readKernelRun(a.data, codeId, runUs, calls)) continue;
    for (KernelRecord& k : out) {
      if (k.id != codeId) continue;
      k.runUs = runUs;
      k.runCalls = calls;
    }
  }
  // Kernel code rows without readable metadata: shown by name and source alone.
  for (size_t i = 0; i < rows.size(); ++i) {
    if (used[i]) continue;
    KernelRecord k;
    k.id = rows[i].id;
    k.runId = rows[i].runId;
    k.compileId = compileId;
    k.kind = rows[i].kind;
    k.name = rows[i].name;
    k.source = rows[i].content;
    out.push_back(std::move(k));
  }
  return out;
}

}  // namespace dynamo::storage

// The fused backend's program cache (fused_program_cache.h): key, entry format, load and store.
#include "fused_program_cache.h"

#include <Python.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>
#include <mutex>

#include "dynamo/codegen/kernel_cache.h"
#include "dynamo/codegen/program_io.h"
#include "dynamo/core/graph_pyref.h"
#include "dynamo/core/graph_serializer.h"

namespace dynamo::backends {
namespace {

constexpr const char* kMagic = "dynamo-program-cache";
constexpr int kFormat = 1;
constexpr const char* kExt = ".program";

std::mutex gMu;
ProgramCacheCounters gCounters;  // (gMu)

// The shared object (or executable) this code was linked into: its path, size and modification
// time. An entry written by another build of the lowering never matches.
const std::string& buildId() {
  static const std::string id = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&programCacheKey), &info) == 0 || info.dli_fname == nullptr)
      return std::string("unknown build ") + __DATE__ " " __TIME__;
    struct stat st {};
    std::string out = info.dli_fname;
    if (::stat(info.dli_fname, &st) == 0) {
      out += " " + std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec) + "." +
             std::to_string(st.st_mtim.tv_nsec);
    }
    return out;
  }();
  return id;
}

void count(int64_t ProgramCacheCounters::*field) {
  std::lock_guard<std::mutex> g(gMu);
  ++(gCounters.*field);
}

// A RuntimeWarning (Python's warning machinery: filters, pytest.warns); an error raised by a
// filter propagates.
void warn(const std::string& message) {
  if (PyErr_WarnEx(PyExc_RuntimeWarning, message.c_str(), 1) < 0) throw core::PythonError{};
}

void putLine(std::string& out, const std::string& s) {
  out += std::to_string(s.size());
  out += '\n';
  out += s;
}

// One length-prefixed string of the body at *pos, or nullopt when the body ends first.
std::optional<std::string> getLine(const std::string& in, size_t* pos) {
  size_t nl = in.find('\n', *pos);
  if (nl == std::string::npos || nl == *pos || nl - *pos > 19) return std::nullopt;
  for (size_t i = *pos; i < nl; ++i) {
    if (in[i] < '0' || in[i] > '9') return std::nullopt;
  }
  const uint64_t n = std::stoull(in.substr(*pos, nl - *pos));
  if (n > in.size() - nl - 1) return std::nullopt;
  *pos = nl + 1 + n;
  return in.substr(nl + 1, n);
}

std::optional<CachedProgram> reject(const std::string& name, const std::string& why) {
  count(&ProgramCacheCounters::rejected);
  warn("dynamo: ignoring the program cache entry " + codegen::kernelCacheDir() + "/" + name + " (" + why +
       "); lowering the graph again");
  return std::nullopt;
}

}  // namespace

bool programCacheEnabled() {
  const char* on = std::getenv("DYNAMO_GRAPH_CACHE");
  const char* repro = std::getenv("DYNAMO_REPRO_AFTER");
  return !(on && std::string(on) == "0") && !(repro && *repro);
}

// Every field of LoweringOptions is in the key: a new one must be added below (then here).
static_assert(sizeof(codegen::LoweringOptions) == 6 * sizeof(int) + sizeof(std::vector<codegen::ScalarInput>),
              "a new LoweringOptions field must enter the key");

std::string programCacheKey(const core::Graph& graph, const codegen::LoweringOptions& options, bool cuda) {
  std::string text = std::string(kMagic) + " " + std::to_string(kFormat) + "\n" + buildId() + "\n";
  text += "fuse=" + std::to_string(options.fuse) + " maxFusedNodes=" + std::to_string(options.maxFusedNodes) +
          " maxExprSize=" + std::to_string(options.maxExprSize) + " inlineCost=" + std::to_string(options.inlineCost) +
          " matmulSteps=" + std::to_string(options.matmulSteps) + " convSteps=" + std::to_string(options.convSteps) +
          " cuda=" + std::to_string(cuda) + " scalarInputs=";
  for (codegen::ScalarInput i : options.scalarInputs) text += std::to_string(static_cast<int>(i));
  text += "\n";
  const char* miscompile = std::getenv("DYNAMO_TEST_MISCOMPILE");  // read by the emitter
  text += std::string("miscompile=") + (miscompile ? miscompile : "<unset>") + "\n";
  const char* stream = std::getenv("DYNAMO_FUSED_STREAM_STORES");  // read by the emitter too
  text += std::string("stream=") + (stream ? stream : "<unset>") + "\n";
  text += core::serializeGraph(graph);
  return codegen::sha256Hex(text);
}

std::optional<CachedProgram> loadProgram(const std::string& key, const core::Graph& graph) {
  const std::string name = key + kExt;
  std::optional<std::string> data = codegen::readCacheFile(name);
  if (!data) {
    count(&ProgramCacheCounters::misses);
    return std::nullopt;
  }
  const size_t nl = data->find('\n');
  const std::string header = nl == std::string::npos ? *data : data->substr(0, nl);
  if (nl == std::string::npos || header.rfind(std::string(kMagic) + " ", 0) != 0) return reject(name, "no header");
  const std::string body = data->substr(nl + 1);
  if (header.substr(std::string(kMagic).size() + 1) != codegen::sha256Hex(body))
    return reject(name, "checksum mismatch: truncated or corrupt");
  size_t pos = 0;
  std::optional<std::string> storedKey = getLine(body, &pos), kernels = getLine(body, &pos);
  if (!storedKey || *storedKey != std::string(kMagic) + " " + std::to_string(kFormat) + " " + key)
    return reject(name, "another format or key");
  CachedProgram out;
  if (!kernels || kernels->empty() || kernels->size() > 9) return reject(name, "no kernel count");
  const size_t n = std::stoull(*kernels);
  for (size_t i = 0; i < n; ++i) {
    std::optional<std::string> src = getLine(body, &pos);
    if (!src) return reject(name, "truncated kernel sources");
    out.marked.push_back(std::move(*src));
  }
  try {
    out.program = codegen::readProgram(body.substr(pos));
  } catch (const codegen::ProgramFormatError& e) {
    return reject(name, e.what());
  }
  if (out.program.kernels.size() != n || out.program.inputBuffer.size() != graph.inputs().size() ||
      out.program.nodeBuffer.size() != graph.body().size())
    return reject(name, "a program that does not fit the graph");
  count(&ProgramCacheCounters::hits);
  return out;
}

void storeProgram(const std::string& key, const codegen::Program& program, const std::vector<std::string>& marked) {
  std::string body;
  putLine(body, std::string(kMagic) + " " + std::to_string(kFormat) + " " + key);
  putLine(body, std::to_string(marked.size()));
  for (const std::string& s : marked) putLine(body, s);
  body += codegen::writeProgram(program);
  try {
    codegen::writeCacheFile(key + kExt, std::string(kMagic) + " " + codegen::sha256Hex(body) + "\n" + body);
  } catch (const std::exception& e) {  // a read-only cache costs speed, not correctness
    warn(std::string("dynamo: cannot write the program cache entry: ") + e.what());
    return;
  }
  count(&ProgramCacheCounters::stores);
}

ProgramCacheCounters programCacheCounters() {
  std::lock_guard<std::mutex> g(gMu);
  return gCounters;
}

}  // namespace dynamo::backends

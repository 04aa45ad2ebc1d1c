// The compile-and-load path of generated C++ (kernel_cache.h): key, lock, compile, rename, evict,
// dlopen. The compiler runs as a child process (posix_spawn-free: popen with the output captured).
#include "dynamo/codegen/kernel_cache.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "dynamo/common/error.h"
#include "dynamo/common/hash.h"
#include "dynamo/common/logs.h"

namespace dynamo::codegen {
namespace fs = std::filesystem;

std::string sha256Hex(const std::string& data) { return dynamo::sha256Hex(data); }

namespace {

std::string compilerPath() {
  const char* cxx = std::getenv("DYNAMO_CXX");
  return cxx && *cxx ? cxx : "c++";
}

// Runs a shell command, returns (exit status, combined output).
std::pair<int, std::string> run(const std::string& cmd) {
  std::string out;
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return {-1, "popen failed"};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int status = pclose(f);
  return {status, out};
}

const std::string& compilerVersion() {
  static const std::string v = run(compilerPath() + " --version").second;
  return v;
}

// The CPU's feature flags (x86 "flags", arm "Features"): -march=native depends on them.
const std::string& cpuFeatures() {
  static const std::string features = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("flags", 0) == 0 || line.rfind("Features", 0) == 0) return line;
    }
    return std::string("unknown");
  }();
  return features;
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

int64_t cacheLimitBytes() {
  const char* mb = std::getenv("DYNAMO_KERNEL_CACHE_MB");
  int64_t v = mb ? std::atoll(mb) : 512;
  return (v > 0 ? v : 512) * 1024 * 1024;
}

// Whether `p` is a file the size limit counts and eviction may remove: a kernel library, a
// whole-graph or program entry, or a precompiled prelude left by an earlier version
// (prelude-<key>.h.gch, ~15 MB: kernels include no header since, so nothing uses it).
bool evictable(const fs::path& p) {
  const fs::path ext = p.extension();
  if (ext == ".so" || ext == ".graph" || ext == ".program") return true;
  return ext == ".gch" && p.filename().string().rfind("prelude-", 0) == 0;
}

// Whether `name` is a cache key (64 lowercase hex digits) and a dot, then more.
bool keyPrefixed(const std::string& name) {
  return name.size() > 65 && name[64] == '.' &&
         std::all_of(name.begin(), name.begin() + 64, [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Whether `e` is debris of this cache that a full scan removes once it is an hour old: a per-key
// lock file of the earlier lock scheme (`<key>.lock`, one per key ever looked up: ~63,000 empty
// files in a long-used cache, which every scan then read), or the temp source or output of a
// compile or write whose process died. Only the cache's own names: a directory the user pointed
// $DYNAMO_KERNEL_CACHE at keeps its other files.
bool staleDebris(const fs::directory_entry& e, std::error_code& ec) {
  const std::string name = e.path().filename().string();
  // <key>.lock; a compile's <key>.<pid>.<n>.cpp and <key>.<pid>.<n>.so.tmp; a write's <name>.<pid>.<n>.tmp
  const bool debris = keyPrefixed(name) && (name.size() == 69 ? endsWith(name, ".lock")
                                                              : endsWith(name, ".cpp") || endsWith(name, ".tmp"));
  if (!debris) return false;
  const auto age = fs::file_time_type::clock::now() - e.last_write_time(ec);
  return !ec && age > std::chrono::hours(1);
}

// Reads the whole directory: removes stale debris, then the oldest evictable files (a use marks a
// file recently used) until the cache is under 80% of `limit`. `keep` is never removed. Returns
// the evictable bytes left.
int64_t scanAndEvict(const fs::path& dir, const fs::path& keep, int64_t limit) {
  std::vector<std::pair<fs::file_time_type, fs::path>> files;
  int64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!evictable(e.path())) {
      if (staleDebris(e, ec)) fs::remove(e.path(), ec);
      continue;
    }
    total += static_cast<int64_t>(e.file_size(ec));
    files.emplace_back(e.last_write_time(ec), e.path());
  }
  if (total <= limit) return total;
  std::sort(files.begin(), files.end());
  for (const auto& [t, p] : files) {
    if (total <= limit * 8 / 10) break;
    if (p == keep) continue;
    int64_t size = static_cast<int64_t>(fs::file_size(p, ec));
    if (fs::remove(p, ec)) total -= size;
  }
  return total;
}

// Keeps the cache under its size limit after this process added `added` bytes (the file `keep`).
// A scan reads every entry's size and time (~0.4 s of CPU for a 76,000-entry directory on this
// machine), so a process scans at its first write, then only when its running estimate (the last
// scan's total plus what it wrote since) passes the limit or it has written 1/16 of the limit
// since (other processes write to the same directory).
void evict(const fs::path& dir, const fs::path& keep, int64_t added) {
  struct State {
    int64_t estimate = -1;  ///< evictable bytes: the last scan's total + this process's writes since
    int64_t sinceScan = 0;
  };
  static std::mutex mu;
  static auto* states = new std::map<std::string, State>();  // never destroyed
  std::lock_guard<std::mutex> g(mu);
  State& st = (*states)[dir.string()];
  const int64_t limit = cacheLimitBytes();
  if (st.estimate >= 0) {
    st.estimate += added;
    st.sinceScan += added;
    if (st.estimate <= limit && st.sinceScan < limit / 16) return;
  }
  st.estimate = scanAndEvict(dir, keep, limit);
  st.sinceScan = 0;
}

struct Loaded {
  void* handle = nullptr;
  std::string path;
};

std::mutex gMu;
std::map<std::string, Loaded>& loadedLibraries() {
  static auto* m = new std::map<std::string, Loaded>();  // never destroyed: handles stay open
  return *m;
}

// The lock of a key (flock; released when the fd closes): one of 256 lock files per directory
// (`lock-<2 hex digits>`, picked by a hash of the key), so that the directory does not gain a
// file per key ever looked up. Two keys of one stripe wait for each other; correctness never
// depends on the lock (every entry is written to a temp file and renamed): it only keeps two
// processes from compiling the same kernel at once. Readers take it shared.
struct FileLock {
  FileLock(const fs::path& dir, const std::string& key, bool shared = false) {
    char name[16];
    std::snprintf(name, sizeof name, "lock-%02zx", std::hash<std::string>{}(key) % 256);
    fd = ::open((dir / name).c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (fd >= 0) ::flock(fd, shared ? LOCK_SH : LOCK_EX);
  }
  ~FileLock() {
    if (fd >= 0) ::close(fd);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  int fd = -1;
};

// Whether $DYNAMO_CXX (or c++) is GCC: the lean link below is written for its driver.
bool compilerIsGcc() {
  const std::string& v = compilerVersion();
  return v.find("Free Software Foundation") != std::string::npos && v.find("clang") == std::string::npos;
}

// ---- the lean link ----------------------------------------------------------------------------
// The compiler driver of C++ links every shared object against libstdc++ and libm (and libgcc_s);
// GNU ld reading libstdc++'s symbol table was ~0.08 s of the ~0.2 s CPU of a one-kernel compile
// (docs/performance.md, "Cutting the compiler's fixed cost"). A generated kernel needs none of
// libstdc++ (no exceptions: -fno-exceptions, no new, no iostreams), so with GCC the link names
// its libraries itself, after the sources: libgomp (OpenMP), libm (expf, tanhf... when not
// inlined), libgcc (static helpers), libc. `-z defs` makes a symbol none of them defines a link
// error, and compileUnit then compiles the unit again with the driver's default link: a kernel
// that does need libstdc++ costs a second compiler run, never an unresolved symbol at dlopen.
// DYNAMO_KERNEL_LEAN_LINK=0 turns it off.
std::string leanLinkFlags() {
  static const std::string flags = [] {
    const char* on = std::getenv("DYNAMO_KERNEL_LEAN_LINK");
    if ((on && std::string(on) == "0") || !compilerIsGcc()) return std::string();
    return std::string(" -nodefaultlibs -Wl,-z,defs -lgomp -lm -lgcc -lc");
  }();
  return flags;
}

// One translation unit: `job.source` defining every symbol in `symbols` (one kernel, or several
// combined by combineSources). Every kernel of the unit gets the unit's key, hit and time.
std::vector<LoadedKernel> compileUnit(const CompileJob& job, const std::vector<std::string>& symbols) {
  const auto& flags = kernelCompileFlags();
  std::string flagText;
  for (const auto& f : flags) flagText += f + " ";
  for (const auto& f : job.extraFlags) flagText += f + " ";
  LoadedKernel out;
  out.key = sha256Hex(job.source + "\n--\n" + compilerVersion() + "\n--\n" + flagText + "\n--\n" + cpuFeatures());
  fs::path dir = kernelCacheDir();
  fs::path so = dir / (out.key + ".so");
  out.path = so.string();
  auto resolved = [&](void* handle) {
    std::vector<LoadedKernel> all;
    for (const std::string& sym : symbols) {
      LoadedKernel k = out;
      k.symbol = dlsym(handle, sym.c_str());
      DYNAMO_INTERNAL_ASSERT(k.symbol, "kernel ", sym, " missing from ", out.path);
      all.push_back(std::move(k));
    }
    return all;
  };
  {
    std::lock_guard<std::mutex> g(gMu);
    auto it = loadedLibraries().find(out.key);
    if (it != loadedLibraries().end()) {
      out.cacheHit = true;
      return resolved(it->second.handle);
    }
  }
  {
    FileLock lock(dir, out.key);
    std::error_code ec;
    if (fs::exists(so, ec)) {
      out.cacheHit = true;
      fs::last_write_time(so, fs::file_time_type::clock::now(), ec);  // recently used
    } else {
      static std::atomic<int> counter{0};
      std::string tag = std::to_string(::getpid()) + "." + std::to_string(counter++);
      fs::path src = dir / (out.key + "." + tag + ".cpp");
      fs::path tmp = dir / (out.key + "." + tag + ".so.tmp");
      {
        std::ofstream f(src);
        f << job.source;
      }
      auto start = std::chrono::steady_clock::now();
      const std::string files = quote(src.string()) + " -o " + quote(tmp.string());
      const std::string lean = job.extraFlags.empty() ? leanLinkFlags() : std::string();
      std::string cmd = quote(compilerPath()) + " " + flagText + files + lean;
      auto [status, output] = run(cmd);
      // A symbol the lean link does not resolve is a link error: compile again with the driver's
      // default link (the same object code).
      if (status != 0 && !lean.empty()) {
        if (common::logEnabled("fusion")) {  // the unresolved symbol, else the first error line
          const size_t at = output.find("undefined reference to") == std::string::npos ? 0 : output.find("undefined reference to");
          std::fprintf(stderr, "[dynamo fusion] kernel %s: %s; compiling again with the default link\n",
                       job.symbol.c_str(), output.substr(at, output.find('\n', at) - at).c_str());
        }
        cmd = quote(compilerPath()) + " " + flagText + files;
        std::tie(status, output) = run(cmd);
      }
      out.compileMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      fs::remove(src, ec);
      if (status != 0) {
        fs::remove(tmp, ec);
        DYNAMO_INTERNAL_ASSERT(false, "the generated kernel ", job.symbol, " did not compile (", cmd,
                               "):\n", output);
      }
      fs::rename(tmp, so, ec);
      DYNAMO_INTERNAL_ASSERT(!ec, "cannot move the compiled kernel into the cache: ", ec.message());
      evict(dir, so, static_cast<int64_t>(fs::file_size(so, ec)));
    }
  }
  std::lock_guard<std::mutex> g(gMu);
  auto& libs = loadedLibraries();
  auto it = libs.find(out.key);
  if (it == libs.end()) {
    void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    DYNAMO_INTERNAL_ASSERT(h, "dlopen of a compiled kernel failed: ", dlerror());
    it = libs.emplace(out.key, Loaded{h, so.string()}).first;
  }
  return resolved(it->second.handle);
}

// Several kernels' sources as one translation unit: each source's #include lines hoisted to the
// top (so no header is first included inside a namespace), the rest of each source in a
// namespace of its own (their static helpers do not collide); `extern "C"` keeps every kernel's
// symbol its plain name.
std::string combineSources(const std::vector<const CompileJob*>& jobs) {
  std::string includes, bodies;
  std::set<std::string> seen;
  for (size_t i = 0; i < jobs.size(); ++i) {
    std::istringstream in(jobs[i]->source);
    std::string line, body;
    while (std::getline(in, line)) {
      if (line.rfind("#include", 0) == 0) {
        if (seen.insert(line).second) includes += line + "\n";
        continue;
      }
      body += line + "\n";
    }
    bodies += "namespace dyn_unit_" + std::to_string(i) + " {\n" + body + "}  // namespace dyn_unit_" +
              std::to_string(i) + "\n";
  }
  return "// " + std::to_string(jobs.size()) + " kernels of one graph, one translation unit (Dynamo's fused backend)\n" +
         includes + bodies;
}

// How many translation units the kernels of one compileKernels call are split into: one per
// kKernelsPerUnit kernels, at most one per core. Each compiler run costs ~0.1 s of CPU before it
// sees a kernel (process start, the helpers' text, assembler, linker), so a small graph is one run (its
// fixed cost paid once; in wall time a unit of 2-4 kernels waits longer than 2 parallel runs
// would) and a large one is split across the cores; $DYNAMO_KERNEL_UNITS overrides (a large
// number: one unit per kernel).
constexpr size_t kKernelsPerUnit = 5;

size_t unitCount(size_t jobs) {
  if (jobs == 0) return 0;
  size_t n = std::max(1u, std::thread::hardware_concurrency());
  n = std::min(n, (jobs + kKernelsPerUnit - 1) / kKernelsPerUnit);
  if (const char* u = std::getenv("DYNAMO_KERNEL_UNITS"); u && std::atoll(u) > 0) n = static_cast<size_t>(std::atoll(u));
  return std::min(n, jobs);  // n >= 1 and jobs >= 1
}

// A file name of the cache for readCacheFile / writeCacheFile: a hex key and one extension.
void checkEntryName(const std::string& name) {
  const size_t dot = name.find('.');
  bool ok = dot != std::string::npos && dot > 0 && name.find('.', dot + 1) == std::string::npos &&
            name.find('/') == std::string::npos && name.substr(dot) != ".so" && name.substr(dot) != ".lock";
  DYNAMO_INTERNAL_ASSERT(ok, "bad cache entry name '", name, "' (expected <hex key>.<extension>)");
}

}  // namespace

std::optional<std::string> readCacheFile(const std::string& name) {
  checkEntryName(name);
  fs::path dir = kernelCacheDir();
  fs::path file = dir / name;
  FileLock lock(dir, name.substr(0, name.find('.')), /*shared=*/true);
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream bytes;
  bytes << in.rdbuf();
  std::error_code ec;
  fs::last_write_time(file, fs::file_time_type::clock::now(), ec);  // recently used
  return bytes.str();
}

void writeCacheFile(const std::string& name, const std::string& bytes) {
  checkEntryName(name);
  fs::path dir = kernelCacheDir();
  fs::path file = dir / name;
  FileLock lock(dir, name.substr(0, name.find('.')));
  static std::atomic<int> counter{0};
  fs::path tmp = dir / (name + "." + std::to_string(::getpid()) + "." + std::to_string(counter++) + ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw Error("cannot write the cache file " + tmp.string());
    }
  }
  std::error_code ec;
  fs::rename(tmp, file, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw Error("cannot move " + tmp.string() + " into the cache: " + ec.message());
  }
  evict(dir, file, static_cast<int64_t>(bytes.size()));
}

std::string kernelCacheDir() {
  static const std::string dir = [] {
    fs::path p;
    if (const char* d = std::getenv("DYNAMO_KERNEL_CACHE"); d && *d) {
      p = d;
    } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
      p = fs::path(x) / "dynamo" / "kernels";
    } else {
      const char* home = std::getenv("HOME");
      p = fs::path(home && *home ? home : "/tmp") / ".cache" / "dynamo" / "kernels";
    }
    std::error_code ec;
    fs::create_directories(p, ec);
    return p.string();
  }();
  return dir;
}

const std::vector<std::string>& kernelCompileFlags() {
  static const std::vector<std::string> kFlags = {
      "-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-fno-math-errno",
      "-fno-trapping-math", "-fwrapv", "-fno-exceptions", "-std=c++17", "-w"};
  return kFlags;
}

std::vector<LoadedKernel> compileKernels(const std::vector<CompileJob>& jobs) {
  // Jobs without extra flags are dealt round-robin into unitCount() translation units; jobs
  // with extra flags (the CUDA host shim) compile alone. A unit of one job is its source verbatim.
  std::vector<std::vector<size_t>> units;
  std::vector<size_t> plain;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].extraFlags.empty()) plain.push_back(i);
    else units.push_back({i});
  }
  size_t nPlain = unitCount(plain.size());
  size_t first = units.size();
  units.resize(first + nPlain);
  for (size_t j = 0; j < plain.size(); ++j) units[first + j % nPlain].push_back(plain[j]);
  std::vector<LoadedKernel> out(jobs.size());
  std::vector<std::string> errors(units.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t u = next++; u < units.size(); u = next++) {
      try {
        std::vector<std::string> symbols;
        std::vector<const CompileJob*> members;
        for (size_t i : units[u]) {
          symbols.push_back(jobs[i].symbol);
          members.push_back(&jobs[i]);
        }
        CompileJob unit = members.size() == 1 ? *members[0]
                                              : CompileJob{combineSources(members), symbols.front(), {}};
        std::vector<LoadedKernel> loaded = compileUnit(unit, symbols);
        for (size_t k = 0; k < units[u].size(); ++k) out[units[u][k]] = std::move(loaded[k]);
      } catch (const std::exception& e) {
        errors[u] = e.what();
      }
    }
  };
  size_t n = std::min<size_t>(units.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (size_t t = 1; t < n; ++t) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  for (const std::string& e : errors) {
    if (!e.empty()) throw Error(e);
  }
  return out;
}

}  // namespace dynamo::codegen

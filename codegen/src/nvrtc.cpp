// NVRTC through dlopen (nvrtc.h), and a minimal ELF64 symbol-table reader for CUBINs.
#include "dynamo/codegen/nvrtc.h"

#include <dlfcn.h>
#include <elf.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace dynamo::codegen {
namespace {

using Prog = void*;
struct Api {
  void* lib = nullptr;
  std::string why;
  int (*version)(int*, int*) = nullptr;
  int (*create)(Prog*, const char*, const char*, int, const char* const*, const char* const*) = nullptr;
  int (*compile)(Prog, int, const char* const*) = nullptr;
  int (*logSize)(Prog, size_t*) = nullptr;
  int (*log)(Prog, char*) = nullptr;
  int (*cubinSize)(Prog, size_t*) = nullptr;
  int (*cubin)(Prog, char*) = nullptr;
  int (*ptxSize)(Prog, size_t*) = nullptr;
  int (*ptx)(Prog, char*) = nullptr;
  int (*destroy)(Prog*) = nullptr;
};

const Api& api() {
  static const Api a = [] {
    Api r;
    std::vector<std::string> names;
    if (const char* e = std::getenv("DYNAMO_NVRTC"); e && *e) names.push_back(e);
    for (const char* n : {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
                          "/usr/local/cuda/lib64/libnvrtc.so"}) {
      names.push_back(n);
    }
    for (const std::string& n : names) {
      r.lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (r.lib) break;
      r.why += n + ": " + dlerror() + "; ";
    }
    if (!r.lib) return r;
    auto sym = [&](auto& f, const char* name) {
      f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(r.lib, name));
      if (!f) r.why += std::string("missing ") + name + "; ";
    };
    sym(r.version, "nvrtcVersion");
    sym(r.create, "nvrtcCreateProgram");
    sym(r.compile, "nvrtcCompileProgram");
    sym(r.logSize, "nvrtcGetProgramLogSize");
    sym(r.log, "nvrtcGetProgramLog");
    sym(r.cubinSize, "nvrtcGetCUBINSize");
    sym(r.cubin, "nvrtcGetCUBIN");
    sym(r.ptxSize, "nvrtcGetPTXSize");
    sym(r.ptx, "nvrtcGetPTX");
    sym(r.destroy, "nvrtcDestroyProgram");
    if (!r.why.empty()) r.lib = nullptr;
    return r;
  }();
  return a;
}

}  // namespace

bool nvrtcAvailable(std::string* why) {
  if (api().lib) return true;
  if (why) *why = "NVRTC not found (" + api().why + ")";
  return false;
}

std::string nvrtcVersion() {
  if (!api().lib) return {};
  int major = 0, minor = 0;
  api().version(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

NvrtcOutput nvrtcCompile(const std::string& source, const std::string& name, const std::string& arch) {
  NvrtcOutput out;
  const Api& a = api();
  if (!a.lib) {
    out.log = "NVRTC not found (" + a.why + ")";
    return out;
  }
  Prog prog = nullptr;
  if (a.create(&prog, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr) != 0) {
    out.log = "nvrtcCreateProgram failed";
    return out;
  }
  std::string archOpt = "--gpu-architecture=" + arch;
  const char* opts[] = {archOpt.c_str(), "--std=c++17", "-default-device"};
  int rc = a.compile(prog, 3, opts);
  size_t n = 0;
  a.logSize(prog, &n);
  out.log.assign(n, '\0');
  if (n) a.log(prog, out.log.data());
  while (!out.log.empty() && out.log.back() == '\0') out.log.pop_back();
  if (rc == 0) {
    bool real = arch.rfind("sm_", 0) == 0;
    size_t size = 0;
    (real ? a.cubinSize : a.ptxSize)(prog, &size);
    out.binary.assign(size, '\0');
    out.ok = (real ? a.cubin : a.ptx)(prog, out.binary.data()) == 0;
  }
  a.destroy(&prog);
  return out;
}

std::vector<std::pair<std::string, NvrtcOutput>> nvrtcCompileAll(const std::string& source,
                                                                  const std::string& name) {
  std::vector<std::pair<std::string, NvrtcOutput>> out;
  for (const char* arch : {"sm_80", "sm_90", "compute_80"}) out.emplace_back(arch, nvrtcCompile(source, name, arch));
  return out;
}

CubinInfo readCubin(const std::string& elf) {
  CubinInfo info;
  if (elf.size() < sizeof(Elf64_Ehdr) || std::memcmp(elf.data(), ELFMAG, SELFMAG) != 0 ||
      elf[EI_CLASS] != ELFCLASS64) {
    return info;
  }
  Elf64_Ehdr eh;
  std::memcpy(&eh, elf.data(), sizeof eh);
  info.machine = eh.e_machine;
  if (eh.e_shoff + static_cast<uint64_t>(eh.e_shnum) * sizeof(Elf64_Shdr) > elf.size()) return info;
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  std::memcpy(sh.data(), elf.data() + eh.e_shoff, eh.e_shnum * sizeof(Elf64_Shdr));
  for (const Elf64_Shdr& s : sh) {
    if (s.sh_type != SHT_SYMTAB || s.sh_link >= sh.size()) continue;
    const Elf64_Shdr& strtab = sh[s.sh_link];
    for (uint64_t off = 0; off + sizeof(Elf64_Sym) <= s.sh_size; off += sizeof(Elf64_Sym)) {
      if (s.sh_offset + off + sizeof(Elf64_Sym) > elf.size()) break;
      Elf64_Sym sym;
      std::memcpy(&sym, elf.data() + s.sh_offset + off, sizeof sym);
      if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC || strtab.sh_offset + sym.st_name >= elf.size()) continue;
      info.functions.emplace_back(elf.c_str() + strtab.sh_offset + sym.st_name);
    }
  }
  return info;
}

}  // namespace dynamo::codegen

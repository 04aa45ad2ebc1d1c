// NVRTC, loaded with dlopen (optional: CUDA is not a Debian package). Compiles generated CUDA C to
// CUBIN for a real architecture (sm_80, sm_90) or to PTX for a virtual one (compute_80), and reads
// the kernel names back out of a CUBIN's ELF symbol table (cuobjdump is not installed here).
//
// Library search: $DYNAMO_NVRTC, libnvrtc.so on the loader path, /usr/local/cuda/lib64.
#pragma once

#include <string>
#include <vector>

namespace dynamo::codegen {

/// What one NVRTC compile produced.
struct NvrtcOutput {
  bool ok = false;     ///< compiled
  std::string log;     ///< NVRTC's program log (errors, warnings)
  std::string binary;  ///< CUBIN (sm_XY) or PTX text (compute_XY)
};

/// True when NVRTC could be loaded; otherwise *why says what was tried.
bool nvrtcAvailable(std::string* why = nullptr);
/// NVRTC's version as "major.minor", or empty when unavailable.
std::string nvrtcVersion();
/// Compiles `source` for `arch` ("sm_80", "sm_90", "compute_80"). UserError-free: failures come
/// back with ok == false and the log.
NvrtcOutput nvrtcCompile(const std::string& source, const std::string& name, const std::string& arch);
/// Compiles for sm_80 and sm_90 (CUBIN) and compute_80 (PTX fallback for newer GPUs).
std::vector<std::pair<std::string, NvrtcOutput>> nvrtcCompileAll(const std::string& source,
                                                                  const std::string& name);

/// The ELF machine of a CUBIN (190 = EM_CUDA) and its function symbols; empty when `elf` is not
/// a 64-bit little-endian ELF.
struct CubinInfo {
  int machine = 0;                      ///< e_machine
  std::vector<std::string> functions;   ///< STT_FUNC symbol names
};
CubinInfo readCubin(const std::string& elf);

}  // namespace dynamo::codegen

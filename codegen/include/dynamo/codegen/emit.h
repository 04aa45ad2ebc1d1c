// Source emission: one translation unit per kernel, as C++ (OpenMP) or CUDA C.
//
// C++:  extern "C" void <name>(void* const* args)   args[i] = data pointer of params[i]
// CUDA: extern "C" __global__ void <name>(T* b<i>, ..., const long long* dyn_params)
//       one thread per outer point
//       plus, under -DDYN_HOST_SHIM (compiled by the host C++ compiler), a <name>_host(args)
//       that walks the grid as loops: the CUDA bodies' numerics are tested on the CPU.
// Neither includes torch headers; the C++ one includes <math.h> only.
#pragma once

#include <string>
#include <vector>

#include "dynamo/codegen/loop_ir.h"

namespace dynamo::codegen {

/// The buffers a kernel takes, in argument order (its reads and writes, sorted, unique).
std::vector<int> kernelParams(const Kernel& k);

/// The C++ source of kernel k of program p.
std::string emitCpp(const Kernel& k, const Program& p);

/// emitCpp with its size integers marked (kernel_template.h: splitMarked, sizeKernel): a
/// parametrised kernel reads them from one more argument, args[kernelParams(k).size()].
std::string emitCppMarked(const Kernel& k, const Program& p);

/// The CUDA C source of kernel k (for NVRTC; with -DDYN_HOST_SHIM, for the host compiler).
/// The kernel's last parameter is `const long long* dyn_params`, its size parameters (null for a
/// static kernel); the host shim reads it from args[kernelParams(k).size()].
std::string emitCuda(const Kernel& k, const Program& p);

/// emitCuda with its size integers marked (kernel_template.h), read from `dyn_params` when the
/// template is rendered parametrised: one NVRTC compile serves every size of its family.
std::string emitCudaMarked(const Kernel& k, const Program& p);

/// Threads per block of the CUDA kernels.
constexpr int kCudaBlock = 256;

}  // namespace dynamo::codegen

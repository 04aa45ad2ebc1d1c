// What the fused backend's oneDNN steps (fused_dnnl_conv.cpp, fused_dnnl_matmul.cpp) share.
// Includes oneDNN's header: only those two files include this.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

namespace dynamo::backends {

/// The process's one oneDNN CPU engine, made on first use (thread-safe).
const dnnl::engine& cpuEngine();

}  // namespace dynamo::backends

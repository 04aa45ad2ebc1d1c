// What the fused backend's oneDNN steps share (fused_dnnl_common.h). Built only with oneDNN
// (DYNAMO_HAVE_DNNL), like them.
#include "fused_dnnl_common.h"

namespace dynamo::backends {

const dnnl::engine& cpuEngine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

}  // namespace dynamo::backends

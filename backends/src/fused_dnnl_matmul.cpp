// oneDNN matmul primitives of the fused backend's bmm steps (fused_dnnl_matmul.h). Built only
// when CMake found oneDNN (DYNAMO_HAVE_DNNL); the runtime runs at::bmm_out whenever make() throws.
#include "fused_dnnl_matmul.h"
#include "fused_dnnl_common.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <stdexcept>
#include <unordered_map>

namespace dynamo::backends {
namespace {

using dnnl::memory;

memory::desc plainDesc(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  return memory::desc(memory::dims(sizes.begin(), sizes.end()), memory::data_type::f32,
                      memory::dims(strides.begin(), strides.end()));
}

}  // namespace

struct DnnlMatmul::Impl {
  DnnlMatmulShape shape;
  memory::desc a, b, out;
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  size_t scratchBytes = 0;
};

DnnlMatmul::DnnlMatmul(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DnnlMatmul::~DnnlMatmul() = default;

std::unique_ptr<DnnlMatmul> DnnlMatmul::make(const DnnlMatmulShape& shape) {
  if (shape.a.size() != 3 || shape.b.size() != 3 || shape.out.size() != 3 || shape.aStrides.size() != 3 ||
      shape.bStrides.size() != 3 || shape.outStrides.size() != 3) {
    throw std::runtime_error("oneDNN matmul: not a 3-d product");
  }
  try {
    auto impl = std::make_unique<Impl>();
    impl->shape = shape;
    impl->a = plainDesc(shape.a, shape.aStrides);
    impl->b = plainDesc(shape.b, shape.bStrides);
    impl->out = plainDesc(shape.out, shape.outStrides);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    impl->pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(impl->a, impl->b, impl->out), attr, cpuEngine());
    const std::string name = impl->pd.impl_info_str();
    if (name.rfind("ref", 0) == 0) throw std::runtime_error("oneDNN matmul: only the reference implementation (" + name + ")");
    impl->prim = dnnl::matmul(impl->pd);
    impl->scratchBytes = impl->pd.scratchpad_desc().get_size();
    return std::unique_ptr<DnnlMatmul>(new DnnlMatmul(std::move(impl)));
  } catch (const dnnl::error& e) {
    throw std::runtime_error(std::string("oneDNN: ") + e.what());
  }
}

const DnnlMatmulShape& DnnlMatmul::shape() const { return impl_->shape; }

size_t DnnlMatmul::workspaceBytes() const { return impl_->scratchBytes; }

void DnnlMatmul::run(const float* a, const float* b, float* out, void* workspace) const {
  const Impl& m = *impl_;
  const dnnl::engine& eng = cpuEngine();
  dnnl::stream stream(eng);
  memory am(m.a, eng, const_cast<float*>(a));
  memory bm(m.b, eng, const_cast<float*>(b));
  memory om(m.out, eng, out);
  memory scratch(m.pd.scratchpad_desc(), eng, workspace);
  m.prim.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, om}, {DNNL_ARG_SCRATCHPAD, scratch}});
  stream.wait();
}

std::string DnnlMatmul::describe() const { return impl_->pd.impl_info_str(); }

}  // namespace dynamo::backends

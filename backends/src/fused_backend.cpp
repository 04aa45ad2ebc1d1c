// "fused" (backends.def): the runtime of the fused code generator.
//
//   compile: lowerGraph -> one C++ source per kernel -> compileKernels (parallel, disk cache)
//   call:    check inputs against the compiled metadata (else run the graph eagerly: nothing has
//            happened yet), take an arena for intermediates from a pool (one arena per concurrent
//            call, allocated once per compiled graph), then per step: allocate escaping outputs,
//            call the kernel with raw data pointers and the GIL released, or call the extern
//            node's own target (an ATen op or torch function) through Python; build the outputs.
//
// Graphs that need autograd (a call node's result requires grad) go through the AOT layer with
// the preset "fused": it traces the joint forward/backward ATen graph, decomposes and partitions
// it, and hands the forward and backward graphs back to compileFused (insideAutograd: they run
// inside its torch.autograd.Function). This is the one file of backends/ that includes torch.
#include <torch/csrc/autograd/python_variable.h>

#include <ATen/TensorOperators.h>
#include <ATen/autocast_mode.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/mm.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include <sys/mman.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "backends_internal.h"
#ifdef DYNAMO_HAVE_DNNL
#include "fused_dnnl_conv.h"
#include "fused_dnnl_matmul.h"
#endif
#include "float_scan.h"
#include "fused_blas_split.h"
#include "fused_program_cache.h"
#include "fused_torch_linear.h"
#include "dynamo/backends/fused.h"
#include "dynamo/codegen/emit.h"
#include "dynamo/codegen/kernel_cache.h"
#include "dynamo/codegen/kernel_template.h"
#include "dynamo/codegen/inplace.h"
#include "dynamo/codegen/lowering.h"
#include "dynamo/core/graph_python.h"
#include "dynamo/core/graph_runner.h"

namespace dynamo::backends {
namespace {

using codegen::BufferKind;
using codegen::DType;
using KernelFn = void (*)(void* const*);

at::ScalarType scalarType(DType t) {
  switch (t) {
    case DType::kBool: return at::kBool;
    case DType::kUInt8: return at::kByte;
    case DType::kInt8: return at::kChar;
    case DType::kInt16: return at::kShort;
    case DType::kInt32: return at::kInt;
    case DType::kInt64: return at::kLong;
    case DType::kFloat32: return at::kFloat;
    case DType::kFloat64: return at::kDouble;
  }
  return at::kFloat;
}

// Dynamo's caching CPU allocator for kernel outputs: a fresh 32 MB buffer costs more in page
// faults than a pointwise kernel's arithmetic, so blocks of 64 KiB and more come back to a pool
// when the user frees the tensor, and the next call takes them again (already faulted in). At
// most kPoolLimit bytes are kept; the pool is never destroyed (tensors may outlive statics).
class BlockPool {
 public:
  static constexpr size_t kMinBytes = 64 * 1024;
  static constexpr size_t kPoolLimit = size_t(1) << 30;

  static BlockPool& instance() {
    static auto* pool = new BlockPool();
    return *pool;
  }

  void* take(size_t bytes) {
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = free_.find(bytes);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= bytes;
        return p;
      }
    }
    // Straight from the kernel, not glibc's heap: a pool block lives across calls, and one in the
    // heap between the short-lived blocks of ATen's ops (conv outputs) would keep glibc from
    // reusing and returning the memory around it (resnet18_b8's heap kept ~55 MiB more free
    // pages than eager's). Page-aligned, so 64-byte aligned.
    void* p = ::mmap(nullptr, mappedBytes(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return p;
  }

  void give(void* p, size_t bytes) {
    std::lock_guard<std::mutex> g(mu_);
    if (cached_ + bytes > kPoolLimit) {
      ::munmap(p, mappedBytes(bytes));
      return;
    }
    free_[bytes].push_back(p);
    cached_ += bytes;
  }

 private:
  static size_t mappedBytes(size_t bytes) {
    static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    return (bytes + page - 1) / page * page;
  }

  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
};

// The c10::Allocator of kernel outputs: blocks of kMinBytes and more from the pool (a DataPtr
// whose context remembers the block's size), smaller ones from torch's CPU allocator. Storages
// made with it stay resizable like eager's (a resize allocates through it again).
struct PoolBlock {
  void* ptr;
  size_t bytes;
};

void poolDelete(void* ctx) {
  auto* b = static_cast<PoolBlock*>(ctx);
  BlockPool::instance().give(b->ptr, b->bytes);
  delete b;
}

// torch 2.x made Allocator::allocate non-const and added the pure virtual copy_data.
#if TORCH_VERSION_MAJOR >= 2
#define DYNAMO_ALLOCATE_CONST
#else
#define DYNAMO_ALLOCATE_CONST const
#endif

class PoolAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) DYNAMO_ALLOCATE_CONST override {
    if (n < BlockPool::kMinBytes) return c10::GetCPUAllocator()->allocate(n);
    void* p = BlockPool::instance().take(n);
    return c10::DataPtr(p, new PoolBlock{p, n}, &poolDelete, c10::Device(c10::DeviceType::CPU));
  }
#if TORCH_VERSION_MAJOR >= 2
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif
};
#undef DYNAMO_ALLOCATE_CONST

at::Tensor newOutput(const codegen::Buffer& buf) {
  static PoolAllocator allocator;
  return at::Tensor(at::detail::empty_strided_generic(
      buf.shape, buf.strides, &allocator, c10::DispatchKeySet(c10::DispatchKey::CPU), scalarType(buf.dtype)));
}

// Whether autocast is on now (entered around the compiled function): eager's ops would cast their
// inputs, which kernels do not do.
bool autocastOn() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  return at::autocast::is_autocast_enabled(at::kCPU) || at::autocast::is_autocast_enabled(at::kCUDA);
#else
  return at::autocast::is_cpu_enabled() || at::autocast::is_enabled();
#endif
}

bool matches(const at::Tensor& t, const codegen::Buffer& b) {
  if (!t.defined() || !t.device().is_cpu() || t.layout() != at::kStrided || t.is_conj() || t.is_neg() ||
      t.scalar_type() != scalarType(b.dtype) || t.dim() != static_cast<int64_t>(b.shape.size())) {
    return false;
  }
  for (size_t d = 0; d < b.shape.size(); ++d) {
    if (t.size(d) != b.shape[d]) return false;
    if (b.shape[d] > 1 && t.stride(d) != b.strides[d]) return false;
  }
  return true;
}

// Releases the GIL for the lifetime of the object.
struct NoGil {
  PyThreadState* ts = PyEval_SaveThread();
  ~NoGil() { PyEval_RestoreThread(ts); }
};

class FusedFn final : public core::CompiledGraphFn {
 public:
  // runToken: nonzero when the trace store records these kernels (reportBackendKernels): the
  // first core::kTimedKernelCalls calls time each kernel and report the means once.
  // sizeParams: per kernel, its size parameters (empty for a kernel with literal sizes).
  // inference: not a graph of the AOT layer (its mm steps may take torch's oneDNN linear).
  FusedFn(const core::Graph& graph, codegen::Program program, std::vector<KernelFn> fns, uint64_t runToken,
          std::vector<std::vector<int64_t>> sizeParams, bool inference)
      : graph_(graph), program_(std::move(program)), fns_(std::move(fns)), sizeParams_(std::move(sizeParams)),
        eager_(graph), runToken_(runToken) {
    dnnlLinear_ = inference && !std::getenv("DYNAMO_FUSED_NO_DNNL") && !std::getenv("DYNAMO_FUSED_NO_DNNL_MM") &&
                  torchDnnlLinearAvailable();
    for (size_t i = 0; i < graph.inputs().size(); ++i) slot_[graph.inputs()[i].get()] = -1 - static_cast<int>(i);
    for (size_t i = 0; i < graph.body().size(); ++i) slot_[graph.body()[i].get()] = static_cast<int>(i);
    for (const codegen::Kernel& k : program_.kernels) {
      params_.push_back(codegen::kernelParams(k));
      scalarSlots_.push_back(codegen::kernelScalars(k));
    }
  }

  // Every input a tensor with the sizes and strides of its placeholder's meta, or a Python number
  // of the type `numbers` gives for it ('i' int, 'f' float: its value does not matter).
  bool takesSizes(PyObject* const* inputs, size_t count, const std::string& numbers) const {
    const auto& ins = graph_.inputs();
    if (count != ins.size()) return false;
    for (size_t i = 0; i < count; ++i) {
      const char number = i < numbers.size() ? numbers[i] : '\0';
      if (number == 'i' || number == 'f') {
        if (number == 'i' ? !PyLong_CheckExact(inputs[i]) : !PyFloat_CheckExact(inputs[i])) return false;
        continue;
      }
      const auto& meta = ins[i]->meta().tensor;
      if (!meta || !meta->strides || !THPVariable_Check(inputs[i])) return false;
      const at::Tensor& t = THPVariable_Unpack(inputs[i]);
      if (t.sizes() != c10::IntArrayRef(meta->shape) || t.strides() != c10::IntArrayRef(*meta->strides)) return false;
    }
    return true;
  }

  PyObject* call(PyObject* const* inputs, size_t count, size_t* failedAt) const override {
    try {
      return run(inputs, count, failedAt);
    } catch (const core::PythonError&) {
      return nullptr;
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
      return nullptr;
    }
  }

 private:
  struct Frame {
    std::vector<at::Tensor> tensors;
    std::vector<void*> ptrs;
    at::Tensor* workspace = nullptr;  // the workspace of steps with none in the arena (bmm, convs)
    char* arena = nullptr;            // this call's arena (intermediates, conv workspaces)
    std::vector<core::PyObjectRef> values;  // body node values (extern results, wrapped outputs)
    PyObject* const* inputs = nullptr;
    std::vector<int64_t> scalars;  // Program::scalars' values: an int64, or a double's bits
    // The result buffer of the step just run when a oneDNN conv with a clip post-op (finite
    // bounds) wrote it: every value is within the bounds, so the next step, when it is a conv
    // with a post-op reading that buffer, skips its NaN/inf scan of it (set by runDnnlConv,
    // moved to finiteInput before each step).
    int clippedResult = -1;
    int finiteInput = -1;  // the step being run may take this buffer as finite without a scan
  };

  // The values of the Python numbers kernels read (Program::scalars) into f.scalars; false when
  // one is not a number of the compiled type or an int does not fit in int64 (then the call
  // runs on the eager runner, before anything ran, exactly as eager would run it).
  bool readScalars(PyObject* const* inputs, size_t count, Frame& f) const {
    for (const codegen::ScalarArg& a : program_.scalars) {
      if (a.input < 0 || static_cast<size_t>(a.input) >= count) return false;
      PyObject* v = inputs[a.input];  // borrowed
      if (a.dtype == DType::kInt64) {
        if (!PyLong_CheckExact(v)) return false;
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow != 0 || (x == -1 && PyErr_Occurred())) {
          PyErr_Clear();
          return false;
        }
        f.scalars.push_back(x);
      } else {
        if (!PyFloat_CheckExact(v)) return false;
        double d = PyFloat_AS_DOUBLE(v);
        int64_t bits;
        std::memcpy(&bits, &d, sizeof bits);
        f.scalars.push_back(bits);
      }
    }
    return true;
  }

  // A call's planned memory: the arena of intermediates and the conv steps' workspace.
  struct Scratch {
    at::Tensor arena, workspace;
  };
  // The scratch memory of one call, from the pool (allocated once per concurrent call, not per
  // call), returned when the call ends.
  struct ArenaLease {
    const FusedFn* fn;
    Scratch scratch;
    ~ArenaLease() {
      if (!scratch.arena.defined() && !scratch.workspace.defined()) return;
      std::lock_guard<std::mutex> g(fn->mu_);
      fn->arenas_.push_back(std::move(scratch));
    }
  };

  PyObject* run(PyObject* const* inputs, size_t count, size_t* failedAt) const {
    const auto& bufs = program_.buffers;
    Frame f;
    f.tensors.resize(bufs.size());
    f.ptrs.assign(bufs.size(), nullptr);
    f.values.resize(graph_.body().size());
    f.inputs = inputs;
    if (autocastOn()) return eager_.run(inputs, count, failedAt);  // eager's casts: nothing ran yet
    if (!readScalars(inputs, count, f)) return eager_.run(inputs, count, failedAt);  // nothing ran yet
    for (size_t i = 0; i < count && i < program_.inputBuffer.size(); ++i) {
      int b = program_.inputBuffer[i];
      if (b < 0) continue;
      if (!THPVariable_Check(inputs[i]) || !matches(THPVariable_Unpack(inputs[i]), bufs[b])) {
        return eager_.run(inputs, count, failedAt);  // not what was compiled: nothing ran yet
      }
      f.tensors[b] = THPVariable_Unpack(inputs[i]);
      f.ptrs[b] = f.tensors[b].data_ptr();
    }
    ArenaLease lease{this, {}};
    if (program_.arenaBytes > 0 || !program_.convs.empty()) {
      std::lock_guard<std::mutex> g(mu_);
      if (!arenas_.empty()) {
        lease.scratch = std::move(arenas_.back());
        arenas_.pop_back();
      }
    }
    f.workspace = &lease.scratch.workspace;
#ifdef DYNAMO_HAVE_DNNL
    std::call_once(scratchOnce_, [this] { placeConvScratch(); });
#else
    std::call_once(scratchOnce_, [this] { arenaTotal_ = program_.arenaBytes; });
#endif
    if (arenaTotal_ > 0) {
      at::Tensor& arena = lease.scratch.arena;
      if (!arena.defined()) arena = at::empty({arenaTotal_}, at::TensorOptions().dtype(at::kByte));
      auto* base = static_cast<char*>(arena.data_ptr());
      f.arena = base;
      for (const codegen::Buffer& b : bufs) {
        if (b.kind == BufferKind::kIntermediate && b.arenaOffset >= 0) f.ptrs[b.id] = base + b.arenaOffset;
      }
    }
    // Timed only for a traced compile's first calls (never on the untraced path).
    std::vector<double> kernelUs;
    if (runToken_ != 0 && timedCalls_.load(std::memory_order_relaxed) < core::kTimedKernelCalls)
      kernelUs.assign(fns_.size(), 0.0);
    for (const codegen::Step& s : program_.steps) {
      f.finiteInput = std::exchange(f.clippedResult, -1);
      if (s.isKernel) {
        runKernel(s.kernel, f, kernelUs.empty() ? nullptr : &kernelUs[s.kernel]);
      } else if (s.conv >= 0) {
        runConv(s.conv, f);
      } else if (s.matmul >= 0) {
        runMatmul(s.matmul, f);
      } else if (!runExtern(s, f)) {
        if (failedAt) *failedAt = static_cast<size_t>(s.node);
        return nullptr;
      }
    }
    core::PyObjectRef out = core::argToPython(graph_.output()->outputValue(),
                                              [&](const core::NodeRef& n) { return outputOf(n, f); });
    if (!kernelUs.empty()) addTimedCall(kernelUs);
    if (!trimmed_.exchange(true, std::memory_order_relaxed)) releaseFreedHeap();
    return out.release();
  }

  // After the first call (the compile's and the conv prepacking's temporaries are freed by then),
  // glibc's heap keeps their pages: resnet18_b8 kept ~125 MiB free in its heap against eager's
  // ~37 MiB, all of it resident. malloc_trim hands the free pages back once per compiled graph;
  // later calls fault in only what their buffers need again.
  static void releaseFreedHeap() {
#ifdef __GLIBC__
    PyThreadState* ts = PyEval_SaveThread();
    malloc_trim(0);
    PyEval_RestoreThread(ts);
#endif
  }

  // One timed call's kernel times; the last of the first kTimedKernelCalls reports the means
  // (GIL held: the sink writes them).
  void addTimedCall(const std::vector<double>& kernelUs) const {
    std::vector<double> means;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (timedCalls_.load(std::memory_order_relaxed) >= core::kTimedKernelCalls) return;
      if (timedUs_.empty()) timedUs_.assign(kernelUs.size(), 0.0);
      for (size_t i = 0; i < kernelUs.size(); ++i) timedUs_[i] += kernelUs[i];
      const int calls = timedCalls_.fetch_add(1, std::memory_order_relaxed) + 1;
      if (calls < core::kTimedKernelCalls) return;
      for (double us : timedUs_) means.push_back(us / calls);
    }
    core::reportKernelRunTimes(runToken_, means, core::kTimedKernelCalls);
  }

  void runKernel(int k, Frame& f, double* us = nullptr) const {
    for (int b : program_.kernels[k].writes) {
      const codegen::Buffer& buf = program_.buffers[b];
      // An intermediate written over in place by a kernel output (codegen/inplace.h) lives in
      // that output's block, made when the intermediate is first written.
      const int home = buf.storage >= 0 && program_.buffers[buf.storage].kind == BufferKind::kOutput ? buf.storage : b;
      // (made by the first kernel that writes it: the inputs of a cat fill slices of one buffer)
      if (program_.buffers[home].kind != BufferKind::kOutput) continue;
      if (!f.tensors[home].defined()) {
        f.tensors[home] = newOutput(program_.buffers[home]);
        f.ptrs[home] = f.tensors[home].data_ptr();
      }
      f.ptrs[b] = f.ptrs[home];
    }
    std::vector<void*> args;
    for (int b : params_[k]) args.push_back(f.ptrs[b]);
    // The parameter array: the call's scalars this kernel reads, then its size parameters.
    std::vector<int64_t> array;
    if (!scalarSlots_[k].empty()) {
      for (int slot : scalarSlots_[k]) array.push_back(f.scalars[slot]);
      array.insert(array.end(), sizeParams_[k].begin(), sizeParams_[k].end());
      args.push_back(array.data());
    } else if (!sizeParams_[k].empty()) {
      args.push_back(const_cast<int64_t*>(sizeParams_[k].data()));
    }
    PyThreadState* ts = PyEval_SaveThread();
    // torch.profiler shows each kernel call under the kernel's name (a flag test when off)
    RECORD_FUNCTION(std::string(program_.kernels[k].name), c10::ArrayRef<const c10::IValue>{});
    if (us == nullptr) {
      fns_[k](args.data());
    } else {
      const auto start = std::chrono::steady_clock::now();
      fns_[k](args.data());
      *us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    }
    PyEval_RestoreThread(ts);
  }

  // The conv step's weight (in the layout the conv runs in: at::convolution's layout follows it)
  // and bias (contiguous), with batch_norm folded in, from the tensors as they are in this call:
  // the ATen path's operands.
  std::pair<at::Tensor, at::Tensor> folded(const codegen::ConvStep& c, const Frame& f) const {
    auto opt = [&](int b) { return b >= 0 ? f.tensors[b].detach() : at::Tensor(); };
    at::Tensor w = opt(c.weight), bias = opt(c.bias);
    if (c.bnMean >= 0) {
      // batch_norm(conv(x, w, b)) = conv(x, w * s, (b - mean) * s + beta), s = gamma / sqrt(var + eps)
      at::Tensor scale = (opt(c.bnVar) + c.bnEps).rsqrt();
      if (c.bnWeight >= 0) scale = scale * opt(c.bnWeight);
      at::Tensor shift = bias.defined() ? bias - opt(c.bnMean) : -opt(c.bnMean);
      bias = shift * scale;
      if (c.bnBias >= 0) bias = bias + opt(c.bnBias);
      w = w * scale.reshape({-1, 1, 1, 1});
    }
    const at::MemoryFormat wf = resultFormat(program_.buffers[c.result]).value_or(at::MemoryFormat::ChannelsLast);
    return {w.contiguous(wf), bias.defined() ? bias.contiguous() : bias};
  }

  // The memory format of a conv step's 4-d result buffer: channels-last or contiguous (NCHW),
  // or none (another layout, or one both formats describe).
  static c10::optional<at::MemoryFormat> resultFormat(const codegen::Buffer& b) {
    if (b.shape.size() != 4 || b.shape[1] <= 1) return c10::nullopt;
    const std::vector<int64_t>& st = b.strides;
    const int64_t c = b.shape[1], h = b.shape[2], w = b.shape[3];
    if (st == std::vector<int64_t>{h * w * c, 1, w * c, c}) return at::MemoryFormat::ChannelsLast;
    if (st == std::vector<int64_t>{c * h * w, h * w, w, 1}) return at::MemoryFormat::Contiguous;
    return c10::nullopt;
  }

#ifdef DYNAMO_HAVE_DNNL
  // Conv step k's oneDNN primitive, made at its first call from the step's shapes alone (never
  // from the weights' values, which every call reads, folds and packs afresh: fused_dnnl_conv.h),
  // or null when oneDNN cannot take it (the step then runs through ATen).
  std::shared_ptr<const DnnlConv> primitive(int k) const {
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = convPrimitives_.find(k);
      if (it != convPrimitives_.end()) return it->second;
    }
    std::shared_ptr<const DnnlConv> d = useDnnl_ ? makeDnnl(k) : nullptr;
    std::lock_guard<std::mutex> g(mu_);
    return convPrimitives_.emplace(k, std::move(d)).first->second;  // (a racing call's, if first)
  }

  // Conv step k as a oneDNN primitive, or null. The primitive reads the input buffer and writes
  // the result buffer in their planned strides: NCHW results are computed in oneDNN's blocked
  // layout (reordered in and out through the workspace), the others in channels-last.
  std::shared_ptr<const DnnlConv> makeDnnl(int k) const {
    const codegen::ConvStep& c = program_.convs[k];
    const codegen::Buffer& in = program_.buffers[c.input];
    const codegen::Buffer& out = program_.buffers[c.result];
    const codegen::Buffer& wb = program_.buffers[c.weight];
    if (in.shape.size() != 4 || in.dtype != DType::kFloat32 || in.numel() == 0 || out.numel() == 0) return nullptr;
    if (wb.shape.size() != 4 || wb.dtype != DType::kFloat32) return nullptr;
    for (int b : {c.bias, c.bnMean, c.bnVar, c.bnWeight, c.bnBias}) {
      if (b >= 0 && program_.buffers[b].dtype != DType::kFloat32) return nullptr;
    }
    DnnlConvShape s;
    s.input = in.shape;
    s.inputStrides = in.strides;
    s.weight = wb.shape;
    s.output = out.shape;
    s.outputStrides = out.strides;
    s.stride = c.stride;
    s.padding = c.padding;
    s.dilation = c.dilation;
    s.groups = c.groups;
    s.bias = c.bias >= 0 || c.bnMean >= 0;
    s.blocked = resultFormat(out) == c10::optional<at::MemoryFormat>(at::MemoryFormat::Contiguous);
    s.post = c.post == codegen::ConvPostOp::kRelu ? DnnlPostOp::kRelu
             : c.post == codegen::ConvPostOp::kClip ? DnnlPostOp::kClip
                                                     : DnnlPostOp::kNone;
    s.clipLo = static_cast<float>(c.clipLo);
    s.clipHi = static_cast<float>(c.clipHi);
    try {
      std::shared_ptr<const DnnlConv> d = DnnlConv::make(s);
      if (logEnabled("fusion")) std::fprintf(stderr, "[dynamo fusion] conv step %d: oneDNN %s\n", k, d->describe().c_str());
      return d;
    } catch (const std::exception& e) {
      if (logEnabled("fusion")) std::fprintf(stderr, "[dynamo fusion] conv step %d: ATen (%s)\n", k, e.what());
      return nullptr;
    }
  }

  // The operands of conv step k as they are in this call, for DnnlConv::run: the weight
  // (contiguous: a copy only when the module keeps another layout) and, with batch_norm folded,
  // s = gamma / sqrt(var + eps) and b' = (b - mean) * s + beta per output channel (float32, as
  // makeDnnl() checked). The tensors hold what the pointers point into.
  struct LiveWeights {
    at::Tensor weight;
    std::vector<float> scale, bias;
    std::vector<at::Tensor> held;
    DnnlConvWeights pointers() const {
      return {weight.data_ptr<float>(), scale.empty() ? nullptr : scale.data(), bias.empty() ? nullptr : bias.data()};
    }
  };
  LiveWeights liveWeights(const codegen::ConvStep& c, const Frame& f) const {
    LiveWeights lw;
    lw.weight = f.tensors[c.weight].is_contiguous() ? f.tensors[c.weight] : f.tensors[c.weight].contiguous();
    const auto o = static_cast<size_t>(lw.weight.size(0));
    auto vec = [&](int b) -> const float* {
      if (b < 0) return nullptr;
      const at::Tensor& t = f.tensors[b];
      lw.held.push_back(t.is_contiguous() ? t : t.contiguous());
      return lw.held.back().data_ptr<float>();
    };
    const float* bias = vec(c.bias);
    if (c.bnMean < 0) {
      if (bias) lw.bias.assign(bias, bias + o);
      return lw;
    }
    const float *mean = vec(c.bnMean), *var = vec(c.bnVar), *gamma = vec(c.bnWeight), *beta = vec(c.bnBias);
    const auto eps = static_cast<float>(c.bnEps);
    lw.scale.resize(o);
    lw.bias.resize(o);
    for (size_t i = 0; i < o; ++i) {
      const float s = (1.0f / std::sqrt(var[i] + eps)) * (gamma ? gamma[i] : 1.0f);
      lw.scale[i] = s;
      lw.bias[i] = ((bias ? bias[i] : 0.0f) - mean[i]) * s + (beta ? beta[i] : 0.0f);
    }
    return lw;
  }

  // Places each conv step's oneDNN workspace in the arena bytes that no buffer holds during its
  // step (first fit; the arena grows only when no gap is large enough), once, before the first
  // arena is made: resnet18's layer4 convs pack a 9 MiB weight while nearly all of the arena
  // (24.5 MiB, sized by the stem's result) is free, so the workspace costs no memory of its own.
  // The primitives are made here (from the shapes) instead of at their first call.
  void placeConvScratch() const {
    arenaTotal_ = program_.arenaBytes;
    convScratch_.assign(program_.convs.size(), -1);
    if (program_.convs.empty()) return;
    const std::vector<std::pair<int, int>> range = codegen::arenaLiveRanges(program_);
    const int steps = static_cast<int>(program_.steps.size());
    for (int s = 0; s < steps; ++s) {
      const codegen::Step& st = program_.steps[s];
      if (st.isKernel || st.conv < 0) continue;
      std::shared_ptr<const DnnlConv> d = primitive(st.conv);
      if (!d) continue;
      std::vector<std::pair<int64_t, int64_t>> live;  // [begin, end) of the arena bytes held at s
      for (const codegen::Buffer& b : program_.buffers) {
        const int root = b.storage >= 0 ? b.storage : b.id;
        if (b.arenaOffset < 0 || range[root].first < 0 || range[root].first > s || range[root].second < s) continue;
        const int64_t bytes = codegen::arenaBytes(b);
        live.emplace_back(b.arenaOffset, b.arenaOffset + (bytes + 63) / 64 * 64);
      }
      std::sort(live.begin(), live.end());
      const auto need = static_cast<int64_t>((d->workspaceBytes() + 63) / 64 * 64);
      int64_t at = 0;
      for (const auto& [begin, end] : live) {
        if (at + need <= begin) break;
        at = std::max(at, end);
      }
      convScratch_[st.conv] = at;
      arenaTotal_ = std::max(arenaTotal_, at + need);
    }
  }

  // Conv step k through its oneDNN primitive, into the planned result buffer; false when the
  // step runs through ATen instead (no primitive; a NaN or inf among the operands of a step with
  // a post-op; oneDNN failed to execute).
  bool runDnnlConv(int k, Frame& f) const {
    const codegen::ConvStep& c = program_.convs[k];
    const codegen::Buffer& rb = program_.buffers[c.result];
    std::shared_ptr<const DnnlConv> d = primitive(k);
    if (!d) return false;
    // A ReLU or clip post-op inside oneDNN maps a NaN conv output to its lower bound, where
    // eager's relu/hardtanh keep NaN. A NaN or inf in the input or the weights is what makes one
    // (finite operands overflow to NaN only through inf - inf in a sum): such a call runs ATen.
    // The input is scanned unless the step just before clipped it into finite bounds (mobilenet's
    // depthwise convs read their expand conv's ReLU6 output, the largest activations it has).
    const bool post = c.post != codegen::ConvPostOp::kNone;
    if (post && c.input != f.finiteInput && !bufferFinite(f, c.input)) return false;
    const LiveWeights lw = liveWeights(c, f);
    // Into the planned buffer: its arena slot, or a pool block when it escapes.
    if (rb.kind != BufferKind::kIntermediate) {
      f.tensors[c.result] = newOutput(rb);
      f.ptrs[c.result] = f.tensors[c.result].data_ptr();
    }
    void* ws = nullptr;
    if (convScratch_[k] >= 0 && f.arena) {
      ws = f.arena + convScratch_[k];  // arena bytes no buffer holds during this step
    } else {
      at::Tensor& t = *f.workspace;
      const auto need = static_cast<int64_t>(d->workspaceBytes());
      if (!t.defined() || t.numel() < need) t = at::empty({need}, at::TensorOptions().dtype(at::kByte));
      ws = t.data_ptr();
    }
    try {
      NoGil nogil;
      if (!d->run(static_cast<const float*>(f.ptrs[c.input]), static_cast<float*>(f.ptrs[c.result]), lw.pointers(),
                  post, ws)) {
        return false;
      }
      // oneDNN's clip leaves every value in [lo, hi] (its operands were checked finite above)
      if (c.post == codegen::ConvPostOp::kClip && std::isfinite(c.clipLo) && std::isfinite(c.clipHi)) {
        f.clippedResult = c.result;
      }
      return true;
    } catch (const std::exception& e) {
      // (seen on stack 2: oneDNN's gemm-based grouped conv could not execute) The step runs
      // through ATen from now on, this call included: the input is untouched and ATen
      // overwrites the whole result.
      if (logEnabled("fusion")) std::fprintf(stderr, "[dynamo fusion] conv step %d: ATen (%s)\n", k, e.what());
      std::lock_guard<std::mutex> g(mu_);
      convPrimitives_[k] = nullptr;
      return false;
    }
  }
#endif

  // Buffer b of this call as a tensor: its own, or a view of its arena slot.
  at::Tensor bufferTensor(const Frame& f, int b) const {
    if (f.tensors[b].defined()) return f.tensors[b];
    const codegen::Buffer& buf = program_.buffers[b];
    return at::from_blob(f.ptrs[b], buf.shape, buf.strides, at::TensorOptions().dtype(scalarType(buf.dtype)));
  }

  // True when buffer b of this call holds no NaN or inf (not float32: true). Scans the span its
  // strides cover, gaps included (a NaN in a gap only takes the exact path).
  bool bufferFinite(const Frame& f, int b) const {
    const codegen::Buffer& buf = program_.buffers[b];
    if (buf.dtype != DType::kFloat32 || buf.numel() == 0) return true;
    int64_t span = 1;
    for (size_t d = 0; d < buf.shape.size(); ++d) {
      if (buf.strides[d] < 0) return false;
      span += (buf.shape[d] - 1) * buf.strides[d];
    }
    return allFinite(static_cast<const float*>(f.ptrs[b]), static_cast<size_t>(span));
  }

  // A conv step: oneDNN's primitive when it takes the step, else at::convolution with the
  // weights folded for this call and the post-op as eager runs it (NaN stays NaN). Nothing about
  // the weights is kept between calls, so every way of writing them is seen.
  void runConv(int k, Frame& f) const {
#ifdef DYNAMO_HAVE_DNNL
    if (runDnnlConv(k, f)) return;
#endif
    const codegen::ConvStep& c = program_.convs[k];
    const codegen::Buffer& rb = program_.buffers[c.result];
    at::Tensor out;
    {
      NoGil nogil;
      at::NoGradGuard noGrad;
      const at::Tensor in = bufferTensor(f, c.input);
      auto [weight, bias] = folded(c, f);
      out = at::convolution(in, weight, bias, c.stride, c.padding, c.dilation, false, {0, 0}, c.groups);
      if (c.post == codegen::ConvPostOp::kRelu) out.relu_();
      if (c.post == codegen::ConvPostOp::kClip) out.clamp_(c.clipLo, c.clipHi);
      if (rb.kind == BufferKind::kIntermediate) {
        bufferTensor(f, c.result).copy_(out);
        return;
      }
    }
    f.tensors[c.result] = inLayout(out, rb);
    f.ptrs[c.result] = f.tensors[c.result].data_ptr();
  }

  // The product into a buffer of the caching pool (already faulted in after the first call), by
  // at::mm_out with the GIL released; a linear's N-d input is a matrix of its rows. An inference
  // graph's large mm step whose right operand is a contiguous [n, k] weight read transposed
  // takes torch's oneDNN linear instead where torch has it (fused_torch_linear.h): its result
  // is the op's own new tensor.
  void runMatmul(int k, Frame& f) const {
    const codegen::MatmulStep& m = program_.matmuls[k];
    const codegen::Buffer& rb = program_.buffers[m.result];
    const at::Tensor& a = f.tensors[m.a];
    const at::Tensor& b = f.tensors[m.b];
    at::Tensor a2, b2;
    if (!m.batched) {
      a2 = a.dim() == 2 ? a : a.reshape({-1, a.size(-1)});
      b2 = m.transposeB ? b.t() : b;
    }
    const bool viaDnnl = dnnlLinear_ && !m.batched && contiguousBuffer(rb) && torchDnnlLinearFits(a2, b2.t());
    at::Tensor out = viaDnnl ? at::Tensor() : newOutput(rb);
    PyThreadState* ts = PyEval_SaveThread();
    try {
      at::NoGradGuard noGrad;
      if (m.batched) {
        if (!runDnnlBmm(k, a, b, out, f)) at::bmm_out(out, a, b);
      } else if (std::optional<at::Tensor> y = viaDnnl ? torchDnnlLinear(a2, b2.t()) : std::nullopt) {
        out = y->view(rb.shape);
        logMmStep(k, "oneDNN linear (torch's mkldnn::_linear_pointwise)");
      } else {
        if (!out.defined()) out = newOutput(rb);
        at::Tensor out2 = out.dim() == 2 ? out : out.view({-1, out.size(-1)});
        if (!runSplitMm(k, a2, b2, out2)) at::mm_out(out2, a2, b2);
      }
    } catch (...) {
      PyEval_RestoreThread(ts);
      throw;
    }
    PyEval_RestoreThread(ts);
    f.tensors[m.result] = out;
    f.ptrs[m.result] = out.data_ptr();
  }

  static bool contiguousBuffer(const codegen::Buffer& rb) {
    int64_t expect = 1;
    for (size_t d = rb.shape.size(); d-- > 0;) {
      if (rb.shape[d] != 1 && rb.strides[d] != expect) return false;
      expect *= rb.shape[d];
    }
    return true;
  }

  // An mm step's product on the OpenMP pool (fused_blas_split.h: OpenBLAS's own threads would
  // fight libgomp's spinning workers for the cores), float32 with 2+ torch threads; false (the
  // caller runs at::mm_out) otherwise, without OpenBLAS, or with DYNAMO_FUSED_BLAS_POOL=0.
  bool runSplitMm(int k, const at::Tensor& a, const at::Tensor& b, at::Tensor& out) const {
    if (!splitMm_ || a.scalar_type() != at::kFloat || b.scalar_type() != at::kFloat ||
        out.scalar_type() != at::kFloat || out.stride(1) != 1) {
      return false;
    }
    const int threads = at::get_num_threads();
    if (threads < 2 || a.numel() == 0 || b.numel() == 0) return false;
    BlasMatrix am{a.data_ptr<float>(), a.size(0), a.size(1), a.stride(0), a.stride(1)};
    BlasMatrix bm{b.data_ptr<float>(), b.size(0), b.size(1), b.stride(0), b.stride(1)};
    const bool done = blasSplitMm(am, bm, out.data_ptr<float>(), out.stride(0), threads);
    logMmStep(k, done ? "OpenBLAS on the OpenMP pool" : "ATen (operand strides)");
    return done;
  }

  // DYNAMO_LOGS=fusion: the path mm step k took, at its first call.
  void logMmStep(int k, const char* path) const {
    if (!logEnabled("fusion")) return;
    std::lock_guard<std::mutex> g(mu_);
    if (splitLogged_.insert(k).second) std::fprintf(stderr, "[dynamo fusion] mm step %d: %s\n", k, path);
  }

  // bmm step k through oneDNN's batched matmul (fused_dnnl_matmul.h), made at its first call
  // from the operands' strides; false (the caller runs at::bmm_out) without oneDNN, for strides
  // other than the first call's, or where oneDNN has no fast implementation. GIL released.
  bool runDnnlBmm(int k, const at::Tensor& a, const at::Tensor& b, at::Tensor& out, Frame& f) const {
#ifdef DYNAMO_HAVE_DNNL
    if (!useDnnlBmm_ || a.numel() == 0 || b.numel() == 0 || out.numel() == 0) return false;
    DnnlMatmulShape want{a.sizes().vec(), a.strides().vec(), b.sizes().vec(), b.strides().vec(),
                         out.sizes().vec(), out.strides().vec()};
    std::shared_ptr<const DnnlMatmul> prim;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = bmmCache_.find(k);
      if (it == bmmCache_.end()) {
        try {
          it = bmmCache_.emplace(k, DnnlMatmul::make(want)).first;
          if (logEnabled("fusion"))
            std::fprintf(stderr, "[dynamo fusion] bmm step %d: oneDNN %s\n", k, it->second->describe().c_str());
        } catch (const std::exception& e) {
          if (logEnabled("fusion")) std::fprintf(stderr, "[dynamo fusion] bmm step %d: ATen (%s)\n", k, e.what());
          it = bmmCache_.emplace(k, nullptr).first;
        }
      }
      prim = it->second;
    }
    if (!prim) return false;
    const DnnlMatmulShape& have = prim->shape();
    if (have.aStrides != want.aStrides || have.bStrides != want.bStrides || have.outStrides != want.outStrides ||
        have.a != want.a || have.b != want.b) {
      return false;
    }
    at::Tensor& ws = *f.workspace;
    const auto need = static_cast<int64_t>(prim->workspaceBytes());
    if (need > 0 && (!ws.defined() || ws.numel() < need)) ws = at::empty({need}, at::TensorOptions().dtype(at::kByte));
    try {
      prim->run(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), need > 0 ? ws.data_ptr() : nullptr);
      return true;
    } catch (const std::exception& e) {
      // (stack 2: torch 2.11 brings its own oneDNN, and Debian's 2.6 primitive may refuse to
      // execute) The step runs through ATen from now on, this call included: bmm_out overwrites
      // the whole result and the operands are untouched.
      if (logEnabled("fusion")) std::fprintf(stderr, "[dynamo fusion] bmm step %d: ATen (%s)\n", k, e.what());
      std::lock_guard<std::mutex> g(mu_);
      bmmCache_[k] = nullptr;
      return false;
    }
#else
    (void)k, (void)a, (void)b, (void)out, (void)f;
    return false;
#endif
  }

  // t in the buffer's strides (a copy when ATen chose another layout).
  // A buffer with a stride 0 (eager's expand: the values repeat along that dimension; a
  // view of an expand computed by a kernel comes out dense) is filled through its first slice
  // along such dimensions: copy_ refuses to write into overlapping memory.
  static at::Tensor inLayout(const at::Tensor& t, const codegen::Buffer& b) {
    if (matches(t, b)) return t;
    at::Tensor r = newOutput(b);
    at::Tensor dst = r, src = t;
    for (size_t d = 0; d < b.shape.size(); ++d) {
      if (b.strides[d] == 0 && b.shape[d] > 1) {
        dst = dst.narrow(static_cast<int64_t>(d), 0, 1);
        src = src.narrow(static_cast<int64_t>(d), 0, 1);
      }
    }
    dst.copy_(src);
    return r;
  }

  // The value the user gets for graph output n: in eager's layout (the recorded strides) when
  // the program kept it in another one.
  PyObject* outputOf(const core::NodeRef& n, Frame& f) const {
    PyObject* v = valueOf(n, f);
    auto slotIt = slot_.find(n.get());
    const auto& meta = n->meta().tensor;
    if (slotIt == slot_.end() || slotIt->second < 0 || !meta || !meta->strides || !THPVariable_Check(v)) return v;
    const at::Tensor& t = THPVariable_Unpack(v);
    std::optional<DType> dt = codegen::dtypeFromTorch(meta->dtype);
    if (!dt || t.sizes().vec() != meta->shape) return v;
    codegen::Buffer want;
    want.dtype = *dt;
    want.shape = meta->shape;
    want.strides = *meta->strides;
    if (matches(t, want) || !denseLayout(want)) return v;
    at::Tensor r = newOutput(want);
    r.copy_(t);
    f.values[slotIt->second] = core::PyObjectRef::steal(core::checkPy(THPVariable_Wrap(r)));
    return f.values[slotIt->second].get();
  }

  // True when the strides are a permutation of contiguous ones (no overlap, no gap).
  static bool denseLayout(const codegen::Buffer& b) {
    std::vector<size_t> order(b.shape.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return b.strides[x] < b.strides[y]; });
    int64_t expect = 1;
    for (size_t i : order) {
      if (b.shape[i] == 1) continue;
      if (b.strides[i] != expect) return false;
      expect *= b.shape[i];
    }
    return true;
  }

  // Node n's value as a tensor over its arena slot, when a pooling extern reads it there (not kept
  // in f.values: the slot holds other buffers after the extern's step), else nullptr. The
  // tensor and its Python wrapper are kept in lent / lentValues for the call.
  PyObject* lentSlot(const core::NodeRef& n, Frame& f, std::vector<at::Tensor>& lent,
                     std::vector<core::PyObjectRef>& lentValues) const {
    auto slotIt = slot_.find(n.get());
    if (slotIt == slot_.end() || slotIt->second < 0 || f.values[slotIt->second]) return nullptr;
    const int b = program_.nodeBuffer[slotIt->second];
    if (b < 0 || f.tensors[b].defined() || program_.buffers[b].kind != BufferKind::kIntermediate) return nullptr;
    DYNAMO_INTERNAL_ASSERT(f.ptrs[b] != nullptr, "fused backend: node ", n->name(), " has no arena slot when it is needed");
    lent.push_back(bufferTensor(f, b));
    lentValues.push_back(core::PyObjectRef::steal(core::checkPy(THPVariable_Wrap(lent.back()))));
    return lentValues.back().get();
  }

  // The result of an extern call that read arena slots (lent), made to own its memory: pooling
  // returns a fresh tensor, but a result that shares a slot's storage (a view, or the argument
  // itself) would see the slot's next buffers, so it is copied. Returns the value (borrowed).
  PyObject* ownResult(const core::NodeRef& n, const std::vector<at::Tensor>& lent, core::PyObjectRef& value) const {
    DYNAMO_INTERNAL_ASSERT(THPVariable_Check(value.get()), "fused backend: the pooling call ", n->name(),
                           " returned no tensor");
    const at::Tensor& t = THPVariable_Unpack(value.get());
    for (const at::Tensor& slot : lent) {
      if (!t.is_alias_of(slot)) continue;
      value = core::PyObjectRef::steal(core::checkPy(THPVariable_Wrap(t.clone(at::MemoryFormat::Preserve))));
      break;
    }
    return value.get();
  }

  // The arena slots lent to an extern call that raised, given memory of their own: the error's
  // traceback keeps the call's frames, whose locals may hold the lent tensors (or views of them)
  // after this call has handed its arena to the next one. Each slot's storage, shared by every
  // view, is moved to a private copy of this call's bytes, so no live tensor aliases the arena.
  static void unlend(const std::vector<at::Tensor>& lent) {
    for (const at::Tensor& t : lent) {
      c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
      const size_t bytes = storage->nbytes();
      at::DataPtr own = c10::GetCPUAllocator()->allocate(bytes);
      if (bytes > 0) std::memcpy(own.get(), storage->data_ptr().get(), bytes);
      storage->set_data_ptr_noswap(std::move(own));
    }
  }

  // The Python value of node n (borrowed from the frame or the caller).
  PyObject* valueOf(const core::NodeRef& n, Frame& f) const {
    int slot = slot_.at(n.get());
    if (slot < 0) return f.inputs[-1 - slot];
    if (!f.values[slot]) {
      int b = program_.nodeBuffer[slot];
      DYNAMO_INTERNAL_ASSERT(b >= 0 && f.tensors[b].defined(), "fused backend: node ", n->name(),
                             " has no value when it is needed");
      f.values[slot] = core::PyObjectRef::steal(core::checkPy(THPVariable_Wrap(f.tensors[b])));
    }
    return f.values[slot].get();
  }

  bool runExtern(const codegen::Step& s, Frame& f) const {
    const core::NodeRef& n = graph_.body()[s.node];
    // ATen sees its inputs in eager's layout (the recorded strides): a view of a kernel buffer
    // the program laid out otherwise would fail, or see other elements. A pooling op, whose
    // values do not depend on strides (Step::programLayout), takes the program's buffer as it
    // is: resnet18's stem conv result (8x64x112x112 channels-last) is not copied to NCHW first.
    // Its planned arguments may be arena slots, lent by pointer for this call only (Step::reads).
    std::vector<at::Tensor> lent;
    std::vector<core::PyObjectRef> lentValues;
    auto value = [&](const core::NodeRef& a) -> PyObject* {
      if (!s.programLayout) return outputOf(a, f);
      if (PyObject* v = lentSlot(a, f, lent, lentValues)) return v;
      return valueOf(a, f);
    };
    std::vector<core::PyObjectRef> args;
    for (const core::Arg& a : n->args()) args.push_back(core::argToPython(a, value));
    core::PyObjectRef kwargs = core::PyObjectRef::steal(core::checkPy(PyDict_New()));
    for (const auto& [k, a] : n->kwargs()) {
      core::PyObjectRef v = core::argToPython(a, value);
      if (PyDict_SetItemString(kwargs.get(), k.c_str(), v.get()) < 0) throw core::PythonError{};
    }
    core::PyObjectRef callable;
    size_t first = 0;
    if (n->op() == core::NodeOp::kCallMethod) {
      callable = core::PyObjectRef::steal(PyObject_GetAttrString(args.at(0).get(), n->method().c_str()));
      first = 1;
    } else {
      DYNAMO_INTERNAL_ASSERT(n->target().hasCallable(), "fused backend: target of ", n->name(), " has no callable");
      callable = core::PyObjectRef::borrow(n->target().callable());
    }
    if (!callable) return false;
    core::PyObjectRef tuple = core::PyObjectRef::steal(core::checkPy(PyTuple_New(static_cast<Py_ssize_t>(args.size() - first))));
    for (size_t i = first; i < args.size(); ++i) {
      PyTuple_SET_ITEM(tuple.get(), static_cast<Py_ssize_t>(i - first), args[i].release());  // steals
    }
    PyObject* r = PyObject_Call(callable.get(), tuple.get(), PyDict_GET_SIZE(kwargs.get()) ? kwargs.get() : nullptr);  // new ref
    if (!r) {
      unlend(lent);
      return false;
    }
    f.values[s.node] = core::PyObjectRef::steal(r);
    if (!lent.empty()) r = ownResult(n, lent, f.values[s.node]);
    if (s.result >= 0) {
      const codegen::Buffer& b = program_.buffers[s.result];
      if (THPVariable_Check(r) && !matches(THPVariable_Unpack(r), b)) {
        // ATen chose another layout than the one the program expects (a channels-last guess):
        // the kernels read a copy in the expected strides.
        const at::Tensor& t = THPVariable_Unpack(r);
        if (t.device().is_cpu() && t.scalar_type() == scalarType(b.dtype) && t.sizes().vec() == b.shape) {
          f.tensors[s.result] = inLayout(t, b);
          f.ptrs[s.result] = f.tensors[s.result].data_ptr();
          return true;
        }
      }
      if (!THPVariable_Check(r) || !matches(THPVariable_Unpack(r), b)) {
        PyErr_Format(PyExc_RuntimeError,
                     "internal error in Dynamo's fused backend: the result of '%s' does not have the "
                     "dtype, shape and strides recorded at capture; please report this bug",
                     n->name().c_str());
        return false;
      }
      f.tensors[s.result] = THPVariable_Unpack(r);
      f.ptrs[s.result] = f.tensors[s.result].data_ptr();
    }
    return true;
  }

  core::Graph graph_;
  codegen::Program program_;
  std::vector<KernelFn> fns_;
  std::vector<std::vector<int>> params_;
  std::vector<std::vector<int64_t>> sizeParams_;  // per kernel: its size parameter array
  std::vector<std::vector<int>> scalarSlots_;     // per kernel: the Program::scalars it reads
  std::unordered_map<const core::Node*, int> slot_;
  core::GraphRunner eager_;
  mutable std::mutex mu_;
  mutable std::vector<Scratch> arenas_;
#ifdef DYNAMO_HAVE_DNNL
  mutable std::unordered_map<int, std::shared_ptr<const DnnlConv>> convPrimitives_;  // per conv step (null: ATen)
  bool useDnnl_ = !std::getenv("DYNAMO_FUSED_NO_DNNL");      // oneDNN's own API first (read per compile)
  // bmm steps through oneDNN's batched matmul (DYNAMO_FUSED_NO_DNNL_BMM=1, read per compile:
  // at::bmm_out, to compare)
  bool useDnnlBmm_ = !std::getenv("DYNAMO_FUSED_NO_DNNL") && !std::getenv("DYNAMO_FUSED_NO_DNNL_BMM");
  mutable std::unordered_map<int, std::shared_ptr<const DnnlMatmul>> bmmCache_;  // per bmm step (mu_); null: ATen
#endif
  // mm steps on the OpenMP pool (runSplitMm; DYNAMO_FUSED_BLAS_POOL=0, read per compile: at::mm_out)
  bool splitMm_ = blasSplitAvailable() && !(std::getenv("DYNAMO_FUSED_BLAS_POOL") &&
                                            std::string(std::getenv("DYNAMO_FUSED_BLAS_POOL")) == "0");
  mutable std::unordered_set<int> splitLogged_;  // mm steps whose path was logged (mu_)
  // an inference graph's mm steps through torch's oneDNN linear where torch has it (runMatmul;
  // DYNAMO_FUSED_NO_DNNL_MM=1 or DYNAMO_FUSED_NO_DNNL, read per compile: at::mm_out)
  bool dnnlLinear_ = false;
  uint64_t runToken_ = 0;                       // nonzero: time the first calls (the trace store)
  mutable std::atomic<bool> trimmed_{false};    // the heap was trimmed after the first call
  mutable std::once_flag scratchOnce_;          // placeConvScratch() ran
  mutable int64_t arenaTotal_ = 0;              // the arena's bytes: the plan's and conv workspaces
  mutable std::vector<int64_t> convScratch_;    // per conv step: its workspace's arena offset, or -1
  mutable std::atomic<int> timedCalls_{0};      // timed calls so far (stops at kTimedKernelCalls)
  mutable std::vector<double> timedUs_;         // per kernel, summed over the timed calls (mu_)
};

// The name of the first body node whose result requires grad, or "".
std::string requiresGradNode(const core::Graph& graph) {
  for (const core::NodeRef& n : graph.body()) {
    if (n->meta().tensor && n->meta().tensor->requiresGrad) return n->name();
  }
  return {};
}

bool needsGrad(const core::Graph& graph) { return !requiresGradNode(graph).empty(); }

// Why kernels cannot run this graph's ops as eager does, or empty: a node that enters an autocast
// block (dynamo.context_nodes; the ops after it dispatch under autocast, which generated kernels do
// not do) or an inference-mode block (its results must be inference tensors).
std::string contextBlockReason(const core::Graph& graph) {
  for (const core::NodeRef& n : graph.body()) {
    // A view taken before keeps the old storage (freed when resize_ grows it) in eager; the
    // program's buffers and views are planned once for the graph and cannot follow it.
    if (codegen::replacesStorage(*n))
      return "node '" + n->name() + "' gives a tensor new storage in place (resize_, resize_as_ or set_): "
             "the kernels' buffers cannot follow it";
    if (n->op() != core::NodeOp::kCallFunction) continue;
    const std::string& t = n->target().qualifiedName();
    if (t == "dynamo.context_nodes.enter_autocast")
      return "node '" + n->name() + "' enters an autocast block: kernels do not autocast (training graphs go "
             "through the AOT layer, which records autocast's casts as ops)";
    if (t == "dynamo.context_nodes.enter_inference_mode")
      return "node '" + n->name() + "' enters torch.inference_mode: its results must be inference tensors";
  }
  return {};
}

std::string loopText(const codegen::Kernel& k) {
  std::string s = "outer [";
  for (size_t i = 0; i < k.outerSizes.size(); ++i) s += (i ? ", " : "") + std::to_string(k.outerSizes[i]);
  s += "] inner [";
  for (size_t i = 0; i < k.innerSizes.size(); ++i) s += (i ? ", " : "") + std::to_string(k.innerSizes[i]);
  return s + "]";
}

class FusedBackend final : public core::Backend {
 public:
  const std::string& name() const override { return name_; }
  // Graphs that need autograd go through the AOT layer (preset "fused" of dynamo.aot.PRESETS):
  // the joint graph is traced, decomposed and partitioned there, and its forward and backward
  // graphs come back here (compileFused with insideAutograd) to be lowered to kernels.
  std::unique_ptr<core::CompiledGraphFn> compile(const core::BackendRequest& request) const override {
    if (needsGrad(request.graph)) return aot_->compile(request);
    if (request.dynamic) return makePerSizeFused(request);  // lowered per size, kernels shared
    return compileFused(request, nullptr);
  }

 private:
  std::string name_ = "fused";
  std::shared_ptr<core::Backend> aot_ = makeAotBackend("fused");
};

// The graph nodes a kernel computes: those its stages store, and the nodes inlined into them
// (lowered values no buffer holds: their arithmetic is in this kernel's loops; one inlined into
// several kernels is computed by each). Graph order.
std::vector<std::string> coveredNodes(const codegen::Kernel& k, const core::Graph& graph,
                                      const std::unordered_set<std::string>& realized) {
  std::unordered_set<std::string> covered;
  std::vector<const core::Node*> work;
  for (const std::string& name : k.nodes()) {
    if (core::NodeRef n = graph.find(name)) {
      covered.insert(name);
      work.push_back(n.get());
    }
  }
  while (!work.empty()) {
    const core::Node* n = work.back();
    work.pop_back();
    n->forEachInput([&](const core::NodeRef& in) {
      if (in->op() != core::NodeOp::kCallFunction && in->op() != core::NodeOp::kCallMethod) return;
      if (realized.count(in->name()) || !covered.insert(in->name()).second) return;
      work.push_back(in.get());
    });
  }
  std::vector<std::string> out;
  for (const core::NodeRef& n : graph.body())
    if (covered.count(n->name())) out.push_back(n->name());
  return out;
}

// Hands the kernels to the compile being recorded (core's BackendKernel, for the trace store):
// the captured graph's ("dynamo"), or the AOT layer's forward / backward graph's.
uint64_t recordKernels(const codegen::Program& program, const std::vector<codegen::CompileJob>& jobs,
                   const std::vector<codegen::LoadedKernel>& loaded, double lowerMs,
                   const core::BackendRequest& request, const FusedOptions& options) {
  const core::Graph& graph = request.graph;
  std::unordered_set<std::string> realized;  // nodes whose value some buffer holds
  for (const codegen::Buffer& b : program.buffers) realized.insert(b.node);
  std::vector<core::BackendKernel> out;
  for (size_t i = 0; i < program.kernels.size(); ++i) {
    const codegen::Kernel& k = program.kernels[i];
    core::BackendKernel b;
    b.name = k.name;
    b.language = options.cudaHostShim ? "cuda" : "c++";
    b.source = jobs[i].source;
    b.nodes = coveredNodes(k, graph, realized);
    b.loops = loopText(k);
    b.cacheKey = loaded[i].key;
    b.cacheHit = loaded[i].cacheHit;
    b.compileMs = loaded[i].compileMs;
    b.lowerMs = lowerMs;
    out.push_back(std::move(b));
  }
  return core::reportBackendKernels(options.insideAutograd ? "aot." + request.function : "dynamo", std::move(out));
}

// The lowering options of a compile (and of its probe lowering: the same kernel texts).
codegen::LoweringOptions loweringFor(const FusedOptions& options) {
  codegen::LoweringOptions lowering;
  // Training graphs keep ATen's own convolutions: the channels-last oneDNN path rounds 3x3 convs
  // over many channels ~7x further from fp64 than the NCHW one (1.4e-5 against 2e-6 on 256
  // channels), which small-batch batch_norm amplifies in the gradients.
  lowering.convSteps = !options.insideAutograd;
  // Their products are matmul steps as in inference: the AOT graphs' aten::t / transpose views
  // of weights and gradients stay extern views, which at::mm_out reads strided as eager does.
  // (DYNAMO_FUSED_NO_TRAIN_MATMUL=1, read per compile, keeps them ATen calls: to compare.)
  lowering.matmulSteps = !options.insideAutograd || !std::getenv("DYNAMO_FUSED_NO_TRAIN_MATMUL");
  return lowering;
}

std::mutex gCountersMu;
FusedCounters gCounters;
std::unordered_set<std::string> gSeenKeys;  // (gCountersMu)

void countLowering() {
  std::lock_guard<std::mutex> g(gCountersMu);
  ++gCounters.lowerings;
}

// Per graph input: a Python int or float example is a number kernels may read at call time.
std::vector<codegen::ScalarInput> scalarInputs(const core::BackendRequest& request) {
  std::vector<codegen::ScalarInput> out;
  for (const core::PyObjectRef& e : request.examples) {
    PyObject* v = e.get();  // borrowed
    out.push_back(v && PyLong_CheckExact(v)    ? codegen::ScalarInput::kInt
                  : v && PyFloat_CheckExact(v) ? codegen::ScalarInput::kFloat
                                               : codegen::ScalarInput::kNone);
  }
  return out;
}

void countLoaded(const std::vector<codegen::LoadedKernel>& loaded) {
  std::lock_guard<std::mutex> g(gCountersMu);
  for (const auto& l : loaded) {
    if (!gSeenKeys.insert(l.key).second) continue;
    ++gCounters.unitsLoaded;
    if (!l.cacheHit) ++gCounters.compilerRuns;
  }
}

}  // namespace

size_t registerSizeFamilies(const core::Graph& graph, const FusedOptions& options) {
  DYNAMO_INTERNAL_ASSERT(!options.sizeScope.empty(), "registerSizeFamilies needs a size scope");
  // The graphs compileFused runs on the eager runner have no kernels to prepare.
  if (!contextBlockReason(graph).empty() || !requiresGradNode(graph).empty()) return 0;
  codegen::Program program = codegen::lowerGraph(graph, loweringFor(options));
  for (const codegen::Kernel& k : program.kernels) {
    const std::string marked = options.cudaHostShim ? codegen::emitCudaMarked(k, program) : codegen::emitCppMarked(k, program);
    codegen::sizeKernel(codegen::splitMarked(marked), options.sizeScope, true);
  }
  return program.kernels.size();
}

bool fusedTakesSizes(const core::CompiledGraphFn& fn, PyObject* const* inputs, size_t count,
                     const std::string& numbers) {
  const auto* fused = dynamic_cast<const FusedFn*>(&fn);
  return fused != nullptr && fused->takesSizes(inputs, count, numbers);
}

FusedCounters fusedCounters() {
  FusedCounters out;
  {
    std::lock_guard<std::mutex> g(gCountersMu);
    out = gCounters;
  }
  const ProgramCacheCounters p = programCacheCounters();
  out.programHits = p.hits;
  out.programMisses = p.misses;
  out.programStores = p.stores;
  out.programRejected = p.rejected;
  return out;
}

std::unique_ptr<core::CompiledGraphFn> compileFused(const core::BackendRequest& request, FusedReport* report,
                                                    const FusedOptions& options) {
  const core::Graph& graph = request.graph;
  // (The AOT layer's forward and backward graphs are traced without autograd: none of their
  // nodes requires grad. One that does is an inference graph whose result must carry autograd
  // history, which kernels cannot give: it runs on the eager runner.)
  std::string contextReason = contextBlockReason(graph);
  if (!contextReason.empty()) {
    if (report) report->eagerReason = contextReason;
    return std::make_unique<GraphRunnerFn>(graph);
  }
  std::string gradNode = requiresGradNode(graph);
  if (!gradNode.empty()) {
    if (report) {
      report->eagerReason = "node '" + gradNode + "' requires grad (training graphs go through the AOT layer: backend=\"fused\")";
    }
    return std::make_unique<GraphRunnerFn>(graph);
  }
  codegen::LoweringOptions lowering = loweringFor(options);
  // (DYNAMO_FUSED_NUMBERS_PER_VALUE=1, read per compile: numbers stay extern arguments and each
  // value is lowered again, as before they were kernel arguments: to compare.)
  if (!std::getenv("DYNAMO_FUSED_NUMBERS_PER_VALUE")) lowering.scalarInputs = scalarInputs(request);
  const auto lowerStart = std::chrono::steady_clock::now();
  // The lowered program and its kernels' marked sources: from the program cache (a pure function
  // of the graph and the options: fused_program_cache.h), else lowered and emitted here.
  codegen::Program program;
  std::vector<std::string> marked;
  const std::string cacheKey =
      programCacheEnabled() ? programCacheKey(graph, lowering, options.cudaHostShim) : std::string();
  std::optional<CachedProgram> cached;
  if (!cacheKey.empty()) cached = loadProgram(cacheKey, graph);
  if (cached) {
    program = std::move(cached->program);
    marked = std::move(cached->marked);
  } else {
    program = codegen::lowerGraph(graph, lowering);
    countLowering();
    for (const codegen::Kernel& k : program.kernels)
      marked.push_back(options.cudaHostShim ? codegen::emitCudaMarked(k, program) : codegen::emitCppMarked(k, program));
  }
  std::vector<codegen::CompileJob> jobs;
  std::vector<std::vector<int64_t>> sizeParams;
  const std::string scope = !options.sizeScope.empty() ? options.sizeScope
                            : request.function + "@" + request.where.file + ":" + std::to_string(request.where.line);
  for (size_t i = 0; i < program.kernels.size(); ++i) {
    const codegen::Kernel& k = program.kernels[i];
    // (sized here, also on a hit: a family's reference sizes and dynamic integers are this
    // process's, kernel_template.h)
    codegen::SizedKernel sized = codegen::sizeKernel(codegen::splitMarked(marked[i]), scope, options.sizeParams);
    if (options.cudaHostShim) {
      // The CUDA kernel's sizes are parameters as the C++ one's; its shim always reads the array
      // (a static kernel gets one unused value).
      jobs.push_back({std::move(sized.source), k.name + "_host", {"-DDYN_HOST_SHIM", "-x", "c++"}});
      if (sized.params.empty()) sized.params.push_back(0);
    } else {
      jobs.push_back({std::move(sized.source), k.name, {}});
    }
    sizeParams.push_back(std::move(sized.params));
  }
  const double lowerMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - lowerStart).count();
  std::vector<codegen::LoadedKernel> loaded;
  {
    NoGil nogil;
    loaded = codegen::compileKernels(jobs);
  }
  countLoaded(loaded);
  if (!cacheKey.empty() && !cached) storeProgram(cacheKey, program, marked);  // its kernels compiled
  std::vector<KernelFn> fns;
  for (const auto& l : loaded) fns.push_back(reinterpret_cast<KernelFn>(l.symbol));
  bool logFusion = logEnabled("fusion"), logCode = logEnabled("output_code");
  if (logFusion) std::fprintf(stderr, "[dynamo fusion] %s\n%s", request.function.c_str(), codegen::printProgram(program).c_str());
  for (size_t i = 0; i < program.kernels.size(); ++i) {
    const codegen::Kernel& k = program.kernels[i];
    if (logCode) {
      std::fprintf(stderr, "[dynamo output_code] %s (%s, %s)\n%s", k.name.c_str(), loopText(k).c_str(),
                   loaded[i].cacheHit ? "cache hit" : "compiled", jobs[i].source.c_str());
    }
    if (report) {
      FusedKernelInfo info;
      info.name = k.name;
      info.nodes = k.nodes();
      info.source = jobs[i].source;
      info.cudaSource = codegen::emitCuda(k, program);
      info.loops = loopText(k);
      info.cacheKey = loaded[i].key;
      info.cacheHit = loaded[i].cacheHit;
      info.compileMs = loaded[i].compileMs;
      report->kernels.push_back(std::move(info));
    }
  }
  const uint64_t runToken =
      core::wantsBackendKernels() ? recordKernels(program, jobs, loaded, lowerMs, request, options) : 0;
  if (report) {
    report->program = codegen::printProgram(program);
    report->externs = program.externs;
    report->arenaBytes = program.arenaBytes;
  }
  return std::make_unique<FusedFn>(graph, std::move(program), std::move(fns), runToken, std::move(sizeParams),
                                   !options.insideAutograd);
}

std::shared_ptr<core::Backend> makeFusedBackend() { return std::make_shared<FusedBackend>(); }

}  // namespace dynamo::backends

// TENSOR_MATCH, GRAD_MODE and DEFAULT_DTYPE: the guards that read torch's C++ state.
//
// This is the one file of the guards that includes torch headers (they cost ~9 s per file and
// must stay out of every header). It reads at::Tensor through THPVariable_Unpack, and computes a
// tensor's dispatch key set the way PyTorch's guards do: the tensor's keys, plus the thread's
// included keys, minus its excluded keys (c10::impl::tls_local_dispatch_key_set), so a tensor
// traced outside torch.no_grad/inference/functorch modes fails inside them and vice versa.
#include <torch/csrc/autograd/python_variable.h>

#include <c10/core/DefaultDtype.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <sstream>
#include <vector>

#include "dynamo/core/guards.h"
#include "py_text.h"

namespace dynamo::core {

using guards_detail::typeName;

namespace {

// The dtype as Python prints it ("float32"), not c10's name ("Float").
std::string dtypeName(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float: return "float32";
    case c10::ScalarType::Double: return "float64";
    case c10::ScalarType::Half: return "float16";
    case c10::ScalarType::BFloat16: return "bfloat16";
    case c10::ScalarType::ComplexHalf: return "complex32";
    case c10::ScalarType::ComplexFloat: return "complex64";
    case c10::ScalarType::ComplexDouble: return "complex128";
    case c10::ScalarType::Byte: return "uint8";
    case c10::ScalarType::Char: return "int8";
    case c10::ScalarType::Short: return "int16";
    case c10::ScalarType::Int: return "int32";
    case c10::ScalarType::Long: return "int64";
    case c10::ScalarType::Bool: return "bool";
    default: return c10::toString(t);
  }
}

constexpr int64_t kDynamic = -1;  // a dynamic dimension's size in TENSOR_MATCH

std::string listText(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += ", ";
    out += v[i] == kDynamic ? std::string("*") : std::to_string(v[i]);
  }
  return out + "]";
}

std::string keysText(c10::DispatchKeySet ks) {
  std::ostringstream out;
  out << ks;
  return out.str();
}

// The dispatch keys a call would see: the tensor's, with the thread-local include/exclude sets.
c10::DispatchKeySet effectiveKeys(const at::Tensor& t) {
  c10::impl::LocalDispatchKeySet tls = c10::impl::tls_local_dispatch_key_set();
  return (t.key_set() | tls.included_) - tls.excluded_;
}

// "<what> changed: expected X, got Y" for the global-state guards, and its fields.
GuardMismatch changed(const char* what, std::string expected, std::string seen) {
  GuardMismatch m;
  m.text = std::string(what) + " changed: expected " + expected + ", got " + seen;
  m.property = what;
  m.expected = std::move(expected);
  m.seen = std::move(seen);
  return m;
}

class TensorMatchGuard final : public LeafGuard {
 public:
  TensorMatchGuard(PyObject* example, const std::vector<bool>& dynamicDims) : LeafGuard(GuardKind::kTensorMatch) {
    type_ = Py_TYPE(example);
    Py_INCREF(type_);  // new ref: keeps the type's address valid
    const at::Tensor& t = THPVariable_Unpack(example);
    keys_ = effectiveKeys(t);
    dtype_ = t.scalar_type();
    device_ = t.device();
    layout_ = t.layout();
    requiresGrad_ = t.requires_grad();
    sizes_ = t.sizes().vec();
    // Sparse and other non-strided layouts have no strides (strides() throws): check sizes only.
    if (layout_ == c10::kStrided) strides_ = t.strides().vec();
    for (std::size_t i = 0; i < dynamicDims.size() && i < sizes_.size(); ++i) {
      if (dynamicDims[i]) sizes_[i] = kDynamic;
    }
    dynamic_ = std::find(sizes_.begin(), sizes_.end(), kDynamic) != sizes_.end();
    if (dynamic_) {
      if (layout_ != c10::kStrided || !t.is_contiguous() || t.strides().vec() != contiguousStrides(t.sizes()))
        throw UserError(UserErrorKind::kInvalidArgument, "TENSOR_MATCH with dynamic dimensions needs a contiguous tensor");
      strides_.clear();  // implied by the sizes: contiguity is checked instead
    }
  }

  static std::vector<int64_t> contiguousStrides(c10::IntArrayRef sizes) {
    std::vector<int64_t> out(sizes.size());
    int64_t step = 1;
    for (std::size_t i = sizes.size(); i-- > 0;) {
      out[i] = step;
      step *= std::max<int64_t>(sizes[i], 1);
    }
    return out;
  }

  // Strides are exactly the contiguous ones for the tensor's sizes.
  static bool contiguousExactly(const at::Tensor& t) {
    c10::IntArrayRef sizes = t.sizes();
    c10::IntArrayRef strides = t.strides();
    int64_t step = 1;
    for (std::size_t i = sizes.size(); i-- > 0;) {
      if (strides[i] != step) return false;
      step *= std::max<int64_t>(sizes[i], 1);
    }
    return true;
  }
  ~TensorMatchGuard() override { Py_DECREF(type_); }

  bool check(PyObject* value) const override {
    if (Py_TYPE(value) != type_) return false;
    try {  // free unless thrown: sizes() of a subclass with custom sizes may throw c10::Error
      const at::Tensor& t = THPVariable_Unpack(value);
      if (effectiveKeys(t) != keys_ || t.scalar_type() != dtype_ || t.device() != device_ ||
          t.layout() != layout_ || t.requires_grad() != requiresGrad_) {
        return false;
      }
      c10::IntArrayRef sizes = t.sizes();
      if (sizes.size() != sizes_.size()) return false;
      for (std::size_t i = 0; i < sizes_.size(); ++i) {
        if (sizes[i] != sizes_[i] && sizes_[i] != kDynamic) return false;
      }
      if (dynamic_) return contiguousExactly(t);
      if (strides_.empty()) return true;
      c10::IntArrayRef strides = t.strides();
      for (std::size_t i = 0; i < strides_.size(); ++i) {
        if (strides[i] != strides_[i]) return false;
      }
      return true;
    } catch (const std::exception&) {
      return false;
    }
  }

  std::string describeFailure(PyObject* value, const std::string& source) const override {
    return mismatch(value, source).text;
  }

  GuardMismatch mismatch(PyObject* value, const std::string& source) const override {
    std::string pre = "tensor '" + source + "' ";
    if (Py_TYPE(value) != type_) return differs(pre, "type", -1, typeNameOf(type_), typeName(value));
    try {
      return explain(value, pre);
    } catch (const std::exception& e) {
      GuardMismatch m;
      m.text = pre + "cannot be inspected: " + e.what();
      return m;
    }
  }

  GuardMismatch explain(PyObject* value, const std::string& pre) const {
    const at::Tensor& t = THPVariable_Unpack(value);
    if (t.scalar_type() != dtype_)
      return differs(pre, "dtype", -1, dtypeName(dtype_), dtypeName(t.scalar_type()));
    if (t.device() != device_) return differs(pre, "device", -1, device_.str(), t.device().str());
    if (t.layout() != layout_)
      return differs(pre, "layout", -1, layoutText(layout_), layoutText(t.layout()));
    if (t.requires_grad() != requiresGrad_)
      return differs(pre, "requires_grad", -1, pyBool(requiresGrad_), pyBool(t.requires_grad()));
    if (effectiveKeys(t) != keys_)
      return differs(pre, "dispatch key set", -1, keysText(keys_), keysText(effectiveKeys(t)));
    c10::IntArrayRef sizes = t.sizes();
    c10::IntArrayRef strides = strides_.empty() ? c10::IntArrayRef() : t.strides();
    if (sizes.size() != sizes_.size())
      return differs(pre, "ndim", -1, std::to_string(sizes_.size()), std::to_string(sizes.size()));
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      if (sizes[i] != sizes_[i] && sizes_[i] != kDynamic)
        return differs(pre, "size", static_cast<int>(i), std::to_string(sizes_[i]),
                       std::to_string(sizes[i]));
    }
    if (dynamic_ && !contiguousExactly(t)) {
      GuardMismatch m;
      m.text = pre + "is not contiguous (it has dynamic dimensions, traced contiguous)";
      m.property = "contiguity";
      m.expected = "contiguous";
      m.seen = "not contiguous";
      return m;
    }
    for (std::size_t i = 0; i < strides_.size() && i < strides.size(); ++i) {
      if (strides[i] != strides_[i])
        return differs(pre, "stride", static_cast<int>(i), std::to_string(strides_[i]),
                       std::to_string(strides[i]));
    }
    GuardMismatch m;
    m.text = pre + "matches (the failure did not reproduce)";
    return m;
  }

  std::string describe(const std::string& source) const override {
    std::string text = "tensor " + source + ": " + dtypeName(dtype_) + " " + device_.str() +
                       " sizes=" + listText(sizes_);
    if (dynamic_) text += " contiguous";
    if (layout_ == c10::kStrided) {
      text += " strides=" + listText(strides_);
    } else {
      text += " layout=" + layoutText(layout_);
    }
    text += " requires_grad=" + pyBool(requiresGrad_);
    std::string type = typeNameOf(type_);
    if (type != "Tensor") text += " type=" + type;
    return text;
  }

  bool sameAs(const LeafGuard& other) const override {
    auto* o = dynamic_cast<const TensorMatchGuard*>(&other);
    return o != nullptr && o->type_ == type_ && o->keys_ == keys_ && o->dtype_ == dtype_ &&
           o->device_ == device_ && o->layout_ == layout_ && o->requiresGrad_ == requiresGrad_ && o->sizes_ == sizes_ &&
           o->strides_ == strides_;
  }

 private:
  static std::string pyBool(bool b) { return b ? "True" : "False"; }
  static std::string layoutText(c10::Layout layout) {
    std::ostringstream out;
    out << layout;
    return out.str();
  }
  static std::string typeNameOf(PyTypeObject* type) {
    std::string n = type->tp_name;
    std::size_t dot = n.rfind('.');
    return dot == std::string::npos ? n : n.substr(dot + 1);
  }
  // "tensor 'x' size mismatch at dim 0: expected 4, got 8" and its fields.
  static GuardMismatch differs(const std::string& pre, const char* what, int dim,
                               std::string expected, std::string seen) {
    GuardMismatch m;
    m.text = pre + what + " mismatch" + (dim >= 0 ? " at dim " + std::to_string(dim) : "") +
             ": expected " + expected + ", got " + seen;
    m.property = what;
    m.dim = dim;
    m.expected = std::move(expected);
    m.seen = std::move(seen);
    return m;
  }

  PyTypeObject* type_ = nullptr;  // new ref (owned): Tensor, Parameter or a subclass
  c10::DispatchKeySet keys_;      // effective keys at trace time
  c10::ScalarType dtype_ = c10::ScalarType::Undefined;
  c10::Device device_{c10::DeviceType::CPU};
  c10::Layout layout_ = c10::kStrided;
  bool requiresGrad_ = false;
  std::vector<int64_t> sizes_;    // kDynamic for a dynamic dimension
  std::vector<int64_t> strides_;  // empty when dynamic_ (contiguity is checked instead)
  bool dynamic_ = false;
};

class GradModeGuard final : public LeafGuard {
 public:
  explicit GradModeGuard(bool enabled) : LeafGuard(GuardKind::kGradMode), enabled_(enabled) {}

  bool check(PyObject*) const override { return c10::GradMode::is_enabled() == enabled_; }
  std::string describeFailure(PyObject* value, const std::string& source) const override {
    return mismatch(value, source).text;
  }
  GuardMismatch mismatch(PyObject*, const std::string&) const override {
    return changed("grad mode", word(enabled_), word(c10::GradMode::is_enabled()));
  }
  std::string describe(const std::string&) const override {
    return std::string("grad mode is ") + word(enabled_);
  }
  bool sameAs(const LeafGuard& other) const override {
    auto* o = dynamic_cast<const GradModeGuard*>(&other);
    return o != nullptr && o->enabled_ == enabled_;
  }

 private:
  static const char* word(bool enabled) { return enabled ? "enabled" : "disabled"; }
  bool enabled_;
};

class DefaultDtypeGuard final : public LeafGuard {
 public:
  explicit DefaultDtypeGuard(c10::ScalarType dtype)
      : LeafGuard(GuardKind::kDefaultDtype), dtype_(dtype) {}

  bool check(PyObject*) const override {
    return c10::get_default_dtype_as_scalartype() == dtype_;
  }
  std::string describeFailure(PyObject* value, const std::string& source) const override {
    return mismatch(value, source).text;
  }
  GuardMismatch mismatch(PyObject*, const std::string&) const override {
    return changed("default dtype", dtypeName(dtype_),
                   dtypeName(c10::get_default_dtype_as_scalartype()));
  }
  std::string describe(const std::string&) const override {
    return "default dtype is " + dtypeName(dtype_);
  }
  bool sameAs(const LeafGuard& other) const override {
    auto* o = dynamic_cast<const DefaultDtypeGuard*>(&other);
    return o != nullptr && o->dtype_ == dtype_;
  }

 private:
  c10::ScalarType dtype_;
};

class InferenceModeGuard final : public LeafGuard {
 public:
  explicit InferenceModeGuard(bool enabled) : LeafGuard(GuardKind::kInferenceMode), enabled_(enabled) {}

  bool check(PyObject*) const override { return c10::InferenceMode::is_enabled() == enabled_; }
  std::string describeFailure(PyObject* value, const std::string& source) const override {
    return mismatch(value, source).text;
  }
  GuardMismatch mismatch(PyObject*, const std::string&) const override {
    return changed("inference mode", word(enabled_), word(c10::InferenceMode::is_enabled()));
  }
  std::string describe(const std::string&) const override {
    return std::string("inference mode is ") + word(enabled_);
  }
  bool sameAs(const LeafGuard& other) const override {
    auto* o = dynamic_cast<const InferenceModeGuard*>(&other);
    return o != nullptr && o->enabled_ == enabled_;
  }

 private:
  static const char* word(bool enabled) { return enabled ? "enabled" : "disabled"; }
  bool enabled_;
};

}  // namespace

LeafGuardPtr makeInferenceModeFromCurrent() {
  return std::make_unique<InferenceModeGuard>(c10::InferenceMode::is_enabled());
}

LeafGuardPtr makeTensorMatch(PyObject* exampleTensor, const std::vector<bool>& dynamicDims) {
  int isTensor = THPVariableClass != nullptr ? PyObject_IsInstance(exampleTensor, THPVariableClass)
                                             : 0;
  if (isTensor != 1) {
    PyErr_Clear();
    throw UserError(UserErrorKind::kInvalidArgument,
                    "TENSOR_MATCH needs a torch.Tensor, got " + typeName(exampleTensor));
  }
  try {
    return std::make_unique<TensorMatchGuard>(exampleTensor, dynamicDims);
  } catch (const c10::Error& e) {
    throw UserError(UserErrorKind::kInvalidArgument,
                    std::string("TENSOR_MATCH cannot read this tensor: ") +
                        e.what_without_backtrace());
  }
}

LeafGuardPtr makeGradMode(bool enabled) { return std::make_unique<GradModeGuard>(enabled); }

LeafGuardPtr makeGradModeFromCurrent() { return makeGradMode(c10::GradMode::is_enabled()); }

LeafGuardPtr makeDefaultDtypeFromCurrent() {
  return std::make_unique<DefaultDtypeGuard>(c10::get_default_dtype_as_scalartype());
}

// --- ShapeGuards ---------------------------------------------------------------------------------

ShapeGuards::ShapeGuards(sym::ShapeEnv env, std::vector<std::vector<DimSource>> sources)
    : env_(std::move(env)), sources_(std::move(sources)), flat_(env_) {
  // Group the reads by input: each input is fetched once per check, all its dimensions read from
  // that one fetch. A duck-sized symbol's other sources read into slots after the symbols'.
  int nextSlot = static_cast<int>(sources_.size());
  for (std::size_t id = 0; id < sources_.size(); ++id) {
    for (std::size_t k = 0; k < sources_[id].size(); ++k) {
      const DimSource& ds = sources_[id][k];
      auto it = std::find_if(reads_.begin(), reads_.end(), [&](const InputRead& r) { return r.source == ds.tensor; });
      if (it == reads_.end()) {
        reads_.push_back(InputRead{ds.tensor, ds.tensor.localSlot(), {}});
        it = std::prev(reads_.end());
      }
      int target = k == 0 ? static_cast<int>(id) : nextSlot++;
      if (k > 0) duck_.emplace_back(target, static_cast<int>(id));
      it->dims.push_back(InputRead::Dim{ds.dim, target});
    }
  }
}

namespace {
// "x.size()[0]", or "step" for an int input.
std::string dimName(const ShapeGuards::DimSource& ds) {
  return ds.dim < 0 ? ds.tensor.name() : ds.tensor.name() + ".size()[" + std::to_string(ds.dim) + "]";
}

// The stripped text of file:line through linecache ("" when unknown). Slow path only.
std::string sourceLineOf(const std::string& file, int line) {
  static PyObject* linecache = PyImport_ImportModule("linecache");  // new ref, kept
  if (linecache == nullptr) {
    PyErr_Clear();
    return "";
  }
  PyObject* text = PyObject_CallMethod(linecache, "getline", "si", file.c_str(), line);  // new ref
  std::string out = text != nullptr && PyUnicode_Check(text) ? PyUnicode_AsUTF8(text) : "";
  Py_XDECREF(text);
  PyErr_Clear();
  size_t a = out.find_first_not_of(" \t\r\n"), b = out.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : out.substr(a, b - a + 1);
}

GuardFailure shapeFailure(const ShapeGuards::DimSource& ds, std::string reason, std::string expected, std::string seen) {
  GuardFailure f;
  f.kind = GuardKind::kShapeEnv;
  f.property = "shape";
  f.sourceName = ds.tensor.name();
  f.dim = ds.dim;
  f.reason = std::move(reason);
  f.expected = std::move(expected);
  f.seen = std::move(seen);
  return f;
}
}  // namespace

bool ShapeGuards::read(const FrameValues& frame, std::vector<int64_t>& values, GuardFailure* why) const {
  values.assign(sources_.size(), 0);
  for (std::size_t id = 0; id < sources_.size(); ++id) {
    for (std::size_t k = 0; k < sources_[id].size(); ++k) {
      const DimSource& ds = sources_[id][k];
      PyObject* t = ds.tensor.fetch(frame);  // new ref or null
      if (t == nullptr) {
        PyErr_Clear();
        if (why) *why = shapeFailure(ds, "cannot read " + ds.tensor.name(), ds.dim < 0 ? "an int" : "a tensor", "nothing");
        return false;
      }
      int64_t size = -1;
      bool ok = false;
      if (ds.dim < 0) {
        // An int input: TYPE_MATCH checked that it is an int; it may not fit in 64 bits.
        int overflow = 0;
        size = PyLong_CheckExact(t) ? PyLong_AsLongLongAndOverflow(t, &overflow) : 0;
        ok = PyLong_CheckExact(t) && overflow == 0 && !PyErr_Occurred();
        PyErr_Clear();
      } else if (THPVariable_Check(t)) {
        c10::IntArrayRef sizes = THPVariable_Unpack(t).sizes();
        if (ds.dim < static_cast<int>(sizes.size())) {
          size = sizes[ds.dim];
          ok = true;
        }
      }
      Py_DECREF(t);
      if (!ok) {
        if (why) {
          *why = ds.dim < 0 ? shapeFailure(ds, ds.tensor.name() + " is not an int that fits in 64 bits", "a 64-bit int", "another value")
                            : shapeFailure(ds, ds.tensor.name() + " has no dimension " + std::to_string(ds.dim),
                                           "a dimension " + std::to_string(ds.dim), "none");
        }
        return false;
      }
      if (k == 0) {
        values[id] = size;
      } else if (values[id] != size) {
        if (why) {
          const DimSource& d0 = sources_[id][0];
          *why = shapeFailure(ds,
                              "shape guard failed: " + dimName(ds) + " == " + dimName(d0) +
                                  " (duck sizing: the sizes were equal at the first compile; got " + std::to_string(size) +
                                  " and " + std::to_string(values[id]) + "; dynamo.mark_dynamic gives each its own symbol)",
                              "== " + dimName(d0) + " (" + std::to_string(values[id]) + ")", std::to_string(size));
        }
        return false;
      }
    }
  }
  return true;
}

namespace {
// An exact int that fits in 64 bits, read without creating an object: a compact (one-digit) int
// directly, a larger one through PyLong_AsLongLongAndOverflow. False for anything else.
bool readInt(PyObject* v, int64_t* out) {
  if (!PyLong_CheckExact(v)) return false;
#if PY_VERSION_HEX >= 0x030C0000
  if (PyUnstable_Long_IsCompact(reinterpret_cast<PyLongObject*>(v))) {
    *out = PyUnstable_Long_CompactValue(reinterpret_cast<PyLongObject*>(v));
    return true;
  }
#else
  Py_ssize_t size = Py_SIZE(v);
  if (size >= -1 && size <= 1) {
    *out = size == 0 ? 0 : size * static_cast<int64_t>(reinterpret_cast<PyLongObject*>(v)->ob_digit[0]);
    return true;
  }
#endif
  int overflow = 0;
  long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
  if (overflow != 0 || (x == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return false;
  }
  *out = x;
  return true;
}

// The sizes `dims` asks for, from one input (borrowed ref), into values[dim.target].
inline bool readDims(PyObject* v, const std::vector<ShapeGuards::InputRead::Dim>& dims, int64_t* values) noexcept {
  try {  // sizes() of a tensor subclass with custom sizes may throw c10::Error
    c10::IntArrayRef sizes;
    bool tensor = false;
    for (const auto& d : dims) {
      if (d.dim < 0) {
        if (!readInt(v, &values[d.target])) return false;
        continue;
      }
      if (!tensor) {
        // The exact class first: THPVariable_Check is a PyObject_IsInstance call.
        if (Py_TYPE(v) != reinterpret_cast<PyTypeObject*>(THPVariableClass) && !THPVariable_Check(v)) return false;
        sizes = THPVariable_Unpack(v).sizes();
        tensor = true;
      }
      if (d.dim >= static_cast<int>(sizes.size())) return false;
      values[d.target] = sizes[d.dim];
    }
    return true;
  } catch (const std::exception&) {
    return false;
  }
}
}  // namespace

bool ShapeGuards::readFast(const FrameValues& frame, int64_t* values) const {
  for (const InputRead& r : reads_) {
    if (r.slot >= 0) {
      PyObject* v = nullptr;  // borrowed ref, owned by the frame
      if (r.slot < frame.nlocals) v = frame.localAt != nullptr ? frame.localAt(frame.context, r.slot) : frame.locals[r.slot];
      if (v == nullptr || !readDims(v, r.dims, values)) return false;
      continue;
    }
    PyObject* v = r.source.fetch(frame);  // new ref or null
    if (v == nullptr) {
      PyErr_Clear();
      return false;
    }
    bool ok = readDims(v, r.dims, values);
    Py_DECREF(v);
    if (!ok) return false;
  }
  return true;
}

// The hot path: one pass over the inputs' sizes into a stack buffer, the duck-sizing equalities,
// then the compiled ranges and relations. Same answer as failure() == nullopt, without its text.
bool ShapeGuards::check(const FrameValues& frame) const {
  constexpr std::size_t kStack = 32;
  const std::size_t n = sources_.size() + duck_.size();
  int64_t stack[kStack];
  std::vector<int64_t> heap;  // only for entries with more than kStack sizes
  int64_t* values = stack;
  if (n > kStack) {
    heap.assign(n, 0);
    values = heap.data();
  } else {
    std::fill(stack, stack + n, 0);
  }
  if (!readFast(frame, values)) return false;
  for (const auto& [slot, symbol] : duck_) {
    if (values[slot] != values[symbol]) return false;
  }
  return flat_.check(values, sources_.size());
}

std::string ShapeGuards::failureReason(const FrameValues& frame) const {
  std::optional<GuardFailure> f = failure(frame);
  return f ? f->reason : std::string();
}

std::optional<GuardFailure> ShapeGuards::failure(const FrameValues& frame) const {
  std::vector<int64_t> values;
  GuardFailure why;
  if (!read(frame, values, &why)) return why;
  std::optional<sym::ShapeFailure> f;
  try {
    f = env_.firstFailure(values);
  } catch (const sym::SymbolicError& e) {
    f = sym::ShapeFailure{std::string("shape guard failed: ") + e.what(), -1, "", "", ""};
  }
  if (!f) return std::nullopt;
  DimSource ds;
  if (f->symbol >= 0 && f->symbol < static_cast<int>(sources_.size()) && !sources_[f->symbol].empty()) {
    ds = sources_[f->symbol][0];
  } else {
    ds.dim = -1;
  }
  GuardFailure out = shapeFailure(ds, f->reason, f->expected, f->seen);
  if (!ds.tensor) out.sourceName.clear();
  // "file.py:12": the line of the guard or of the specialisation.
  size_t colon = f->where.rfind(':');
  if (colon != std::string::npos && colon > 0) {
    try {
      out.where.line = std::stoi(f->where.substr(colon + 1));
      out.where.file = f->where.substr(0, colon);
      out.where.sourceLine = sourceLineOf(out.where.file, out.where.line);
    } catch (const std::exception&) {
      out.where = {};
    }
  }
  return out;
}

}  // namespace dynamo::core

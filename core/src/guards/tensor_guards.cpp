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
#include <c10/core/impl/LocalDispatchKeySet.h>

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

std::string listText(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(v[i]);
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
  explicit TensorMatchGuard(PyObject* example) : LeafGuard(GuardKind::kTensorMatch) {
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
        if (sizes[i] != sizes_[i]) return false;
      }
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
      if (sizes[i] != sizes_[i])
        return differs(pre, "size", static_cast<int>(i), std::to_string(sizes_[i]),
                       std::to_string(sizes[i]));
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
  std::vector<int64_t> sizes_;
  std::vector<int64_t> strides_;
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

}  // namespace

LeafGuardPtr makeTensorMatch(PyObject* exampleTensor) {
  int isTensor = THPVariableClass != nullptr ? PyObject_IsInstance(exampleTensor, THPVariableClass)
                                             : 0;
  if (isTensor != 1) {
    PyErr_Clear();
    throw UserError(UserErrorKind::kInvalidArgument,
                    "TENSOR_MATCH needs a torch.Tensor, got " + typeName(exampleTensor));
  }
  try {
    return std::make_unique<TensorMatchGuard>(exampleTensor);
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

}  // namespace dynamo::core

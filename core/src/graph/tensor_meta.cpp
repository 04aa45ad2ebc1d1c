// TensorMeta (graph_node.h): equality, memory format names, and reading the meta of a live tensor
// through its Python attributes (no torch headers: this folder stays quick to compile).
#include <string>
#include <utility>
#include <vector>

#include "dynamo/core/graph_node.h"

namespace dynamo::core {
namespace {

// A tuple/sequence of Python ints as int64s.
std::vector<int64_t> intsOf(PyObject* seq) {  // borrowed ref
  PyObjectRef fast = PyObjectRef::steal(checkPy(PySequence_Fast(seq, "expected a sequence")));
  std::vector<int64_t> out;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast.get());
  out.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast.get(), i));
    if (v == -1 && PyErr_Occurred()) throw PythonError{};
    out.push_back(v);
  }
  return out;
}

PyObjectRef attr(PyObject* o, const char* name) {
  return PyObjectRef::steal(checkPy(PyObject_GetAttrString(o, name)));  // new ref
}

std::string strOf(PyObject* o) {  // borrowed ref
  PyObjectRef s = PyObjectRef::steal(checkPy(PyObject_Str(o)));  // new ref
  const char* text = PyUnicode_AsUTF8(s.get());  // buffer owned by s
  if (text == nullptr) throw PythonError{};
  return text;
}

bool truthOf(PyObject* o) {  // borrowed ref
  int flag = PyObject_IsTrue(o);
  if (flag < 0) throw PythonError{};
  return flag == 1;
}

// The kwargs {"memory_format": torch.<format>}, made once per format. Leaked on purpose: Python
// objects must not be released after the interpreter is gone.
PyObject* formatKwargs(const char* format) {  // borrowed ref
  static auto* cache = new std::vector<std::pair<std::string, PyObjectRef>>();
  for (const auto& [name, kwargs] : *cache) {
    if (name == format) return kwargs.get();
  }
  PyObjectRef torch = PyObjectRef::steal(checkPy(PyImport_ImportModule("torch")));  // new ref
  PyObjectRef fmt = attr(torch.get(), format);
  PyObjectRef kwargs = PyObjectRef::steal(checkPy(PyDict_New()));
  if (PyDict_SetItemString(kwargs.get(), "memory_format", fmt.get()) < 0) throw PythonError{};
  cache->emplace_back(format, kwargs);
  return kwargs.get();
}

// tensor.is_contiguous(memory_format=torch.<format>): PyTorch's own rule (size-1 dimensions may
// have any stride).
bool isContiguousAs(PyObject* tensor, const char* format) {
  PyObjectRef method = attr(tensor, "is_contiguous");
  PyObjectRef empty = PyObjectRef::steal(checkPy(PyTuple_New(0)));
  PyObjectRef result = PyObjectRef::steal(
      checkPy(PyObject_Call(method.get(), empty.get(), formatKwargs(format))));
  return truthOf(result.get());
}

}  // namespace

const char* memoryFormatName(MemoryFormat format) {
  switch (format) {
    case MemoryFormat::kContiguous: return "contiguous";
    case MemoryFormat::kChannelsLast: return "channels_last";
    case MemoryFormat::kOther: return "other";
  }
  return "?";
}

bool TensorMeta::operator==(const TensorMeta& other) const {
  return shape == other.shape && dtype == other.dtype && device == other.device &&
         requiresGrad == other.requiresGrad && strides == other.strides &&
         memoryFormat == other.memoryFormat && symShape == other.symShape;
}

TensorMeta tensorMetaOf(PyObject* tensor) {  // borrowed ref
  DYNAMO_INTERNAL_ASSERT(tensor != nullptr, "tensorMetaOf(NULL)");
  TensorMeta meta;
  meta.shape = intsOf(attr(tensor, "shape").get());
  PyObjectRef strideFn = attr(tensor, "stride");
  meta.strides = intsOf(PyObjectRef::steal(checkPy(PyObject_CallNoArgs(strideFn.get()))).get());
  meta.dtype = strOf(attr(tensor, "dtype").get());
  meta.device = strOf(attr(tensor, "device").get());
  meta.requiresGrad = truthOf(attr(tensor, "requires_grad").get());
  if (isContiguousAs(tensor, "contiguous_format")) {
    meta.memoryFormat = MemoryFormat::kContiguous;
  } else if (meta.shape.size() == 4 && isContiguousAs(tensor, "channels_last")) {
    meta.memoryFormat = MemoryFormat::kChannelsLast;
  } else {
    meta.memoryFormat = MemoryFormat::kOther;
  }
  return meta;
}

}  // namespace dynamo::core

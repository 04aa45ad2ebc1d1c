// FrameView: reading an intercepted frame's slots as Python sees them at entry.
#include "dynamo/core/frame_view.h"

#include <cstring>

namespace dynamo::core {

namespace {
// Slot kinds from co_localspluskinds (internal/pycore_code.h CO_FAST_*, checked by a
// _Static_assert in eval_frame.c).
constexpr unsigned char kSlotFree = 0x80;
}  // namespace

int FrameView::numLocals() const { return code_->co_nlocalsplus; }

PyObject* FrameView::localName(int i) const {
  return PyTuple_GET_ITEM(code_->co_localsplusnames, i);  // borrowed ref
}

int FrameView::localIndex(std::string_view name) const {
  for (int i = 0; i < numLocals(); ++i) {
    Py_ssize_t size = 0;
    const char* text = PyUnicode_AsUTF8AndSize(localName(i), &size);  // borrowed buffer
    if (text == nullptr) {
      PyErr_Clear();
      continue;
    }
    if (static_cast<size_t>(size) == name.size() && std::memcmp(text, name.data(), size) == 0) {
      return i;
    }
  }
  return -1;
}

PyObject* FrameView::local(int i) const {
  auto kind = static_cast<unsigned char>(PyBytes_AS_STRING(code_->co_localspluskinds)[i]);
  if (kind & kSlotFree) {
    // COPY_FREE_VARS has not run: read the closure. Free slots are the last co_nfreevars.
    if (closure_ == nullptr) return nullptr;
    int index = i - (code_->co_nlocalsplus - code_->co_nfreevars);
    PyObject* cell = PyTuple_GET_ITEM(closure_, index);  // borrowed ref
    return PyCell_GET(cell);                              // borrowed ref, NULL if empty
  }
  return localsplus_[i];  // borrowed ref, NULL if unbound
}

PyObject* FrameView::localsDict() const {
  PyObject* dict = PyDict_New();  // new ref
  if (dict == nullptr) return nullptr;
  for (int i = 0; i < numLocals(); ++i) {
    PyObject* value = local(i);  // borrowed ref
    if (value == nullptr) continue;
    if (PyDict_SetItem(dict, localName(i), value) < 0) {
      Py_DECREF(dict);
      return nullptr;
    }
  }
  return dict;
}

}  // namespace dynamo::core

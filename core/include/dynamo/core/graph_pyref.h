// Owning references to Python objects, as the graph IR holds them (call targets, constants).
//
// The graph IR lives in dynamo::core, below the binding layer, so it cannot use the binding's
// PyRef (python/src/py_util.h); this is the same idea for core code. Every copy, assignment and
// destruction touches a reference count, so the GIL must be held whenever a PyObjectRef is
// copied or destroyed. IR values (Target, Node, Graph) do not hold PyObjectRefs: a Target's live
// handle is shared and released under the GIL by its last owner (graph_node.h).
#pragma once

#include <Python.h>

#include <utility>

namespace dynamo::core {

/// An owned (strong) reference to a Python object; releases it on destruction. Needs the GIL.
class PyObjectRef {
 public:
  PyObjectRef() = default;
  /// Takes ownership of a new reference (may be NULL).
  static PyObjectRef steal(PyObject* o) { return PyObjectRef(o); }
  /// Takes a new reference to a borrowed object (may be NULL).
  static PyObjectRef borrow(PyObject* o) {
    Py_XINCREF(o);
    return PyObjectRef(o);
  }
  PyObjectRef(const PyObjectRef& other) : obj_(other.obj_) { Py_XINCREF(obj_); }
  PyObjectRef(PyObjectRef&& other) noexcept : obj_(std::exchange(other.obj_, nullptr)) {}
  PyObjectRef& operator=(PyObjectRef other) noexcept {
    std::swap(obj_, other.obj_);
    return *this;
  }
  ~PyObjectRef() { Py_XDECREF(obj_); }

  /// The object, borrowed from this reference.
  PyObject* get() const { return obj_; }
  /// Gives up ownership: the caller now owns the reference.
  PyObject* release() { return std::exchange(obj_, nullptr); }
  explicit operator bool() const { return obj_ != nullptr; }

 private:
  explicit PyObjectRef(PyObject* o) : obj_(o) {}
  PyObject* obj_ = nullptr;
};

/// Thrown when a CPython call failed and left a Python error set: the one such type of core (the
/// frame hook, guards, the compiler, the graph runner) and of the bindings. Binding code catches
/// it and returns NULL so the pending Python error propagates unchanged; the frame hook lets it
/// propagate to the caller of the frame.
struct PythonError {};

/// Returns o, or throws PythonError when it is NULL (a C API call failed).
inline PyObject* checkPy(PyObject* o) {
  if (o == nullptr) throw PythonError{};
  return o;
}

}  // namespace dynamo::core

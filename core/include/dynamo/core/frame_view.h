// FrameView: what guards and the frame compiler see of a Python frame that is about to start.
//
// The view holds borrowed pointers into the interpreter frame the PEP 523 hook intercepted; it is
// valid only during the hook callback that received it (guard checks, FrameCompiler::compile).
// The frame is incomplete at that point (its prologue has not run), so the view presents the
// values "as Python sees them at entry": arguments from their slots, free variables read
// through the function's closure cells, non-argument cells as unbound.
#pragma once

#include <Python.h>

#include <string_view>

namespace dynamo::core {

/// A read-only view of an intercepted frame. Cheap to copy; never owns references.
class FrameView {
 public:
  /// All arguments are borrowed refs that must outlive the view. `closure` may be NULL;
  /// `localsplus` has code->co_nlocalsplus slots (NULL = unbound).
  FrameView(PyCodeObject* code, PyObject* function, PyObject* globals, PyObject* builtins,
            PyObject* closure, PyObject* const* localsplus)
      : code_(code),
        function_(function),
        globals_(globals),
        builtins_(builtins),
        closure_(closure),
        localsplus_(localsplus) {}

  /// The code object about to run. Borrowed ref.
  PyCodeObject* code() const { return code_; }
  /// The function object being called. Borrowed ref.
  PyObject* function() const { return function_; }
  /// The function's globals dict. Borrowed ref.
  PyObject* globals() const { return globals_; }
  /// The builtins dict the frame uses. Borrowed ref.
  PyObject* builtins() const { return builtins_; }
  /// The function's closure (tuple of cells), or NULL. Borrowed ref.
  PyObject* closure() const { return closure_; }

  /// Number of local slots: locals, cells and free variables (co_nlocalsplus).
  int numLocals() const;
  /// Name of slot i (a str). Borrowed ref, owned by the code object.
  PyObject* localName(int i) const;
  /// Slot index of `name`, or -1.
  int localIndex(std::string_view name) const;
  /// Value of slot i as Python sees it at entry, or NULL when unbound. Free variables are read
  /// from their closure cell; an argument that is also a cell is still the raw value.
  /// Borrowed ref. Precondition: 0 <= i < numLocals().
  PyObject* local(int i) const;
  /// A new dict {name: value} of the bound slots (what f_locals would show at entry).
  /// New ref; NULL with a Python error set on failure.
  PyObject* localsDict() const;

 private:
  PyCodeObject* code_;
  PyObject* function_;
  PyObject* globals_;
  PyObject* builtins_;
  PyObject* closure_;
  PyObject* const* localsplus_;
};

}  // namespace dynamo::core

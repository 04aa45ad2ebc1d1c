// Text helpers for guard descriptions and failure reasons (slow path only).
//
// Every helper here is safe to call with a Python error pending or raised inside: it saves and
// restores the caller's error indicator, and falls back to a placeholder when repr() raises.
#pragma once

#include <Python.h>

#include <string>

namespace dynamo::core::guards_detail {

/// repr(o), shortened to about `maxLen` characters; "<unprintable T>" when repr raises.
/// o: borrowed, may be NULL ("<NULL>").
std::string safeRepr(PyObject* o, std::size_t maxLen = 80);
/// type(o).__name__ ("dict", "Tensor", "Parameter"). o: borrowed, may be NULL.
std::string typeName(PyObject* o);
/// A short label that names an object without printing it whole: "class Foo", "function f",
/// "module torch", "Linear object at 0x7f..". o: borrowed.
std::string objectLabel(PyObject* o);
/// The current Python error as "AttributeError: 'Linear' object has no attribute 'w'"; clears it.
std::string takeErrorText();

/// Saves the error indicator on construction, restores it on destruction.
class ErrorSaver {
 public:
  ErrorSaver() { PyErr_Fetch(&type_, &value_, &tb_); }
  ~ErrorSaver() { PyErr_Restore(type_, value_, tb_); }
  ErrorSaver(const ErrorSaver&) = delete;
  ErrorSaver& operator=(const ErrorSaver&) = delete;

 private:
  PyObject* type_ = nullptr;   // new ref (owned until restored)
  PyObject* value_ = nullptr;  // new ref
  PyObject* tb_ = nullptr;     // new ref
};

}  // namespace dynamo::core::guards_detail

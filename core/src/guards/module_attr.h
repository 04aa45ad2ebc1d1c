// The fast nn.Module attribute fetch shared by Source::moduleAttr and planModuleAttr.
#pragma once

#include <Python.h>

#include "dynamo/core/source.h"

namespace dynamo::core::guards_detail {

/// What getattr(module, name) gives when the class defines no such attribute (planModuleAttr):
/// first the dict where it was found at trace time (`slot`), then the full nn.Module order:
/// instance __dict__, _parameters, _buffers, _modules. Trying `slot` first is exact because
/// nn.Module.__setattr__ keeps each name in at most one of those dicts (assigning a plain value
/// to a parameter/buffer/submodule name raises); only writing module.__dict__ directly could
/// shadow it, which PyTorch's guards do not handle either. Falls back to PyObject_GetAttr when the
/// module has no __dict__. module, name: borrowed (name: an exact str). Returns a new ref, or
/// NULL with a Python error (AttributeError when the attribute is nowhere).
PyObject* fetchModuleAttr(PyObject* module, PyObject* name, ModuleSlot slot);

}  // namespace dynamo::core::guards_detail

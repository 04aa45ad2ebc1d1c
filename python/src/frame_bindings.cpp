// frame bindings: not written yet.
#include "bindings.h"
namespace dynamo::py {
int initFrameBindings(PyObject*) { return 0; }
}  // namespace dynamo::py

// graph bindings: not written yet.
#include "bindings.h"
namespace dynamo::py {
int initGraphBindings(PyObject*) { return 0; }
}  // namespace dynamo::py

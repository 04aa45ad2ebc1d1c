// storage bindings: not written yet.
#include "bindings.h"
namespace dynamo::py {
int initStorageBindings(PyObject*) { return 0; }
}  // namespace dynamo::py

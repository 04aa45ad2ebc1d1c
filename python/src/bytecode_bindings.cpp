// bytecode bindings: not written yet.
#include "bindings.h"
namespace dynamo::py {
int initBytecodeBindings(PyObject*) { return 0; }
}  // namespace dynamo::py

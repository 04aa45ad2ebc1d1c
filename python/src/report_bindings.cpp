// report bindings: being written (issue 4).
#include "bindings.h"
namespace dynamo::py {
int initReportBindings(PyObject*) { return 0; }
}  // namespace dynamo::py

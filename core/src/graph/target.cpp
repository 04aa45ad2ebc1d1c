// Target: names a Python callable so that a tool can import it back (graph_node.h).
//
// A name is only trusted once it resolves to the very same object. Candidates, in order:
//   - for method descriptors (torch.Tensor.add_): "torch.Tensor.<name>", then
//     "<__objclass__ module>.<__objclass__ qualname>.<name>";
//   - "<module>.<__qualname__>", then "<module>.<__name__>", where module is __module__ (or, for
//     builtins bound to a module, that module's name) after replacing private homes with public
//     ones: _operator -> operator, torch._C._VariableFunctions -> torch, torch._C._nn ->
//     torch.nn.functional, torch._tensor -> torch, torch._ops -> torch.ops, ...; and for
//     torch._C._linalg.linalg_norm and the like, "torch.linalg.norm".
// The first candidate that resolves to the callable wins (and is cached for the process: such
// objects live in modules anyway). Otherwise the first candidate is kept with resolvable false.
#include <cstring>
#include <optional>
#include <unordered_map>
#include <vector>

#include "dynamo/core/graph_node.h"
#include "py_errors.h"

namespace dynamo::core {
namespace {

// Public homes of objects that CPython or torch define in private modules.
const std::pair<const char*, const char*> kModuleAliases[] = {
    {"_operator", "operator"},
    {"torch._C._VariableFunctions", "torch"},
    {"torch._C._nn", "torch.nn.functional"},
    {"torch._C._linalg", "torch.linalg"},
    {"torch._C._fft", "torch.fft"},
    {"torch._C._special", "torch.special"},
    {"torch._C._nested", "torch.nested"},
    {"torch._tensor", "torch"},
    {"torch._ops", "torch.ops"},
};

// str attribute `name` of o, or nullopt (any error cleared).
std::optional<std::string> strAttr(PyObject* o, const char* name) {
  PyObjectRef value = PyObjectRef::steal(PyObject_GetAttrString(o, name));  // new ref
  if (!value || !PyUnicode_Check(value.get())) {
    PyErr_Clear();
    return std::nullopt;
  }
  const char* text = PyUnicode_AsUTF8(value.get());  // borrowed buffer, owned by value
  if (text == nullptr) {
    PyErr_Clear();
    return std::nullopt;
  }
  return std::string(text);
}

std::string aliasModule(const std::string& module) {
  for (const auto& [from, to] : kModuleAliases) {
    size_t n = std::strlen(from);
    if (module.compare(0, n, from) == 0 && (module.size() == n || module[n] == '.')) {
      return to + module.substr(n);
    }
  }
  return module;
}

// The module a callable belongs to: __module__, or for builtins bound to a module (torch._C._nn
// functions), that module's __name__.
std::optional<std::string> moduleOf(PyObject* callable) {
  if (PyCFunction_Check(callable)) {
    PyObject* self = PyCFunction_GetSelf(callable);  // borrowed ref
    if (self != nullptr && PyModule_Check(self)) return strAttr(self, "__name__");
  }
  return strAttr(callable, "__module__");
}

std::string lastPart(const std::string& dotted) {
  size_t dot = dotted.rfind('.');
  return dot == std::string::npos ? dotted : dotted.substr(dot + 1);
}

void addCandidate(std::vector<std::string>& out, const std::string& name) {
  for (const std::string& existing : out) {
    if (existing == name) return;
  }
  out.push_back(name);
}

std::vector<std::string> candidateNames(PyObject* callable) {
  std::vector<std::string> out;
  std::optional<std::string> name = strAttr(callable, "__name__");
  std::optional<std::string> qualname = strAttr(callable, "__qualname__");
  PyObjectRef objclass = PyObjectRef::steal(PyObject_GetAttrString(callable, "__objclass__"));
  if (!objclass) PyErr_Clear();
  if (objclass && name) {
    addCandidate(out, "torch.Tensor." + *name);
    std::optional<std::string> cm = strAttr(objclass.get(), "__module__");
    std::optional<std::string> cq = strAttr(objclass.get(), "__qualname__");
    if (cm && cq) addCandidate(out, aliasModule(*cm) + "." + *cq + "." + *name);
  }
  if (std::optional<std::string> module = moduleOf(callable)) {
    std::string home = aliasModule(*module);
    if (qualname) addCandidate(out, home + "." + *qualname);
    if (name) addCandidate(out, home + "." + *name);
    // torch._C._linalg.linalg_norm is torch.linalg.norm: drop the submodule prefix.
    std::string sub = lastPart(home) + "_";
    if (name && name->compare(0, sub.size(), sub) == 0) {
      addCandidate(out, home + "." + name->substr(sub.size()));
    }
    if (qualname) addCandidate(out, *module + "." + *qualname);
    if (name) addCandidate(out, *module + "." + *name);
  }
  if (out.empty()) addCandidate(out, name ? *name : std::string(Py_TYPE(callable)->tp_name));
  return out;
}

// Finds the first part of a dotted name among the loaded modules (a callable's own module is
// always loaded; nothing new is imported for a guess like "torch.Tensor.upper") and walks the
// rest as attributes, importing submodules where an attribute is missing. A new ref, or NULL
// with no error set.
PyObjectRef resolveName(const std::string& dotted) {
  size_t dot = dotted.find('.');
  std::string prefix = dotted.substr(0, dot);
  PyObjectRef root = PyObjectRef::steal(PyUnicode_FromString(prefix.c_str()));  // new ref
  PyObjectRef obj = root ? PyObjectRef::steal(PyImport_GetModule(root.get())) : root;  // new ref
  while (obj && dot != std::string::npos) {
    size_t next = dotted.find('.', dot + 1);
    std::string part = dotted.substr(dot + 1, next == std::string::npos ? next : next - dot - 1);
    prefix += "." + part;
    PyObjectRef attr = PyObjectRef::steal(PyObject_GetAttrString(obj.get(), part.c_str()));
    if (!attr) {
      PyErr_Clear();
      attr = PyObjectRef::steal(PyImport_ImportModule(prefix.c_str()));  // new ref
    }
    obj = std::move(attr);
    dot = next;
  }
  if (!obj) PyErr_Clear();
  return obj;
}

// Resolvable names by callable. The entries own their callables, which keeps the keys valid.
std::unordered_map<PyObject*, Target>& nameCache() {
  static auto* cache = new std::unordered_map<PyObject*, Target>();  // never destroyed:
  return *cache;  // it holds Python refs and must not be torn down after the interpreter.
}

}  // namespace

Target Target::make(PyObjectRef callable, std::string qualifiedName, bool resolvable) {
  Target t;
  t.callable_ = std::move(callable);
  t.shortName_ = lastPart(qualifiedName);
  t.qualifiedName_ = std::move(qualifiedName);
  t.resolvable_ = resolvable;
  return t;
}

Target Target::fromCallable(PyObject* callable) {  // borrowed ref
  DYNAMO_INTERNAL_ASSERT(callable != nullptr, "Target of a null callable");
  auto& cache = nameCache();
  if (auto it = cache.find(callable); it != cache.end()) return it->second;

  // Naming must not disturb an error the caller may have pending.
  PyObject* pending = takePythonException();  // new ref or NULL, restored below
  std::vector<std::string> candidates = candidateNames(callable);
  std::optional<Target> found;
  for (const std::string& name : candidates) {
    PyObjectRef resolved = resolveName(name);
    if (resolved.get() == callable) {
      found = make(PyObjectRef::borrow(callable), name, true);
      break;
    }
  }
  std::optional<std::string> dunderName = strAttr(callable, "__name__");
  restorePythonException(pending);  // steals pending

  Target t = found ? *found : make(PyObjectRef::borrow(callable), candidates.front(), false);
  if (dunderName) t.shortName_ = *dunderName;
  if (found) cache.emplace(callable, t);
  return t;
}

}  // namespace dynamo::core

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
#include "dynamo/core/graph_python.h"
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
// always loaded; nothing new is imported for a guess like "torch.Tensor.upper"), or imports it
// when importRoot, and walks the rest as attributes, importing submodules where an attribute is
// missing. A new ref, or NULL with no error set.
PyObjectRef resolveName(const std::string& dotted, bool importRoot = false) {
  size_t dot = dotted.find('.');
  std::string prefix = dotted.substr(0, dot);
  PyObjectRef obj;
  if (importRoot) {
    obj = PyObjectRef::steal(PyImport_ImportModule(prefix.c_str()));  // new ref
  } else {
    PyObjectRef root = PyObjectRef::steal(PyUnicode_FromString(prefix.c_str()));  // new ref
    obj = root ? PyObjectRef::steal(PyImport_GetModule(root.get())) : root;  // new ref
  }
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

// Releases a live handle: the last owner of a Target may not hold the GIL. Nothing is released
// once the interpreter is gone (the object went with it).
void releaseHandle(PyObject* o) {
  if (o == nullptr || !Py_IsInitialized()) return;
  PyGILState_STATE state = PyGILState_Ensure();
  Py_DECREF(o);
  PyGILState_Release(state);
}

std::shared_ptr<PyObject> shareHandle(PyObjectRef callable) {
  if (!callable) return nullptr;
  return std::shared_ptr<PyObject>(callable.release(), releaseHandle);
}

constexpr const char kTensorPrefix[] = "torch.Tensor.";
constexpr const char kOpsPrefix[] = "torch.ops.";

bool startsWith(const std::string& s, const char* prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}

}  // namespace

const char* targetKindName(TargetKind kind) {
  switch (kind) {
    case TargetKind::kFunction: return "function";
    case TargetKind::kMethod: return "method";
    case TargetKind::kAtenOp: return "aten";
  }
  return "?";
}

// The kind and its parts follow from the name: "torch.Tensor.<method>" (one more part) is a
// method; "torch.ops.<ns>.<op>" and "torch.ops.<ns>.<op>.<overload>" are operators.
void Target::setName(std::string qualifiedName) {
  qualifiedName_ = std::move(qualifiedName);
  shortName_ = lastPart(qualifiedName_);
  kind_ = TargetKind::kFunction;
  method_.clear();
  schemaName_.clear();
  overloadName_.clear();
  const std::string& q = qualifiedName_;
  if (startsWith(q, kTensorPrefix) && q.find('.', std::strlen(kTensorPrefix)) == std::string::npos &&
      q.size() > std::strlen(kTensorPrefix)) {
    kind_ = TargetKind::kMethod;
    method_ = q.substr(std::strlen(kTensorPrefix));
    return;
  }
  if (!startsWith(q, kOpsPrefix)) return;
  std::vector<std::string> parts;
  for (size_t start = std::strlen(kOpsPrefix);;) {
    size_t dot = q.find('.', start);
    parts.push_back(q.substr(start, dot == std::string::npos ? dot : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (parts.size() < 2 || parts.size() > 3) return;
  for (const std::string& part : parts) {
    if (part.empty()) return;
  }
  kind_ = TargetKind::kAtenOp;
  shortName_ = parts[1];
  if (parts.size() == 3) overloadName_ = parts[2];
  schemaName_ = parts[0] + "::" + parts[1];
  if (!overloadName_.empty() && overloadName_ != "default") schemaName_ += "." + overloadName_;
}

Target Target::make(PyObjectRef callable, std::string qualifiedName, bool resolvable) {
  Target t;
  t.handle_ = shareHandle(std::move(callable));
  t.setName(std::move(qualifiedName));
  t.resolvable_ = resolvable;
  return t;
}

Target Target::fromName(std::string qualifiedName, bool resolvable) {
  return make(PyObjectRef(), std::move(qualifiedName), resolvable);
}

Target Target::atenOp(const std::string& schemaName) {
  size_t colons = schemaName.find("::");
  DYNAMO_USER_CHECK(colons != std::string::npos && colons > 0 && colons + 2 < schemaName.size(),
                    UserErrorKind::kInvalidArgument, "ATen operator name '", schemaName,
                    "' is not of the form namespace::name[.overload]");
  std::string ns = schemaName.substr(0, colons);
  std::string rest = schemaName.substr(colons + 2);
  if (rest.find('.') == std::string::npos) rest += ".default";
  Target t = fromName("torch.ops." + ns + "." + rest, true);
  DYNAMO_USER_CHECK(t.kind() == TargetKind::kAtenOp, UserErrorKind::kInvalidArgument,
                    "ATen operator name '", schemaName, "' is not of the form namespace::name[.overload]");
  return t;
}

Target Target::withCallable(PyObjectRef callable) const {
  Target t = *this;
  t.handle_ = shareHandle(std::move(callable));
  return t;
}

bool Target::operator==(const Target& other) const {
  return qualifiedName_ == other.qualifiedName_ && resolvable_ == other.resolvable_;
}

PyObjectRef resolveQualifiedName(const std::string& qualifiedName) {
  return resolveName(qualifiedName, true);
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

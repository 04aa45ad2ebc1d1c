// dynamo._C bindings of the trace store (dynamo::storage), written against the CPython C API.
//
//   dynamo._C.TraceWriter(path, *, argv=..., python_version=..., ...)   record_*(), flush(), close()
//   dynamo._C.TraceReader(path)                                         runs(), frames(), ...
//   dynamo._C.trace_report(path, name, mask=False) -> str                the dynamo-trace reports
//   dynamo._C.upgrade_trace_store(path) -> int                           in-place schema upgrade
//
// Rows come back as dicts with snake_case keys mirroring records.h. python/dynamo/trace.py is the
// Pythonic layer over this. Calls that wait on the disk release the GIL.
#include <Python.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <algorithm>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bindings.h"
#include "recording_bindings.h"
#include "dynamo/common/error.h"
#include "dynamo/storage/crash_marker.h"
#include "dynamo/storage/trace_reader.h"
#include "dynamo/explain/trace_report.h"
#include "dynamo/storage/trace_store.h"
#include "dynamo/storage/trace_writer.h"
#include "py_util.h"

namespace dynamo::py {

namespace {

using namespace dynamo::storage;
using explain::ReportCommand;
using explain::ReportOptions;
using explain::reportCommands;

// ---- conversions --------------------------------------------------------------------------

// str -> UTF-8, bytes / bytearray -> raw bytes. `o` is a borrowed ref.
std::string toBytes(PyObject* o, const char* what) {
  if (PyBytes_Check(o)) {
    return std::string(PyBytes_AS_STRING(o), static_cast<size_t>(PyBytes_GET_SIZE(o)));
  }
  if (PyByteArray_Check(o)) {
    return std::string(PyByteArray_AS_STRING(o), static_cast<size_t>(PyByteArray_GET_SIZE(o)));
  }
  if (PyUnicode_Check(o)) return toString(o);
  throw UserError(UserErrorKind::kInvalidArgument,
                  detail::concat(what, " must be str or bytes, not ", Py_TYPE(o)->tp_name));
}

// Any iterable of str -> vector. `o` is a borrowed ref (None: empty).
std::vector<std::string> toStringList(PyObject* o, const char* what) {
  std::vector<std::string> out;
  if (o == nullptr || o == Py_None) return out;
  if (PyUnicode_Check(o))
    throw UserError(UserErrorKind::kInvalidArgument,
                    detail::concat(what, " must be a list of str, not a single str"));
  PyRef iter = PyRef::steal(checkPy(PyObject_GetIter(o)));
  while (PyRef item = PyRef::steal(PyIter_Next(iter.get()))) {
    if (!PyUnicode_Check(item.get()))
      throw UserError(UserErrorKind::kInvalidArgument,
                      detail::concat(what, " must hold str items, not ",
                                     Py_TYPE(item.get())->tp_name));
    out.push_back(toString(item.get()));
  }
  if (PyErr_Occurred()) throw PythonError{};
  return out;
}

// Phases: a dict {name: microseconds} (insertion order) or an iterable of (name, us) pairs.
std::vector<CompilePhase> fromPyPhases(PyObject* o, const char*) {
  std::vector<CompilePhase> out;
  if (o == Py_None) return out;
  PyRef items = PyDict_Check(o) ? PyRef::steal(checkPy(PyDict_Items(o))) : PyRef::borrow(o);
  PyRef iter = PyRef::steal(checkPy(PyObject_GetIter(items.get())));
  while (PyRef item = PyRef::steal(PyIter_Next(iter.get()))) {
    const char* name = nullptr;
    long long us = 0;
    if (!PyArg_ParseTuple(item.get(), "sL;phases must be (name, microseconds) pairs", &name, &us))
      throw PythonError{};
    out.push_back({name, us});
  }
  if (PyErr_Occurred()) throw PythonError{};
  return out;
}

// Builds a dict key by key; every value passed in is a new reference it takes over.
class DictBuilder {
 public:
  DictBuilder() : dict_(PyRef::steal(checkPy(PyDict_New()))) {}
  DictBuilder& set(const char* key, PyObject* value) {  // value: a new ref, taken over
    setItem(dict_.get(), key, value);
    return *this;
  }
  DictBuilder& location(const SourceLocation& where) {
    return set("file", newStr(where.file))
        .set("line", newInt(where.line))
        .set("source_line", newStr(where.sourceLine));
  }
  PyObject* release() { return dict_.release(); }  // new ref

 private:
  PyRef dict_;
};

// The phases of a compile as [(name, microseconds)].
PyObject* phasesToPy(const std::vector<CompilePhase>& phases) {  // new ref
  PyRef list = PyRef::steal(checkPy(PyList_New(0)));
  for (const CompilePhase& p : phases) {
    appendItem(list.get(), Py_BuildValue("(NN)", newStr(p.name), newInt(p.durationUs)));
  }
  return list.release();
}

// Bytecode is bytes, every other code kind text.
PyObject* codeContentToPy(const CodeRecord& r) {  // new ref
  bool binary = r.kind == CodeKind::kOriginalBytecode || r.kind == CodeKind::kTransformedBytecode;
  return binary ? newBytes(r.content) : newStr(r.content);
}

PyObject* toInt(long long v) { return newInt(v); }                                 // new ref
PyObject* toStr(const std::string& s) { return newStr(s); }                        // new ref
PyObject* toBytes(const std::string& s) { return newBytes(s); }                    // new ref
PyObject* toStrList(const std::vector<std::string>& items) { return newStrList(items); }  // new ref
PyObject* toPhases(const std::vector<CompilePhase>& phases) { return phasesToPy(phases); }  // new ref
PyObject* toCodeKind(CodeKind kind) { return newStr(codeKindName(kind)); }       // new ref
PyObject* toObj(PyObject* o) { return checkPy(o); }  // the expression's new ref

// toPy(const Record&) -> a new dict, one per record of storage_rows.def.
#define DYNAMO_ROW(Type) \
  PyObject* toPy(const Type& r) {  \
    DictBuilder d;
#define DYNAMO_COL(key, kind, expr) d.set(key, to##kind(expr));
#define DYNAMO_ARG(key, kind, member, pos, dflt) d.set(key, to##kind(r.member));
#define DYNAMO_LOC(member) d.location(r.member);
#define DYNAMO_LOC_ARG(member, pos) d.location(r.member);
#define DYNAMO_END    \
  return d.release(); \
  }
#include "storage_rows.def"

// ---- writer arguments: fromPy<kind>(value, key), the inverse of to<kind> ---------------------

[[noreturn]] void badArgument(const char* key, const char* wanted, PyObject* o) {
  throw UserError(UserErrorKind::kInvalidArgument,
                  detail::concat(key, " must be ", wanted, ", not ", Py_TYPE(o)->tp_name));
}
long long fromPyInt(PyObject* o, const char* key) {
  if (!PyLong_Check(o)) badArgument(key, "int", o);
  long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred()) throw PythonError{};
  return v;
}
std::string fromPyStr(PyObject* o, const char* key) {
  if (!PyUnicode_Check(o)) badArgument(key, "str", o);
  return toString(o);
}
std::string fromPyBytes(PyObject* o, const char* key) { return toBytes(o, key); }
std::vector<std::string> fromPyStrList(PyObject* o, const char* key) { return toStringList(o, key); }
CodeKind fromPyCodeKind(PyObject* o, const char* key) {
  std::string name = fromPyStr(o, key);
  std::optional<CodeKind> parsed = codeKindFromName(name);
  if (!parsed) {
    std::string known;
    for (CodeKind k : allCodeKinds()) known += detail::concat(known.empty() ? "" : ", ", codeKindName(k));
    throw UserError(UserErrorKind::kInvalidArgument, detail::concat("unknown code kind '", name, "'"),
                    {}, "", detail::concat("use one of: ", known));
  }
  return *parsed;
}

// The defaults of storage_rows.def: Required, Keep (the record's own), or a value.
struct RequiredArg {};
struct KeepDefault {};
constexpr RequiredArg Required{};
constexpr KeepDefault Keep{};
template <typename Member, typename Default>
void setDefault(Member& m, const Default& d) {
  if constexpr (!std::is_same_v<Default, RequiredArg> && !std::is_same_v<Default, KeepDefault>) m = d;
}
template <typename Default>
constexpr bool isRequired(const Default&) { return std::is_same_v<Default, RequiredArg>; }

// How a default reads in a signature ("status='ok'", "dim=-1"): the value a missing argument
// leaves in the record.
std::string render(long long v) { return std::to_string(v); }
std::string render(const std::string& v) { return detail::concat("'", v, "'"); }
std::string render(const std::vector<std::string>&) { return "()"; }
std::string render(const std::vector<CompilePhase>&) { return "None"; }
template <typename Member, typename Default>
std::string defaultText(const Member& recordDefault, const Default& d) {
  if constexpr (std::is_same_v<Default, RequiredArg>) {
    return "";
  } else {
    Member v = recordDefault;
    setDefault(v, d);
    return render(v);
  }
}

// One argument of a writer method, for its signature.
struct ArgDoc {
  std::string key;
  int pos;
  std::string dflt;  ///< "" when required
};

// A DYNAMO_LOC_ARG as the three arguments it stands for.
#define LOCATION_ARGS(member, pos)                                               \
  DYNAMO_ARG("file", Str, member.file, pos, Keep)                                 \
  DYNAMO_ARG("line", Int, member.line, (pos) > 0 ? (pos) + 1 : 0, Keep)           \
  DYNAMO_ARG("source_line", Str, member.sourceLine, (pos) > 0 ? (pos) + 2 : 0, Keep)

// readArgs(method, args, kwargs, Type&) fills a record from a writer call; describeArgs(Type*)
// lists its arguments. One pair per record of storage_rows.def.
#define DYNAMO_ROW(Type)                                                                        \
  [[maybe_unused]] void readArgs(const char* method, PyObject* args, PyObject* kwargs, [[maybe_unused]] Type& r) { \
    CallArgs in(method, args, kwargs);
#define DYNAMO_ARG(key, kind, member, pos, dflt)                                     \
  if (PyObject* v = in.take(key, pos, isRequired(dflt))) r.member = fromPy##kind(v, key); \
  else setDefault(r.member, dflt);
#define DYNAMO_IN DYNAMO_ARG
#define DYNAMO_LOC_ARG LOCATION_ARGS
#define DYNAMO_END \
  in.finish();     \
  }
#include "storage_rows.def"

#define DYNAMO_ROW(Type) \
  [[maybe_unused]] std::vector<ArgDoc> describeArgs(const Type*) { \
    [[maybe_unused]] const Type defaults{};                         \
    std::vector<ArgDoc> out;
#define DYNAMO_ARG(key, kind, member, pos, dflt) \
  out.push_back({key, pos, defaultText(defaults.member, dflt)});
#define DYNAMO_IN DYNAMO_ARG
#define DYNAMO_LOC_ARG LOCATION_ARGS
#define DYNAMO_END \
  return out;      \
  }
#include "storage_rows.def"

// "record_frame(file, first_line, name) -> id": positional arguments in order, then the
// keyword-only ones after a '*'.
std::string signatureOf(const char* method, std::vector<ArgDoc> docs) {
  std::stable_sort(docs.begin(), docs.end(), [](const ArgDoc& a, const ArgDoc& b) {
    return (a.pos == 0 ? 1000 : a.pos) < (b.pos == 0 ? 1000 : b.pos);
  });
  std::string out = detail::concat(method, "(");
  bool star = false;
  for (size_t i = 0; i < docs.size(); ++i) {
    if (docs[i].pos == 0 && !star) {
      out += i > 0 ? ", *" : "*";
      star = true;
    }
    out += detail::concat(i > 0 || star ? ", " : "", docs[i].key, docs[i].dflt.empty() ? "" : "=", docs[i].dflt);
  }
  return out + ") -> id";
}

template <typename T>
PyObject* toPyList(const std::vector<T>& rows) {  // new ref
  PyRef list = PyRef::steal(checkPy(PyList_New(static_cast<Py_ssize_t>(rows.size()))));
  for (size_t i = 0; i < rows.size(); ++i)
    PyList_SET_ITEM(list.get(), static_cast<Py_ssize_t>(i), toPy(rows[i]));  // steals
  return list.release();
}

// ---- TraceWriter --------------------------------------------------------------------------

struct WriterObject {
  PyObject_HEAD
  std::shared_ptr<TraceWriter>* writer;  // owned holder; null once closed (the compile sink
                                         // may share the writer: recording_bindings.cpp)
  RowId runId;
  int schemaVersion;
  PyObject* path;       // new ref, owned
};

PyTypeObject* writerType = nullptr;  // dynamo._C.TraceWriter (strong ref, set at init)

TraceWriter& liveWriter(WriterObject* self) {
  if (self->writer == nullptr)
    throw UserError(UserErrorKind::kTraceStore,
                    detail::concat("trace store '", toString(self->path), "' is closed"), {}, "",
                    "record before close(), or open a new writer");
  return **self->writer;
}

PyObject* writerNew(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* kw[] = {"path", "argv", "python_version", "torch_version", "dynamo_version",
                             "rank", "world_size", "batch_rows", "max_delay_ms",
                             "schema_version_for_testing", nullptr};
  PyObject* path = nullptr;  // borrowed ref
  PyObject* argv = nullptr;  // borrowed ref
  const char* pythonVersion = "";
  const char* torchVersion = "";
  const char* dynamoVersion = "";
  int rank = -1, worldSize = 0, batchRows = 512, maxDelayMs = 100, testVersion = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "U|$Osssiiiii", const_cast<char**>(kw), &path,
                                   &argv, &pythonVersion, &torchVersion, &dynamoVersion, &rank,
                                   &worldSize, &batchRows, &maxDelayMs, &testVersion))
    return nullptr;
  DYNAMO_PY_TRY
  RunRecord run;
  run.argv = toStringList(argv, "argv");
  run.pythonVersion = pythonVersion;
  run.torchVersion = torchVersion;
  run.dynamoVersion = dynamoVersion;
  run.rank = rank;
  run.worldSize = worldSize;
  WriterOptions options;
  options.batchRows = batchRows > 0 ? static_cast<size_t>(batchRows) : 1;
  options.maxDelay = std::chrono::milliseconds(maxDelayMs);
  options.schemaVersionForTesting = testVersion;
  std::string file = toString(path);
  std::unique_ptr<TraceWriter> writer =
      withoutGil([&] { return TraceWriter::open(file, run, options); });
  PyRef self = PyRef::steal(checkPy(type->tp_alloc(type, 0)));
  auto* obj = reinterpret_cast<WriterObject*>(self.get());
  obj->runId = writer->runId();
  obj->schemaVersion = writer->schemaVersion();
  obj->writer = new std::shared_ptr<TraceWriter>(std::move(writer));
  Py_INCREF(path);
  obj->path = path;  // new ref, owned by obj
  return self.release();
  DYNAMO_PY_CATCH(nullptr)
}

void writerDealloc(PyObject* self) {
  auto* obj = reinterpret_cast<WriterObject*>(self);
  if (obj->writer != nullptr) {
    std::unique_ptr<std::shared_ptr<TraceWriter>> holder(std::exchange(obj->writer, nullptr));
    beforeWriterClose(holder->get());
    // close() flushes; errors go to stderr (never raised from a dealloc).
    TraceWriter* writer = holder->get();
    Py_BEGIN_ALLOW_THREADS
    try {
      writer->close();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dynamo: warning: %s\n", e.what());
    }
    Py_END_ALLOW_THREADS
  }
  Py_XDECREF(obj->path);
  PyTypeObject* type = Py_TYPE(self);  // borrowed ref
  type->tp_free(self);
  Py_DECREF(type);  // heap type instances own a reference to their type
}

// The record_* methods, one per DYNAMO_WRITER of storage_rows.def: the arguments fill a record
// (readArgs), the writer records it, the method returns its id.
#define DYNAMO_WRITER(Type, method, writerFn)                                              \
  PyObject* writer_##writerFn(PyObject* self, PyObject* args, PyObject* kwargs) {            \
    DYNAMO_PY_TRY                                                                           \
    Type r;                                                                                 \
    readArgs(method, args, kwargs, r);                                                      \
    return newInt(liveWriter(reinterpret_cast<WriterObject*>(self)).writerFn(std::move(r))); \
    DYNAMO_PY_CATCH(nullptr)                                                                \
  }
#include "storage_rows.def"

PyObject* writerNoteCrashStage(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kw[] = {"stage", "compile_id", nullptr};
  const char* stage = "";
  long long compileId = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|L", const_cast<char**>(kw), &stage,
                                   &compileId))
    return nullptr;
  DYNAMO_PY_TRY
  std::optional<CrashStage> parsed = crashStageFromName(stage);
  if (!parsed)
    throw UserError(UserErrorKind::kInvalidArgument,
                    detail::concat("unknown crash stage '", stage, "'"), {}, "",
                    "use one of: unknown, first_call, backend (crash_stages.def)");
  liveWriter(reinterpret_cast<WriterObject*>(self)).noteCrashStage(*parsed, compileId);
  Py_RETURN_NONE;
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* writerFlush(PyObject* self, PyObject*) {
  DYNAMO_PY_TRY
  TraceWriter& writer = liveWriter(reinterpret_cast<WriterObject*>(self));
  withoutGil([&] { writer.flush(); });
  Py_RETURN_NONE;
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* writerPersist(PyObject* self, PyObject*) {
  DYNAMO_PY_TRY
  TraceWriter& writer = liveWriter(reinterpret_cast<WriterObject*>(self));
  withoutGil([&] { writer.persist(); });
  Py_RETURN_NONE;
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* writerClose(PyObject* self, PyObject*) {
  DYNAMO_PY_TRY
  auto* obj = reinterpret_cast<WriterObject*>(self);
  if (obj->writer != nullptr) {
    std::unique_ptr<std::shared_ptr<TraceWriter>> holder(std::exchange(obj->writer, nullptr));
    beforeWriterClose(holder->get());
    std::shared_ptr<TraceWriter> writer = *holder;
    withoutGil([&] { writer->close(); });
  }
  Py_RETURN_NONE;
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* writerStats(PyObject* self, PyObject*) {
  DYNAMO_PY_TRY
  WriterStats s = liveWriter(reinterpret_cast<WriterObject*>(self)).stats();
  return DictBuilder()
      .set("enqueued", newInt(static_cast<long long>(s.enqueued)))
      .set("committed", newInt(static_cast<long long>(s.committed)))
      .set("batches", newInt(static_cast<long long>(s.batches)))
      .set("dropped", newInt(static_cast<long long>(s.dropped)))
      .release();
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* writerEnter(PyObject* self, PyObject*) {
  Py_INCREF(self);
  return self;  // new ref
}

PyObject* writerExit(PyObject* self, PyObject*) { return writerClose(self, nullptr); }

PyObject* writerGetRunId(PyObject* self, void*) {
  return PyLong_FromLongLong(reinterpret_cast<WriterObject*>(self)->runId);  // new ref
}
PyObject* writerGetPath(PyObject* self, void*) {
  PyObject* path = reinterpret_cast<WriterObject*>(self)->path;  // borrowed ref
  Py_INCREF(path);
  return path;  // new ref
}
PyObject* writerGetSchemaVersion(PyObject* self, void*) {
  return PyLong_FromLong(reinterpret_cast<WriterObject*>(self)->schemaVersion);  // new ref
}
PyObject* writerGetClosed(PyObject* self, void*) {
  return PyBool_FromLong(reinterpret_cast<WriterObject*>(self)->writer == nullptr);  // new ref
}

#define DYNAMO_KW_METHOD(name, fn, doc) \
  {name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(fn)), \
   METH_VARARGS | METH_KEYWORDS, doc}

PyMethodDef writerMethods[] = {
#define DYNAMO_WRITER(Type, method, writerFn) \
    DYNAMO_KW_METHOD(method, writer_##writerFn, nullptr),  // doc: initStorageBindings
#include "storage_rows.def"
    DYNAMO_KW_METHOD("note_crash_stage", writerNoteCrashStage,
                     "note_crash_stage(stage, compile_id=0): what runs next, for the crash "
                     "marker a fatal signal leaves ('first_call', 'backend', 'unknown')"),
    {"flush", writerFlush, METH_NOARGS,
     "Block until every row recorded so far is committed (acknowledged)."},
    {"persist", writerPersist, METH_NOARGS,
     "Make every row recorded so far survive the process ending, with one write to the row "
     "journal (acknowledged; committed by the next batch). docs/trace-store.md, Durability."},
    {"close", writerClose, METH_NOARGS, "Flush, record the run's end, and close the file."},
    {"stats", writerStats, METH_NOARGS, "Counters: enqueued, committed, batches, dropped."},
    {"__enter__", writerEnter, METH_NOARGS, nullptr},
    {"__exit__", writerExit, METH_VARARGS, nullptr},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef writerGetSet[] = {
    {"run_id", writerGetRunId, nullptr, "id of this writer's run", nullptr},
    {"path", writerGetPath, nullptr, "the file written", nullptr},
    {"schema_version", writerGetSchemaVersion, nullptr, "schema version of the file", nullptr},
    {"closed", writerGetClosed, nullptr, "True after close()", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyType_Slot writerSlots[] = {
    {Py_tp_new, reinterpret_cast<void*>(writerNew)},
    {Py_tp_dealloc, reinterpret_cast<void*>(writerDealloc)},
    {Py_tp_methods, writerMethods},
    {Py_tp_getset, writerGetSet},
    {Py_tp_doc, const_cast<char*>(
                    "TraceWriter(path, *, argv=None, python_version='', torch_version='', "
                    "dynamo_version='', rank=-1, world_size=0, batch_rows=512, max_delay_ms=100)"
                    "\n\nRecords one run into a trace store; record_*() only enqueue.")},
    {0, nullptr},
};

PyType_Spec writerSpec = {"dynamo._C.TraceWriter", sizeof(WriterObject), 0, Py_TPFLAGS_DEFAULT,
                          writerSlots};

// ---- TraceReader --------------------------------------------------------------------------

struct ReaderObject {
  PyObject_HEAD
  TraceReader* reader;  // owned; null once closed
};

const TraceReader& liveReader(PyObject* self) {
  TraceReader* reader = reinterpret_cast<ReaderObject*>(self)->reader;
  if (reader == nullptr)
    throw UserError(UserErrorKind::kTraceStore, "the trace reader is closed", {}, "",
                    "read before close(), or open it again with dynamo.trace.open(path)");
  return *reader;
}

PyObject* readerNew(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* kw[] = {"path", nullptr};
  PyObject* path = nullptr;  // borrowed ref
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "U", const_cast<char**>(kw), &path))
    return nullptr;
  DYNAMO_PY_TRY
  std::string file = toString(path);
  std::unique_ptr<TraceReader> reader = withoutGil([&] { return TraceReader::open(file); });
  PyRef self = PyRef::steal(checkPy(type->tp_alloc(type, 0)));
  reinterpret_cast<ReaderObject*>(self.get())->reader = reader.release();
  return self.release();
  DYNAMO_PY_CATCH(nullptr)
}

void readerDealloc(PyObject* self) {
  delete std::exchange(reinterpret_cast<ReaderObject*>(self)->reader, nullptr);
  PyTypeObject* type = Py_TYPE(self);  // borrowed ref
  type->tp_free(self);
  Py_DECREF(type);
}

// Parses one optional integer id argument named `name`.
bool parseId(PyObject* args, PyObject* kwargs, const char* name, long long& id, bool required) {
  const char* kw[] = {name, nullptr};
  return PyArg_ParseTupleAndKeywords(args, kwargs, required ? "L" : "|L", const_cast<char**>(kw),
                                     &id) != 0;
}

// A reader method taking one id argument and returning a list of rows.
template <typename Query>
PyObject* readList(PyObject* self, PyObject* args, PyObject* kwargs, const char* name,
                   bool required, Query query) {
  long long id = 0;
  if (!parseId(args, kwargs, name, id, required)) return nullptr;
  DYNAMO_PY_TRY
  const TraceReader& reader = liveReader(self);
  return toPyList(withoutGil([&] { return query(reader, id); }));
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* readerRuns(PyObject* self, PyObject*) {
  DYNAMO_PY_TRY
  return toPyList(liveReader(self).runs());
  DYNAMO_PY_CATCH(nullptr)
}
PyObject* readerFrames(PyObject* self, PyObject* args, PyObject* kwargs) {
  return readList(self, args, kwargs, "run_id", true,
                  [](const TraceReader& r, RowId id) { return r.frames(id); });
}
PyObject* readerCompiles(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kw[] = {"frame_id", "run_id", nullptr};
  long long frameId = 0, runId = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|LL", const_cast<char**>(kw), &frameId, &runId))
    return nullptr;
  DYNAMO_PY_TRY
  if ((frameId == 0) == (runId == 0))
    throw UserError(UserErrorKind::kInvalidArgument,
                    "compiles() needs exactly one of frame_id and run_id");
  const TraceReader& reader = liveReader(self);
  return toPyList(frameId != 0 ? reader.compilesOfFrame(frameId) : reader.compilesOfRun(runId));
  DYNAMO_PY_CATCH(nullptr)
}
PyObject* readerGraphs(PyObject* self, PyObject* args, PyObject* kwargs) {
  return readList(self, args, kwargs, "compile_id", true,
                  [](const TraceReader& r, RowId id) { return r.graphs(id); });
}
PyObject* readerGraphBreaks(PyObject* self, PyObject* args, PyObject* kwargs) {
  return readList(self, args, kwargs, "compile_id", true,
                  [](const TraceReader& r, RowId id) { return r.graphBreaks(id); });
}
PyObject* readerGraphBreakGroups(PyObject* self, PyObject* args, PyObject* kwargs) {
  return readList(self, args, kwargs, "run_id", false,
                  [](const TraceReader& r, RowId id) { return r.graphBreakGroups(id); });
}
PyObject* readerGuards(PyObject* self, PyObject* args, PyObject* kwargs) {
  return readList(self, args, kwargs, "compile_id", true,
                  [](const TraceReader& r, RowId id) { return r.guards(id); });
}
PyObject* readerGuardFailures(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kw[] = {"run_id", "compile_id", nullptr};
  long long runId = 0, compileId = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|LL", const_cast<char**>(kw), &runId,
                                   &compileId))
    return nullptr;
  DYNAMO_PY_TRY
  const TraceReader& reader = liveReader(self);
  return toPyList(compileId != 0 ? reader.guardFailuresOfCompile(compileId)
                                 : reader.guardFailures(runId));
  DYNAMO_PY_CATCH(nullptr)
}
PyObject* readerCode(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kw[] = {"run_id", "compile_id", nullptr};
  long long runId = 0, compileId = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "L|L", const_cast<char**>(kw), &runId,
                                   &compileId))
    return nullptr;
  DYNAMO_PY_TRY
  return toPyList(liveReader(self).code(runId, compileId));
  DYNAMO_PY_CATCH(nullptr)
}
PyObject* readerArtifacts(PyObject* self, PyObject* args, PyObject* kwargs) {
  return readList(self, args, kwargs, "run_id", true,
                  [](const TraceReader& r, RowId id) { return r.artifacts(id); });
}
PyObject* readerKernels(PyObject* self, PyObject* args, PyObject* kwargs) {
  return readList(self, args, kwargs, "compile_id", true,
                  [](const TraceReader& r, RowId id) { return r.kernelsOfCompile(id); });
}
PyObject* readerCounts(PyObject* self, PyObject* args, PyObject* kwargs) {
  long long runId = 0;
  if (!parseId(args, kwargs, "run_id", runId, false)) return nullptr;
  DYNAMO_PY_TRY
  return toPy(liveReader(self).counts(runId));
  DYNAMO_PY_CATCH(nullptr)
}
PyObject* readerIntegrityCheck(PyObject* self, PyObject*) {
  DYNAMO_PY_TRY
  const TraceReader& reader = liveReader(self);
  return newStr(withoutGil([&] { return reader.integrityCheck(); }));
  DYNAMO_PY_CATCH(nullptr)
}
PyObject* readerClose(PyObject* self, PyObject*) {
  delete std::exchange(reinterpret_cast<ReaderObject*>(self)->reader, nullptr);
  Py_RETURN_NONE;
}
PyObject* readerExit(PyObject* self, PyObject*) { return readerClose(self, nullptr); }
PyObject* readerGetPath(PyObject* self, void*) {
  DYNAMO_PY_TRY
  return newStr(liveReader(self).path());
  DYNAMO_PY_CATCH(nullptr)
}
PyObject* readerGetSchemaVersion(PyObject* self, void*) {
  DYNAMO_PY_TRY
  return newInt(liveReader(self).schemaVersion());
  DYNAMO_PY_CATCH(nullptr)
}

PyMethodDef readerMethods[] = {
    {"runs", readerRuns, METH_NOARGS, "Every run, oldest first."},
    DYNAMO_KW_METHOD("frames", readerFrames, "frames(run_id): frames of a run."),
    DYNAMO_KW_METHOD("compiles", readerCompiles,
                     "compiles(frame_id=0, run_id=0): compiles of a frame or of a run."),
    DYNAMO_KW_METHOD("graphs", readerGraphs, "graphs(compile_id): graphs of a compile."),
    DYNAMO_KW_METHOD("graph_breaks", readerGraphBreaks,
                     "graph_breaks(compile_id): graph breaks of a compile."),
    DYNAMO_KW_METHOD("graph_break_groups", readerGraphBreakGroups,
                     "graph_break_groups(run_id=0): breaks grouped by kind and location."),
    DYNAMO_KW_METHOD("guards", readerGuards, "guards(compile_id): guards of a compile."),
    DYNAMO_KW_METHOD("guard_failures", readerGuardFailures,
                     "guard_failures(run_id=0, compile_id=0): guard failures in time order."),
    DYNAMO_KW_METHOD("code", readerCode, "code(run_id, compile_id=0): code rows."),
    DYNAMO_KW_METHOD("artifacts", readerArtifacts, "artifacts(run_id): artifacts of a run."),
    DYNAMO_KW_METHOD("kernels_of_compile", readerKernels,
                     "kernels_of_compile(compile_id): kernels a backend generated for a compile."),
    DYNAMO_KW_METHOD("counts", readerCounts, "counts(run_id=0): row counts."),
    {"integrity_check", readerIntegrityCheck, METH_NOARGS, "PRAGMA integrity_check ('ok')."},
    {"close", readerClose, METH_NOARGS, "Close the file."},
    {"__enter__", writerEnter, METH_NOARGS, nullptr},
    {"__exit__", readerExit, METH_VARARGS, nullptr},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef readerGetSet[] = {
    {"path", readerGetPath, nullptr, "the file read", nullptr},
    {"schema_version", readerGetSchemaVersion, nullptr, "schema version of the file", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyType_Slot readerSlots[] = {
    {Py_tp_new, reinterpret_cast<void*>(readerNew)},
    {Py_tp_dealloc, reinterpret_cast<void*>(readerDealloc)},
    {Py_tp_methods, readerMethods},
    {Py_tp_getset, readerGetSet},
    {Py_tp_doc, const_cast<char*>("TraceReader(path)\n\nRead-only queries over a trace store.")},
    {0, nullptr},
};

PyType_Spec readerSpec = {"dynamo._C.TraceReader", sizeof(ReaderObject), 0, Py_TPFLAGS_DEFAULT,
                          readerSlots};

// ---- module functions ---------------------------------------------------------------------

PyObject* traceReport(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* kw[] = {"path", "name", "mask", nullptr};
  const char* path = "";
  const char* name = "";
  int mask = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "ss|p", const_cast<char**>(kw), &path, &name,
                                   &mask))
    return nullptr;
  DYNAMO_PY_TRY
  for (const ReportCommand& command : reportCommands()) {
    if (command.name != name) continue;
    std::string file = path;
    return newStr(withoutGil([&] {
      auto reader = TraceReader::open(file);
      return command.render(*reader, ReportOptions{mask != 0});
    }));
  }
  std::string known;
  for (const ReportCommand& command : reportCommands()) known += (known.empty() ? "" : ", ") + command.name;
  throw UserError(UserErrorKind::kInvalidArgument, detail::concat("unknown report '", name, "'"),
                  {}, "", detail::concat("use one of: ", known));
  DYNAMO_PY_CATCH(nullptr)
}

PyObject* upgradeStore(PyObject*, PyObject* args) {
  const char* path = "";
  if (!PyArg_ParseTuple(args, "s", &path)) return nullptr;
  DYNAMO_PY_TRY
  std::string file = path;
  return newInt(withoutGil([&] { return upgradeTraceStore(file); }));
  DYNAMO_PY_CATCH(nullptr)
}

PyMethodDef moduleFunctions[] = {
    DYNAMO_KW_METHOD("trace_report", traceReport,
                     "trace_report(path, name, mask=False) -> str: a dynamo-trace report."),
    {"upgrade_trace_store", upgradeStore, METH_VARARGS,
     "upgrade_trace_store(path) -> int: upgrade in place; returns the old schema version."},
    {nullptr, nullptr, 0, nullptr},
};

int addType(PyObject* module, const char* name, PyType_Spec* spec) {
  PyObject* type = PyType_FromSpec(spec);  // new ref
  if (type == nullptr) return -1;
  if (PyModule_AddObject(module, name, type) < 0) {  // steals type on success
    Py_DECREF(type);
    return -1;
  }
  return 0;
}

}  // namespace

std::shared_ptr<TraceWriter> writerOf(PyObject* obj) {
  if (writerType == nullptr || !PyObject_TypeCheck(obj, writerType)) {
    PyErr_SetString(PyExc_TypeError, "expected a dynamo.trace.TraceWriter");
    throw PythonError{};
  }
  auto* w = reinterpret_cast<WriterObject*>(obj);
  liveWriter(w);  // throws when closed
  return *w->writer;
}

// The record_* methods' docs: their signatures, from storage_rows.def (static: PyMethodDef
// keeps the pointers).
static void documentWriterMethods() {
  static std::vector<std::string> docs;
  auto document = [](const char* method, std::vector<ArgDoc> args) {
    docs.push_back(signatureOf(method, std::move(args)));
    for (PyMethodDef* m = writerMethods; m->ml_name; ++m)
      if (std::string(m->ml_name) == method) m->ml_doc = docs.back().c_str();
  };
  docs.reserve(32);  // c_str() pointers stay valid: no reallocation
#define DYNAMO_WRITER(Type, method, writerFn) document(method, describeArgs(static_cast<const Type*>(nullptr)));
#include "storage_rows.def"
}

int initStorageBindings(PyObject* module) {
  documentWriterMethods();
  if (addType(module, "TraceWriter", &writerSpec) < 0) return -1;
  writerType = reinterpret_cast<PyTypeObject*>(PyObject_GetAttrString(module, "TraceWriter"));
  if (writerType == nullptr) return -1;  // new ref, kept for the process
  if (addType(module, "TraceReader", &readerSpec) < 0) return -1;
  if (PyModule_AddFunctions(module, moduleFunctions) < 0) return -1;
  if (PyModule_AddIntConstant(module, "TRACE_SCHEMA_VERSION", kSchemaVersion) < 0) return -1;
  return 0;
}

}  // namespace dynamo::py

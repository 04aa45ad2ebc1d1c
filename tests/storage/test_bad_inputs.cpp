// Bad inputs: an unwritable path, a file that is not SQLite, an SQLite database that is not a
// trace store, and a store written by a newer schema. Each is refused with a message naming the
// file and the fix, and the file is left byte-for-byte as it was.
#include <sys/stat.h>
#include <unistd.h>

#include "dynamo/storage/trace_reader.h"
#include "dynamo/storage/trace_store.h"
#include "dynamo/storage/trace_writer.h"
#include "dynamo_catch.h"
#include "test_support.h"

using namespace dynamo::storage;
using dynamo::UserError;
using dynamo::UserErrorKind;
using dynamo::storage::testing::ScratchDir;

namespace {

// Runs fn, which must throw a trace-store UserError; returns it.
template <typename Fn>
UserError expectRefusal(Fn&& fn) {
  try {
    fn();
  } catch (const UserError& e) {
    CHECK(e.kind() == UserErrorKind::kTraceStore);
    return e;
  }
  FAIL("no UserError was thrown");
  throw;  // unreachable
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("a path under a regular file is refused, naming the path and the fix") {
  UserError e = expectRefusal([] { TraceWriter::open("/etc/passwd/trace.db", {}); });
  CHECK(e.summary() ==
        "cannot create trace store '/etc/passwd/trace.db': '/etc/passwd' is not a directory");
  CHECK(contains(e.hint(), "DYNAMO_TRACE="));
  CHECK(contains(e.hint(), "writable directory"));
}

TEST_CASE("a path in a missing directory is refused") {
  ScratchDir dir;
  std::string path = dir.file("missing/trace.db");
  UserError e = expectRefusal([&] { TraceWriter::open(path, {}); });
  CHECK(e.summary() == "cannot create trace store '" + path + "': directory '" +
                           dir.file("missing") + "' does not exist");
  CHECK_FALSE(testing::fileExists(dir.file("missing")));
}

TEST_CASE("a directory the process may not write is refused") {
  ScratchDir dir;
  if (geteuid() == 0) {
    // root writes anywhere permissions are concerned; a kernel file system refuses it anyway.
    UserError e = expectRefusal([] { TraceWriter::open("/proc/dynamo-trace-test.db", {}); });
    CHECK(contains(e.summary(), "'/proc/dynamo-trace-test.db'"));
    CHECK(contains(e.hint(), "writable directory"));
    CHECK_FALSE(testing::fileExists("/proc/dynamo-trace-test.db"));
  } else {
    std::string locked = dir.file("locked");
    REQUIRE(mkdir(locked.c_str(), 0555) == 0);
    UserError e = expectRefusal([&] { TraceWriter::open(locked + "/t.db", {}); });
    CHECK(e.summary() == "cannot create trace store '" + locked + "/t.db': directory '" + locked +
                             "' is not writable");
    chmod(locked.c_str(), 0755);
  }
}

TEST_CASE("a file that is not an SQLite database is refused and left untouched") {
  ScratchDir dir;
  std::string path = dir.file("notes.txt");
  std::string content = "my notes\nnothing to do with SQLite, longer than one hundred bytes "
                        "so that the header check is what refuses it ........................\n";
  testing::writeFile(path, content);
  UserError e = expectRefusal([&] { TraceWriter::open(path, {}); });
  CHECK(e.summary() == "'" + path + "' is not a Dynamo trace store (not an SQLite database)");
  CHECK(contains(e.hint(), "pass a new file name"));
  CHECK(testing::readFile(path) == content);
  CHECK_FALSE(testing::fileExists(path + "-wal"));
  CHECK_FALSE(testing::fileExists(path + "-shm"));
  UserError r = expectRefusal([&] { TraceReader::open(path); });
  CHECK(r.summary() == e.summary());
  CHECK(testing::readFile(path) == content);
}

TEST_CASE("a file with an SQLite header but a damaged body is refused and left untouched") {
  ScratchDir dir;
  std::string path = dir.file("damaged.db");
  std::string content = std::string("SQLite format 3\0", 16) + std::string(4096, '\xAB');
  testing::writeFile(path, content);
  UserError e = expectRefusal([&] { TraceWriter::open(path, {}); });
  CHECK(e.summary() == "'" + path + "' is not a Dynamo trace store (not an SQLite database)");
  CHECK(testing::readFile(path) == content);
}

TEST_CASE("an SQLite database of another program is refused and left untouched") {
  ScratchDir dir;
  std::string path = dir.file("other.db");
  testing::rawExec(path, "CREATE TABLE notes(body TEXT); INSERT INTO notes VALUES ('keep me');");
  std::string before = testing::readFile(path);
  UserError e = expectRefusal([&] { TraceWriter::open(path, {}); });
  CHECK(e.summary() == "'" + path +
                           "' is not a Dynamo trace store (an SQLite database without Dynamo's "
                           "tables)");
  CHECK(contains(e.hint(), "new file name"));
  CHECK(testing::readFile(path) == before);
  CHECK_FALSE(testing::fileExists(path + "-wal"));
  CHECK(testing::rawQueryInt(path, "SELECT count(*) FROM notes") == 1);
}

TEST_CASE("a store written by a newer schema is refused and left untouched") {
  ScratchDir dir;
  std::string path = dir.file("future.db");
  {
    auto writer = TraceWriter::open(path, {});
    writer->recordFrame({0, 0, "a.py", 1, "f"});
  }
  testing::rawExec(path, "PRAGMA user_version = 7;");
  std::string before = testing::readFile(path);
  REQUIRE_FALSE(testing::fileExists(path + "-wal"));  // the last close checkpointed
  UserError e = expectRefusal([&] { TraceWriter::open(path, {}); });
  CHECK(e.summary() == "'" + path +
                           "' was written by trace-store schema version 7; this Dynamo reads up "
                           "to version " + std::to_string(kSchemaVersion));
  CHECK(e.hint() == "upgrade Dynamo, or write to a new file");
  CHECK(testing::readFile(path) == before);
  UserError r = expectRefusal([&] { TraceReader::open(path); });
  CHECK(r.summary() == e.summary());
  UserError u = expectRefusal([&] { upgradeTraceStore(path); });
  CHECK(u.summary() == e.summary());
  CHECK(testing::readFile(path) == before);
}

TEST_CASE("the reader refuses a missing file instead of creating one") {
  ScratchDir dir;
  std::string path = dir.file("nothing.db");
  UserError e = expectRefusal([&] { TraceReader::open(path); });
  CHECK(e.summary() == "trace store '" + path + "' does not exist");
  CHECK_FALSE(testing::fileExists(path));
}

TEST_CASE("a directory is refused as a store path") {
  ScratchDir dir;
  UserError e = expectRefusal([&] { TraceWriter::open(dir.path(), {}); });
  CHECK(e.summary() == "'" + dir.path() + "' is a directory, not a trace store");
}

TEST_CASE("an empty file becomes a new store") {
  ScratchDir dir;
  std::string path = dir.file("empty.db");
  testing::writeFile(path, "");
  auto writer = TraceWriter::open(path, {});
  writer->close();
  CHECK(TraceReader::open(path)->runs().size() == 1);
}

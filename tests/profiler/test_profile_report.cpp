// The recompilation profiler over a store written with TraceWriter: recompiles joined to their
// guard failures (by id in schema v3, by time in older stores), suggestions, cache-limit hits,
// renderers and policy.
#include <string>

#include "dynamo/profiler/profile_report.h"
#include "dynamo/storage/trace_writer.h"
#include "dynamo_catch.h"
#include "scratch_dir.h"

using namespace dynamo::profiler;
using namespace dynamo::storage;
using dynamo::explain::Format;
using dynamo::explain::RenderOptions;
using dynamo::explain::testing::ScratchDir;

namespace {

// f: recompiled for sizes 1..4, then a cache-limit hit. Schema v3: each failure is data and names
// the compile it caused; `version` 2 writes the reason text only, at the compile's end time.
std::string writeStore(const ScratchDir& dir, std::int64_t eagerRuns = -1, int version = 0) {
  std::string path = dir.file("profile.db");
  WriterOptions options;
  options.schemaVersionForTesting = version;
  auto w = TraceWriter::open(path, RunRecord{}, options);
  RowId frame = w->recordFrame({0, 0, "/src/m.py", 5, "f"});
  std::int64_t t = 1000000;
  for (int attempt = 0; attempt <= 4; ++attempt) {
    CompileRecord c;
    c.frameId = frame;
    c.attempt = attempt;
    c.status = attempt == 4 ? "cache_limit" : "ok";
    c.startTimeUs = t;
    c.durationUs = attempt == 4 ? 0 : 100;
    RowId id = w->recordCompile(c);
    if (attempt > 0) {
      GuardFailureRecord f;
      f.compileId = id - 1;  // not the real failed entry; the profiler does not need it
      f.frameId = frame;
      f.timeUs = t + c.durationUs;
      f.reason = "tensor 'x' size mismatch at dim 0: expected " + std::to_string(attempt) +
                 ", got " + std::to_string(attempt + 1);
      f.guardKind = "TENSOR_MATCH";
      f.guardSource = "x";
      f.property = "size";
      f.dim = 0;
      f.expected = std::to_string(attempt);
      f.seen = std::to_string(attempt + 1);
      f.location = {"/src/m.py", 5, "def f(x):"};
      f.causedCompileId = id;
      // The join is by id: a time that matches no compile's end must not matter.
      f.timeUs = t + c.durationUs + 7;
      w->recordGuardFailure(f);
    }
    if (attempt == 4 && eagerRuns >= 0) {  // as dynamo.profile_recompiles() writes it
      ArtifactRecord a;
      a.name = kEagerRunsArtifact;
      a.mediaType = "text/plain";
      a.data = std::to_string(id) + " " + std::to_string(eagerRuns) + "\n";
      w->recordArtifact(a);
    }
    t += 10000;
  }
  w->close();
  return path;
}

}  // namespace

TEST_CASE("recompiles get their failures, suggestions and the cache-limit hit") {
  ScratchDir dir;
  auto reader = TraceReader::open(writeStore(dir));
  ProfileReport report = buildProfileReport(*reader);
  REQUIRE(report.runs.size() == 1);
  const RunProfile& run = report.runs[0];
  CHECK(run.compiles == 5);
  CHECK(run.recompiles == 3);
  CHECK(run.cacheLimitHits == 1);
  const FunctionProfile& f = run.functions.at(0);
  REQUIRE(f.recompiles.size() == 4);
  CHECK(f.recompiles[0].failures.at(0).expected == "1");
  CHECK(f.recompiles[2].failures.at(0).seen == "4");
  CHECK(f.recompiles[3].status == "cache_limit");
  CHECK(f.recompiles[3].failures.at(0).seen == "5");
  CHECK(f.entriesAtLimit == 4);
  REQUIRE(f.suggestions.size() == 2);
  CHECK(f.suggestions[0].id == "changing-size");
  CHECK(f.suggestions[0].message ==
        "tensor 'x' changes size at dim 0 from call to call (4 recompiles; sizes seen: 1, 2, 3, 4, 5): "
        "automatic dynamic shapes did not apply (turned off, dynamic=False, or the size is read as a Python int); "
        "call dynamo.mark_dynamic(x, 0) before the call, or pad or bucket the input to a few sizes");
  CHECK(f.suggestions[0].where.line == 5);
  CHECK(f.suggestions[1].id == "cache-limit");
}

TEST_CASE("a schema v2 store: failures joined by time, the reason text as it was") {
  ScratchDir dir;
  auto reader = TraceReader::open(writeStore(dir, -1, 2));
  REQUIRE(reader->schemaVersion() == 2);
  ProfileReport report = buildProfileReport(*reader);
  const FunctionProfile& f = report.runs.at(0).functions.at(0);
  REQUIRE(f.recompiles.size() == 4);
  // v2 has no structured columns and no caused_compile_id: the time join finds the last
  // compile that ended before the failure.
  CHECK(f.recompiles[0].failures.at(0).reason ==
        "tensor 'x' size mismatch at dim 0: expected 1, got 2");
  CHECK(f.recompiles[0].failures.at(0).expected.empty());
  CHECK(f.recompiles[0].failures.at(0).guardKind.empty());
  CHECK(f.suggestions.size() == 1);  // only cache-limit: the sizes are not known as data
}

TEST_CASE("a time window keeps its compiles; the alive entries still count at the limit") {
  ScratchDir dir;
  auto reader = TraceReader::open(writeStore(dir));
  // attempt k ends at 1000100 + k * 10000 (the cache-limit hit, attempt 4, at 1040000)
  ProfileReport since = buildProfileReport(*reader, 0, ProfileWindow{1020000, 0});
  const FunctionProfile& f = since.runs.at(0).functions.at(0);
  CHECK(f.compiles == 3);
  REQUIRE(f.recompiles.size() == 3);
  CHECK(f.recompiles[0].attempt == 2);
  CHECK(f.recompiles[0].failures.at(0).expected == "2");
  CHECK(f.cacheLimitHits == 1);
  CHECK(f.entriesAtLimit == 4);
  CHECK(since.runs[0].recompiles == 2);
  ProfileReport between = buildProfileReport(*reader, 0, ProfileWindow{1020000, 1030100});
  CHECK(between.runs.at(0).functions.at(0).compiles == 2);
  CHECK(between.runs[0].cacheLimitHits == 0);
  ProfileReport none = buildProfileReport(*reader, 0, ProfileWindow{2000000, 0});
  CHECK(none.runs.at(0).functions.empty());
}

TEST_CASE("eager runs after the cache-limit hit come from the artifact") {
  ScratchDir dir;
  auto reader = TraceReader::open(writeStore(dir, 3));
  ProfileReport report = buildProfileReport(*reader);
  const FunctionProfile& f = report.runs.at(0).functions.at(0);
  CHECK(f.eagerRuns == 3);
  CHECK(f.recompiles.at(3).eagerRuns == 3);
  CHECK(f.recompiles[0].eagerRuns == -1);
  CHECK(f.suggestions.at(1).message ==
        "hit cache_size_limit with 4 compiled entries; from then on every call ran eagerly (3 calls "
        "counted): remove the recompile causes above, or raise dynamo.config.cache_size_limit above 4");
  RenderOptions masked{true, ""};
  CHECK(renderProfile(report, Format::kText, masked)
            .find("  #4 cache_size_limit hit: not compiled; the function runs eagerly from now on (then 3 "
                  "eager runs)\n") != std::string::npos);
  CHECK(renderProfile(report, Format::kJson, masked).find("\"eager_runs\": 3") != std::string::npos);
  // Without the artifact (dynamo-profile over a DYNAMO_TRACE run) nothing is claimed.
  ScratchDir plain;
  auto other = TraceReader::open(writeStore(plain));
  ProfileReport uncounted = buildProfileReport(*other);
  CHECK(uncounted.runs.at(0).functions.at(0).eagerRuns == -1);
  CHECK(renderProfile(uncounted, Format::kJson, masked).find("eager_runs\"") == std::string::npos);
}

TEST_CASE("the text form shows five recompiles and counts the rest") {
  ScratchDir dir;
  std::string path = dir.file("many.db");
  auto w = TraceWriter::open(path, RunRecord{});
  RowId frame = w->recordFrame({0, 0, "/src/m.py", 5, "f"});
  for (int attempt = 0; attempt <= 8; ++attempt) {
    CompileRecord c;
    c.frameId = frame;
    c.attempt = attempt;
    c.status = attempt == 8 ? "cache_limit" : "ok";
    c.startTimeUs = 1000000 + attempt * 10000;
    w->recordCompile(c);
  }
  w->close();
  auto reader = TraceReader::open(path);
  std::string text = renderProfile(buildProfileReport(*reader), Format::kText, RenderOptions{true, ""});
  CHECK(text.find("  #5 no guard failure recorded\n  ... 2 more recompiles (the JSON form lists all)\n"
                  "  #8 cache_size_limit hit") != std::string::npos);
  CHECK(text.find("#6 ") == std::string::npos);
}

TEST_CASE("profile renderers and policy") {
  ScratchDir dir;
  auto reader = TraceReader::open(writeStore(dir));
  ProfileReport report = buildProfileReport(*reader);
  RenderOptions masked{true, ""};
  std::string text = renderProfile(report, Format::kText, masked);
  CHECK(text.find("f (m.py:5): 5 compiles (3 recompiles, 1 cache-limit hit), <time> compiling\n"
                  "  #1 tensor 'x' size mismatch at dim 0: expected 1, got 2\n"
                  "       guard TENSOR_MATCH on x (size at dim 0): expected 1, seen 2\n"
                  "       created at m.py:5: def f(x):\n") != std::string::npos);
  CHECK(renderProfile(report, Format::kJson, masked).find("\"dim\": 0") != std::string::npos);
  // One <failure> per case (the Ant JUnit schema): the suggestions joined, their ids in type.
  std::string junit = renderProfile(report, Format::kJunit, masked);
  CHECK(junit.find("type=\"changing-size,cache-limit\"") != std::string::npos);
  CHECK(junit.find("message=\"2 failures: changing-size: ") != std::string::npos);
  CHECK(renderProfile(report, Format::kSarif, masked).find("\"ruleId\": \"changing-size\"") != std::string::npos);
  CHECK(renderProfile(report, Format::kMarkdown, masked).find("| `f` (m.py:5) | 5 | 3 | 1 |") != std::string::npos);
  ProfilePolicy policy;
  policy.maxRecompiles = 2;
  auto r = checkProfilePolicy(report, policy, masked);
  CHECK(r.code == 1);
  CHECK(r.message == "dynamo-profile: f (m.py:5) recompiled 3 times, more than --max-recompiles 2\n");
  policy.maxRecompiles = 3;
  CHECK(checkProfilePolicy(report, policy, masked).code == 0);
}

TEST_CASE("resume functions' compiles count for their function") {
  ScratchDir dir;
  std::string path = dir.file("resume.db");
  auto w = TraceWriter::open(path, RunRecord{});
  for (const char* name : {"f", "<resume in f>", "<resume in <resume in f>>", "g"}) {
    RowId frame = w->recordFrame({0, 0, "/src/m.py", std::string(name) == "g" ? 30 : 5, name});
    CompileRecord c;
    c.frameId = frame;
    c.status = "ok";
    c.durationUs = 100;
    w->recordCompile(c);
  }
  w->close();
  auto reader = TraceReader::open(path);
  ProfileReport report = buildProfileReport(*reader);
  const std::vector<FunctionProfile>& fns = report.runs[0].functions;
  REQUIRE(fns.size() == 2);  // the resume functions did not recompile: not listed on their own
  CHECK(fns[0].name == "f");
  CHECK(fns[0].compiles == 1);
  CHECK(fns[0].resumeCompiles == 2);
  CHECK(fns[0].totalCompiles() == 3);
  RenderOptions masked{true, ""};
  std::string text = renderProfile(report, Format::kText, masked);
  CHECK(text.find("\n1 function without recompiles, compiled more than once (resume functions "
                  "after graph breaks):\n"
                  "  f (m.py:5): compiled 3 times (1 + 2 in 2 resume functions after graph "
                  "breaks), <time> compiling\n") != std::string::npos);
  CHECK(text.find("\n1 function compiled once: g (<time>)\n") != std::string::npos);
  std::string json = renderProfile(report, Format::kJson, masked);
  CHECK(json.find("\"resume_compiles\": 2") != std::string::npos);
  CHECK(json.find("\"compiles_with_resume\": 3") != std::string::npos);
}

// The output formats of the report programs and the pieces every renderer shares: options,
// path and time display, a JSON writer, XML escaping, and builders for JUnit XML and SARIF
// 2.1.0. dynamo::profiler renders with the same pieces, so both tools look alike.
#pragma once

#include "dynamo/common/json.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dynamo::explain {

/// A report format (the CLI flags --json, --junit, --markdown, --sarif; text by default).
enum class Format { kText, kJson, kJunit, kMarkdown, kSarif };

/// "text", "json", "junit", "markdown", "sarif".
std::string_view formatName(Format format);
/// Parses a format name; nullopt when unknown.
std::optional<Format> formatFromName(std::string_view name);
/// Every format, in the order above.
const std::vector<Format>& allFormats();

/// Options every renderer takes.
struct RenderOptions {
  /// Golden-test mode: times become "<time>", files their base name, pids, hosts, versions and
  /// dates "<masked>". Counts, lines and names stay.
  bool masked = false;
  /// Files under this directory are shown relative to it (the CLI passes its working
  /// directory); empty: shown as recorded.
  std::string rootDir;
};

/// How a user file is shown: relative to options.rootDir when under it, its base name when
/// masked, else as recorded.
std::string displayPath(const std::string& file, const RenderOptions& options);
/// A duration: "12.3ms" ("<time>" when masked).
std::string displayDuration(std::int64_t us, const RenderOptions& options);
/// Seconds with 6 decimals for JUnit's time attribute ("0" when masked).
std::string junitSeconds(std::int64_t us, const RenderOptions& options);

/// A compact, deterministic JSON writer (keys in the order written).
class JsonWriter {
 public:
  JsonWriter& beginObject();
  JsonWriter& endObject();
  JsonWriter& beginArray();
  JsonWriter& endArray();
  /// The key of the next member of the current object.
  JsonWriter& key(std::string_view name);
  JsonWriter& value(std::string_view text);
  JsonWriter& value(const char* text) { return value(std::string_view(text)); }
  JsonWriter& value(std::int64_t number);
  JsonWriter& value(int number) { return value(static_cast<std::int64_t>(number)); }
  JsonWriter& value(bool flag);
  JsonWriter& null();
  /// The document, indented by two spaces, with a final newline.
  std::string str() const { return out_ + "\n"; }

 private:
  void separate();
  void newline();
  JsonWriter& close(char bracket);
  std::string out_;
  std::vector<bool> first_;  ///< per open container: nothing written in it yet
  bool afterKey_ = false;
};

using dynamo::jsonQuote;  ///< shared with storage and the graph serializer (common/json.h)
/// Escapes &, <, >, " and ' for XML text and attributes; drops characters XML 1.0 forbids.
std::string xmlEscape(std::string_view text);
/// Escapes | and newlines for a Markdown table cell, and wraps nothing.
std::string markdownCell(std::string_view text);

/// One JUnit test case. A case with failures fails; one without passes.
struct JunitCase {
  std::string className;   ///< the file, e.g. "model.py"
  std::string name;        ///< "forward (model.py:10)"
  std::int64_t timeUs = 0; ///< compile time
  /// (message, type, body) of each failure: one per distinct graph break or recompile cause.
  struct Failure {
    std::string message;   ///< one line
    std::string type;      ///< break kind or guard kind
    std::string body;      ///< details (explanation, hint, user stack)
  };
  std::vector<Failure> failures;  ///< none: the case passes
  std::string systemOut;          ///< optional <system-out> text (graphs, guards)
};
/// One <testsuite> (a run).
struct JunitSuite {
  std::string name;               ///< "dynamo-explain: script.py (run 1)"
  std::int64_t timeUs = 0;        ///< total compile time
  std::vector<JunitCase> cases;   ///< one per compiled function
};
/// <testsuites name=tool> with the suites, as CI reporters read it.
std::string renderJunit(std::string_view tool, const std::vector<JunitSuite>& suites,
                        const RenderOptions& options);

/// A SARIF rule (one per graph-break kind or recompile cause).
struct SarifRule {
  std::string id;           ///< "data-dependent-branch"
  std::string description;  ///< short description
  std::string help;         ///< how to fix it
};
/// A SARIF result: a message at a file:line.
struct SarifResult {
  std::string ruleId;       ///< a SarifRule id
  std::string level;        ///< "error", "warning" or "note"
  std::string message;      ///< the text shown in the code-scanning annotation
  std::string file;         ///< user file (shown with displayPath)
  int line = 0;             ///< 1-based; results without a line are given line 1
  std::string sourceLine;   ///< the line's text (region.snippet), may be empty
};
/// A SARIF 2.1.0 log with one run of tool `tool`.
std::string renderSarif(std::string_view tool, const std::vector<SarifRule>& rules,
                        const std::vector<SarifResult>& results, const RenderOptions& options);

}  // namespace dynamo::explain

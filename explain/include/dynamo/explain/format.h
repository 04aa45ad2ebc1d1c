// The output formats of the report programs and the pieces every renderer shares: options,
// path and time display, a JSON writer, XML escaping, and builders for JUnit XML and SARIF
// 2.1.0. dynamo::profiler renders with the same pieces, so both tools look alike.
#pragma once

#include "dynamo/common/json.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
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
/// A file path as an RFC 3986 URI reference, for SARIF's artifactLocation.uri: an absolute path
/// becomes a file URI ("file:///a%20b/m.py"), a relative one a relative reference
/// ("a%20b/m.py"). Bytes other than unreserved characters and '/' are percent-encoded (the UTF-8
/// bytes of non-ASCII names too), so ' ', '#', '?', ':' and '%' stay part of the path.
std::string uriReference(const std::string& path);
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

/// One JUnit test case. A case with failures fails; one without passes. The Apache Ant JUnit
/// schema (what strict CI importers validate against) allows one <failure> per case and no
/// <system-out> in a case: renderJunit joins the failures into one and moves systemOut into
/// the suite's <system-out>.
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
  std::string systemOut;          ///< optional text (graphs, guards), shown in the suite's
};
/// One <testsuite> (a run).
struct JunitSuite {
  std::string name;               ///< "dynamo-explain: script.py (run 1)"
  std::string package;            ///< the package attribute: the script's name
  std::string hostname;           ///< the run's host ("localhost" when unknown)
  std::int64_t startTimeUs = 0;   ///< the run's start (us since the epoch), the timestamp
  std::int64_t timeUs = 0;        ///< total compile time
  /// <properties>: (name, value) pairs, e.g. ("python_version", "3.11.2").
  std::vector<std::pair<std::string, std::string>> properties;
  std::vector<JunitCase> cases;   ///< one per compiled function
  std::string systemErr;          ///< <system-err> text (a run that did not finish cleanly)
};
/// The JUnit XML report: <testsuites> with one <testsuite> per suite, valid under the Apache Ant
/// JUnit schema (id, package, timestamp, hostname, properties, system-out, system-err; at most
/// one failure per case). Masked: timestamp 1970-01-01T00:00:00, host "<masked>", times 0.
std::string renderJunit(std::string_view tool, const std::vector<JunitSuite>& suites,
                        const RenderOptions& options);
/// The timestamp attribute: the UTC time as YYYY-MM-DDTHH:MM:SS (no zone, as the schema wants).
std::string junitTimestamp(std::int64_t us, const RenderOptions& options);

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
  std::string file;         ///< user file (displayPath, then uriReference)
  int line = 0;             ///< 1-based; results without a line are given line 1
  std::string sourceLine;   ///< the line's text (region.snippet), may be empty
};
/// A SARIF 2.1.0 log with one run of tool `tool`.
std::string renderSarif(std::string_view tool, const std::vector<SarifRule>& rules,
                        const std::vector<SarifResult>& results, const RenderOptions& options);

}  // namespace dynamo::explain

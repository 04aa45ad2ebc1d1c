// Shared rendering pieces (format.h): formats, paths, times, JSON, XML, JUnit and SARIF.
#include "dynamo/explain/format.h"

#include "dynamo/common/format.h"

#include <cctype>
#include <cstdio>
#include <ctime>

namespace dynamo::explain {

namespace {
constexpr const char* kFormatNames[] = {"text", "json", "junit", "markdown", "sarif"};
}

std::string_view formatName(Format format) { return kFormatNames[static_cast<int>(format)]; }

std::optional<Format> formatFromName(std::string_view name) {
  for (Format f : allFormats())
    if (formatName(f) == name) return f;
  return std::nullopt;
}

const std::vector<Format>& allFormats() {
  static const std::vector<Format> formats = {Format::kText, Format::kJson, Format::kJunit,
                                              Format::kMarkdown, Format::kSarif};
  return formats;
}

std::string displayPath(const std::string& file, const RenderOptions& options) {
  if (options.masked) {
    size_t slash = file.rfind('/');
    return slash == std::string::npos ? file : file.substr(slash + 1);
  }
  if (!options.rootDir.empty()) {
    std::string root = options.rootDir;
    if (root.back() != '/') root += '/';
    if (file.compare(0, root.size(), root) == 0) return file.substr(root.size());
  }
  return file;
}

std::string uriReference(const std::string& path) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out = !path.empty() && path[0] == '/' ? "file://" : "";
  for (unsigned char c : path) {
    bool unreserved = std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
    if ((unreserved && c < 0x80) || c == '/') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string displayDuration(std::int64_t us, const RenderOptions& options) {
  return options.masked ? "<time>" : formatMicroseconds(us);
}

std::string junitSeconds(std::int64_t us, const RenderOptions& options) {
  if (options.masked) return "0";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6f", static_cast<double>(us) / 1e6);
  return buf;
}

// ---- JSON -----------------------------------------------------------------------------------

void JsonWriter::newline() {
  out_ += '\n';
  out_.append(2 * first_.size(), ' ');
}

void JsonWriter::separate() {
  if (afterKey_) {
    afterKey_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
    newline();
  }
}

JsonWriter& JsonWriter::beginObject() {
  separate();
  out_ += '{';
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::close(char bracket) {
  bool empty = first_.back();
  first_.pop_back();
  if (!empty) newline();
  out_ += bracket;
  return *this;
}

JsonWriter& JsonWriter::endObject() { return close('}'); }

JsonWriter& JsonWriter::beginArray() {
  separate();
  out_ += '[';
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::endArray() { return close(']'); }

JsonWriter& JsonWriter::key(std::string_view name) {
  separate();
  out_ += jsonQuote(name) + ": ";
  afterKey_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view text) {
  separate();
  out_ += jsonQuote(text);
  return *this;
}

JsonWriter& JsonWriter::value(std::int64_t number) {
  separate();
  out_ += std::to_string(number);
  return *this;
}

JsonWriter& JsonWriter::value(bool flag) {
  separate();
  out_ += flag ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::null() {
  separate();
  out_ += "null";
  return *this;
}

// ---- XML / Markdown -------------------------------------------------------------------------

std::string xmlEscape(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        if (c < 0x20 && c != '\n' && c != '\t' && c != '\r') break;  // not allowed in XML 1.0
        out += static_cast<char>(c);
    }
  }
  return out;
}

std::string markdownCell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += "<br>";
    else if (c == '`') out += "'";
    else out += c;
  }
  return out;
}

// ---- JUnit ----------------------------------------------------------------------------------

std::string junitTimestamp(std::int64_t us, const RenderOptions& options) {
  if (options.masked || us <= 0) return "1970-01-01T00:00:00";
  std::time_t seconds = static_cast<std::time_t>(us / 1000000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &utc);
  return buf;
}

namespace {

// The one <failure> the schema allows per case: the case's failures joined.
JunitCase::Failure joinFailures(const std::vector<JunitCase::Failure>& failures) {
  if (failures.size() == 1) return failures.front();
  JunitCase::Failure out;
  out.message = std::to_string(failures.size()) + " failures: ";
  for (size_t i = 0; i < failures.size(); ++i) {
    const JunitCase::Failure& f = failures[i];
    out.message += (i ? "; " : "") + f.message;
    if (out.type.find(f.type) == std::string::npos) out.type += (out.type.empty() ? "" : ",") + f.type;
    out.body += (i ? "\n" : "") + f.body;
  }
  return out;
}

void junitCase(std::string& out, const JunitCase& c, const RenderOptions& options) {
  out += "    <testcase classname=\"" + xmlEscape(c.className) + "\" name=\"" +
         xmlEscape(c.name) + "\" time=\"" + junitSeconds(c.timeUs, options) + "\"";
  if (c.failures.empty()) {
    out += "/>\n";
    return;
  }
  JunitCase::Failure f = joinFailures(c.failures);
  out += ">\n      <failure message=\"" + xmlEscape(f.message) + "\" type=\"" +
         xmlEscape(f.type) + "\">" + xmlEscape(f.body) + "</failure>\n    </testcase>\n";
}

}  // namespace

std::string renderJunit(std::string_view tool, const std::vector<JunitSuite>& suites,
                        const RenderOptions& options) {
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += "<testsuites>\n";
  int id = 0;
  for (const JunitSuite& s : suites) {
    size_t failures = 0;
    for (const JunitCase& c : s.cases) failures += c.failures.empty() ? 0 : 1;
    std::string host = options.masked ? "<masked>" : s.hostname.empty() ? "localhost" : s.hostname;
    out += "  <testsuite name=\"" + xmlEscape(s.name) + "\" package=\"" +
           xmlEscape(s.package.empty() ? std::string(tool) : s.package) + "\" id=\"" +
           std::to_string(id++) + "\" timestamp=\"" + junitTimestamp(s.startTimeUs, options) +
           "\" hostname=\"" + xmlEscape(host) + "\" tests=\"" + std::to_string(s.cases.size()) +
           "\" failures=\"" + std::to_string(failures) + "\" errors=\"0\" skipped=\"0\" time=\"" +
           junitSeconds(s.timeUs, options) + "\">\n";
    out += "    <properties>\n";
    for (const auto& [name, value] : s.properties)
      out += "      <property name=\"" + xmlEscape(name) + "\" value=\"" + xmlEscape(value) + "\"/>\n";
    out += "    </properties>\n";
    std::string systemOut;
    for (const JunitCase& c : s.cases) {
      junitCase(out, c, options);
      if (!c.systemOut.empty()) systemOut += "== " + c.name + "\n" + c.systemOut;
    }
    out += "    <system-out>" + xmlEscape(systemOut) + "</system-out>\n";
    out += "    <system-err>" + xmlEscape(s.systemErr) + "</system-err>\n";
    out += "  </testsuite>\n";
  }
  return out + "</testsuites>\n";
}

// ---- SARIF ----------------------------------------------------------------------------------

std::string renderSarif(std::string_view tool, const std::vector<SarifRule>& rules,
                        const std::vector<SarifResult>& results, const RenderOptions& options) {
  JsonWriter w;
  w.beginObject();
  w.key("$schema").value("https://json.schemastore.org/sarif-2.1.0.json");
  w.key("version").value("2.1.0");
  w.key("runs").beginArray().beginObject();
  w.key("tool").beginObject().key("driver").beginObject();
  w.key("name").value(tool);
  w.key("version").value(options.masked ? "<masked>" : DYNAMO_EXPLAIN_VERSION);
  w.key("rules").beginArray();
  for (const SarifRule& r : rules) {
    w.beginObject();
    w.key("id").value(r.id);
    w.key("shortDescription").beginObject().key("text").value(r.description).endObject();
    w.key("help").beginObject().key("text").value(r.help).endObject();
    w.endObject();
  }
  w.endArray().endObject().endObject();
  w.key("columnKind").value("unicodeCodePoints");
  w.key("results").beginArray();
  for (const SarifResult& r : results) {
    w.beginObject();
    w.key("ruleId").value(r.ruleId);
    w.key("level").value(r.level);
    w.key("message").beginObject().key("text").value(r.message).endObject();
    w.key("locations").beginArray().beginObject();
    w.key("physicalLocation").beginObject();
    w.key("artifactLocation").beginObject().key("uri").value(uriReference(displayPath(r.file, options)));
    w.endObject();
    w.key("region").beginObject().key("startLine").value(r.line > 0 ? r.line : 1);
    if (!r.sourceLine.empty())
      w.key("snippet").beginObject().key("text").value(r.sourceLine).endObject();
    w.endObject();
    w.endObject().endObject().endArray();
    w.endObject();
  }
  w.endArray();
  w.endObject().endArray();
  w.endObject();
  return w.str();
}

}  // namespace dynamo::explain

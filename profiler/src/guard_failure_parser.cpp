// parseGuardFailure: takes a verbose guard failure reason apart (profile_report.h). The reason
// texts come from core/src/guards/*.cpp (check_verbose of each guard kind):
//   tensor 'x' size mismatch at dim 0: expected 4, got 8          TENSOR_MATCH
//   tensor 'x' dtype mismatch: expected torch.float32, got ...     TENSOR_MATCH
//   'n' changed: expected 3, got 10                                EQUALS_MATCH
//   'G['m']' is a different object: expected ..., got ...          ID_MATCH
//   type of 'x' changed / length of 'x' changed / keys of 'd' changed
//   grad mode changed / default dtype changed
// each optionally followed by " (guard created at file:line: source)".
#include <cctype>

#include "dynamo/profiler/profile_report.h"

namespace dynamo::profiler {

namespace {

bool startsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// "file:line: source" or "file:line" -> location.
SourceLocation parseLocation(std::string_view text) {
  SourceLocation loc;
  for (size_t colon = text.find(':'); colon != std::string_view::npos;
       colon = text.find(':', colon + 1)) {
    size_t end = colon + 1;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    if (end == colon + 1 || (end < text.size() && text[end] != ':')) continue;
    loc.file = std::string(text.substr(0, colon));
    loc.line = std::stoi(std::string(text.substr(colon + 1, end - colon - 1)));
    if (end + 2 <= text.size()) loc.sourceLine = std::string(text.substr(end + 2));
    return loc;
  }
  return loc;
}

// The text between the first quote and the last quote of `subject` (sources may hold quotes).
std::string quotedSource(std::string_view subject) {
  size_t first = subject.find('\'');
  size_t last = subject.rfind('\'');
  if (first == std::string_view::npos || last <= first) return "";
  return std::string(subject.substr(first + 1, last - first - 1));
}

void classify(std::string_view subject, GuardFailureInfo& info) {
  struct Prefix {
    const char* text;
    const char* kind;
    const char* property;
  };
  static const Prefix prefixes[] = {
      {"type of '", "TYPE_MATCH", "type"},       {"length of '", "LENGTH_CHECK", "length"},
      {"keys of '", "DICT_KEYS", "keys"},        {"grad mode changed", "GRAD_MODE", "grad mode"},
      {"default dtype changed", "DEFAULT_DTYPE", "default dtype"},
  };
  for (const Prefix& p : prefixes) {
    if (startsWith(subject, p.text)) {
      info.guardKind = p.kind;
      info.property = p.property;
      info.source = quotedSource(subject);
      return;
    }
  }
  if (startsWith(subject, "tensor '")) {
    info.guardKind = "TENSOR_MATCH";
    size_t last = subject.rfind('\'');
    info.source = quotedSource(subject);
    std::string_view rest = subject.substr(last + 1);  // " size mismatch at dim 0"
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    size_t mismatch = rest.find(" mismatch");
    info.property = std::string(rest.substr(0, mismatch));
    size_t at = rest.find("at dim ");
    if (at != std::string_view::npos) {
      size_t d = at + 7, end = d;
      while (end < rest.size() && std::isdigit(static_cast<unsigned char>(rest[end]))) ++end;
      if (end > d) info.dim = std::stoi(std::string(rest.substr(d, end - d)));
    }
    return;
  }
  if (startsWith(subject, "'")) {
    info.source = quotedSource(subject);
    if (subject.find("' is a different object") != std::string_view::npos) {
      info.guardKind = "ID_MATCH";
      info.property = "object";
    } else if (subject.find("' changed") != std::string_view::npos) {
      info.guardKind = "EQUALS_MATCH";
      info.property = "value";
    }
  }
}

// Joins continuation lines ("reason\n  (guard created at ...)") into one line.
std::string oneLine(std::string_view reason) {
  std::string out;
  for (size_t i = 0; i < reason.size(); ++i) {
    if (reason[i] != '\n') {
      out += reason[i];
      continue;
    }
    while (i + 1 < reason.size() && reason[i + 1] == ' ') ++i;
    if (!out.empty() && i + 1 < reason.size()) out += ' ';
  }
  return out;
}

}  // namespace

GuardFailureInfo parseGuardFailure(std::string_view raw) {
  GuardFailureInfo info;
  std::string joined = oneLine(raw);
  std::string_view text = joined;
  size_t created = text.rfind(" (guard created at ");
  if (created != std::string_view::npos && text.back() == ')') {
    std::string_view inner = text.substr(created + 19, text.size() - created - 20);
    info.createdAt = parseLocation(inner);
    text = text.substr(0, created);
  }
  info.reason = std::string(text);
  size_t expected = text.find("expected ");
  std::string_view subject = text;
  if (expected != std::string_view::npos) {
    size_t got = text.rfind(", got ");
    if (got != std::string_view::npos && got > expected) {
      info.expected = std::string(text.substr(expected + 9, got - expected - 9));
      info.seen = std::string(text.substr(got + 6));
    }
    subject = text.substr(0, expected);
    while (!subject.empty() && (subject.back() == ' ' || subject.back() == ':'))
      subject.remove_suffix(1);
  }
  classify(subject, info);
  return info;
}

}  // namespace dynamo::profiler

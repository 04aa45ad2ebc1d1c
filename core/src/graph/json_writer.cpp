// JsonWriter (json_writer.h).
#include "json_writer.h"

#include "dynamo/common/json.h"

#include <cstdio>

#include "dynamo/common/error.h"
#include "dynamo/core/graph_printer.h"

namespace dynamo::core {

void JsonWriter::beforeValue() {
  if (afterKey_) {
    afterKey_ = false;
    return;
  }
  if (!hasElement_.empty()) {
    if (hasElement_.back()) out_ += ',';
    hasElement_.back() = true;
  }
  if (pendingNewline_) {
    out_ += '\n';
    pendingNewline_ = false;
  }
}

void JsonWriter::open(char bracket) {
  beforeValue();
  out_ += bracket;
  hasElement_.push_back(false);
}

void JsonWriter::close(char bracket) {
  DYNAMO_INTERNAL_ASSERT(!hasElement_.empty() && !afterKey_, "unbalanced JSON writer");
  hasElement_.pop_back();
  if (pendingNewline_) {
    out_ += '\n';
    pendingNewline_ = false;
  }
  out_ += bracket;
}

void JsonWriter::key(const std::string& name) {
  beforeValue();
  writeString(name);
  out_ += ':';
  afterKey_ = true;
}

void JsonWriter::value(const std::string& text) {
  beforeValue();
  writeString(text);
}

void JsonWriter::value(int64_t number) {
  beforeValue();
  out_ += std::to_string(number);
}

void JsonWriter::value(double number) {
  beforeValue();
  out_ += formatFloat(number);
}

void JsonWriter::value(bool flag) {
  beforeValue();
  out_ += flag ? "true" : "false";
}

void JsonWriter::null() {
  beforeValue();
  out_ += "null";
}

void JsonWriter::writeString(const std::string& text) { appendJsonString(out_, text); }

}  // namespace dynamo::core

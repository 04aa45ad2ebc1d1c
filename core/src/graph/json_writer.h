// A small streaming JSON writer (no dependency), used by the graph serializer.
//
//   JsonWriter w;
//   w.beginObject(); w.key("n"); w.value(int64_t{1}); w.endObject();
//   w.str() == "{\"n\":1}"
// Commas are inserted automatically; strings are escaped (UTF-8 passes through). Doubles use
// Python's repr, so they always read back as floats; non-finite doubles are the caller's job.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dynamo::core {

class JsonWriter {
 public:
  void beginObject() { open('{'); }
  void endObject() { close('}'); }
  void beginArray() { open('['); }
  void endArray() { close(']'); }
  /// The key of the next value in an object.
  void key(const std::string& name);
  void value(const std::string& text);
  void value(const char* text) { value(std::string(text)); }
  void value(int64_t number);
  void value(double number);
  void value(bool flag);
  void null();
  /// A line break before the next element (for one-node-per-line output).
  void newline() { pendingNewline_ = true; }

  const std::string& str() const { return out_; }

 private:
  void beforeValue();
  void open(char bracket);
  void close(char bracket);
  void writeString(const std::string& text);

  std::string out_;
  std::vector<bool> hasElement_;  ///< per open container: an element was written
  bool afterKey_ = false;
  bool pendingNewline_ = false;
};

}  // namespace dynamo::core

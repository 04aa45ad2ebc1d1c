// A small JSON reader for the few JSON columns the reports read (serialized graphs). Private to
// dynamo::explain; the store's JSON is written by our own serializers, so this parser is strict
// and small rather than fast.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dynamo::explain::detail {

/// A parsed JSON value. Objects keep their keys sorted (order does not matter here).
struct JsonValue {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;                   ///< which member is meaningful
  bool boolean = false;                      ///< kBool
  double number = 0;                         ///< kNumber
  std::string string;                        ///< kString
  std::vector<JsonValue> array;              ///< kArray
  std::map<std::string, JsonValue> object;   ///< kObject

  /// The member `key` of an object, or nullptr (also when this is not an object).
  const JsonValue* get(const std::string& key) const;
  /// The string member `key`, or "" when absent or not a string.
  std::string str(const std::string& key) const;
};

/// Parses `text`; returns false (and leaves `out` unspecified) when it is not valid JSON.
bool parseJson(std::string_view text, JsonValue& out);

}  // namespace dynamo::explain::detail

// The row journal's format (row_journal.h). A record:
//   u32 magic "DYRJ" | u32 length of what follows | u8 row type (Row's index) | fields
// Integers are 8 bytes (little-endian, as the machine that wrote them: a journal is read back on
// the machine that wrote it), strings a u32 length and their bytes, lists a u32 count and their
// items. Each record type lists its fields once (fields()), for both directions.
#include "row_journal.h"

#include <cstring>

namespace dynamo::storage {

namespace {

constexpr std::uint32_t kMagic = 0x4a525944;  // "DYRJ"

constexpr std::int64_t kCodeKindCount = 0
#define DYNAMO_CODE_KIND(id, name, language, description) +1
#include "dynamo/storage/code_kinds.def"
#undef DYNAMO_CODE_KIND
    ;

struct Encoder {
  std::string& out;
  void raw(const void* p, std::size_t n) { out.append(static_cast<const char*>(p), n); }
  void operator()(const std::int64_t& v) { raw(&v, sizeof v); }
  void operator()(const int& v) { (*this)(static_cast<std::int64_t>(v)); }
  void operator()(const CodeKind& v) { (*this)(static_cast<std::int64_t>(v)); }
  void operator()(const std::string& v) {
    auto n = static_cast<std::uint32_t>(v.size());
    raw(&n, sizeof n);
    raw(v.data(), v.size());
  }
  void operator()(const std::vector<std::string>& v) {
    auto n = static_cast<std::uint32_t>(v.size());
    raw(&n, sizeof n);
    for (const std::string& s : v) (*this)(s);
  }
  void operator()(const std::vector<CompilePhase>& v) {
    auto n = static_cast<std::uint32_t>(v.size());
    raw(&n, sizeof n);
    for (const CompilePhase& p : v) (*this)(p.name), (*this)(p.durationUs);
  }
  void operator()(const SourceLocation& v) {
    (*this)(v.file), (*this)(v.line), (*this)(v.sourceLine);
  }
};

struct Decoder {
  std::string_view in;
  bool ok = true;
  bool raw(void* p, std::size_t n) {
    if (!ok || in.size() < n) return ok = false;
    std::memcpy(p, in.data(), n);
    in.remove_prefix(n);
    return true;
  }
  void operator()(std::int64_t& v) { raw(&v, sizeof v); }
  void operator()(int& v) {
    std::int64_t x = 0;
    (*this)(x);
    v = static_cast<int>(x);
  }
  void operator()(CodeKind& v) {
    std::int64_t x = 0;
    (*this)(x);
    if (x < 0 || x >= kCodeKindCount) ok = false;  // not a kind of code_kinds.def
    else v = static_cast<CodeKind>(x);
  }
  void operator()(std::string& v) {
    std::uint32_t n = 0;
    if (!raw(&n, sizeof n) || in.size() < n) {
      ok = false;
      return;
    }
    v.assign(in.data(), n);
    in.remove_prefix(n);
  }
  void operator()(std::vector<std::string>& v) {
    std::uint32_t n = 0;
    if (!raw(&n, sizeof n) || n > in.size()) {
      ok = false;
      return;
    }
    v.resize(n);
    for (std::string& s : v) (*this)(s);
  }
  void operator()(std::vector<CompilePhase>& v) {
    std::uint32_t n = 0;
    if (!raw(&n, sizeof n) || n > in.size()) {
      ok = false;
      return;
    }
    v.resize(n);
    for (CompilePhase& p : v) (*this)(p.name), (*this)(p.durationUs);
  }
  void operator()(SourceLocation& v) { (*this)(v.file), (*this)(v.line), (*this)(v.sourceLine); }
};

// The fields of each row type, in journal order (R is const for the encoder).
template <typename V, typename R>
void fields(V& f, R& r) {
  using T = std::remove_const_t<R>;
  if constexpr (std::is_same_v<T, RunEnd>) {
    f(r.endTimeUs);
  } else {
    f(r.id), f(r.runId);
    if constexpr (std::is_same_v<T, FrameRecord>) {
      f(r.file), f(r.firstLine), f(r.name);
    } else if constexpr (std::is_same_v<T, CompileRecord>) {
      f(r.frameId), f(r.attempt), f(r.status), f(r.reason), f(r.startTimeUs), f(r.durationUs),
          f(r.phases);
    } else if constexpr (std::is_same_v<T, GraphRecord>) {
      f(r.compileId), f(r.index), f(r.format), f(r.serialized), f(r.printed), f(r.numNodes),
          f(r.inputs), f(r.outputs);
    } else if constexpr (std::is_same_v<T, GraphBreakRecord>) {
      f(r.compileId), f(r.kind), f(r.location), f(r.detail), f(r.explanation), f(r.hints),
          f(r.userStack);
    } else if constexpr (std::is_same_v<T, GuardRecord>) {
      f(r.compileId), f(r.kind), f(r.checks), f(r.source), f(r.location);
    } else if constexpr (std::is_same_v<T, GuardFailureRecord>) {
      f(r.compileId), f(r.frameId), f(r.guardId), f(r.timeUs), f(r.reason), f(r.guardKind),
          f(r.guardSource), f(r.property), f(r.dim), f(r.expected), f(r.seen), f(r.location),
          f(r.causedCompileId);
    } else if constexpr (std::is_same_v<T, CacheEntryHitsRecord>) {
      f(r.compileId), f(r.hits), f(r.timeUs);
    } else if constexpr (std::is_same_v<T, CodeRecord>) {
      f(r.compileId), f(r.kind), f(r.name), f(r.content);
    } else if constexpr (std::is_same_v<T, ArtifactRecord>) {
      f(r.compileId), f(r.name), f(r.mediaType), f(r.data), f(r.timeUs);
    } else {
      static_assert(sizeof(T) == 0, "a row type without its journal fields");
    }
  }
}

template <std::size_t I = 0>
bool decodeAlternative(std::size_t index, Decoder& d, Row& row) {
  if constexpr (I < std::variant_size_v<Row>) {
    if (index != I) return decodeAlternative<I + 1>(index, d, row);
    std::variant_alternative_t<I, Row> r;
    fields(d, r);
    row = std::move(r);
    return d.ok && d.in.empty();
  } else {
    return false;
  }
}

}  // namespace

std::string encodeJournalHeader(const JournalHeader& h) {
  std::string out(kJournalHeaderSize, '\0');
  const char magic[8] = {'D', 'Y', 'R', 'J', 'H', 'D', 'R', '1'};
  std::memcpy(&out[0], magic, 8);
  std::memcpy(&out[8], &h.runId, 8);
  std::memcpy(&out[16], &h.pid, 8);
  std::memcpy(&out[24], &h.startTimeUs, 8);
  return out;
}

std::optional<JournalHeader> decodeJournalHeader(std::string_view data) {
  if (data.size() < kJournalHeaderSize || data.substr(0, 8) != "DYRJHDR1") return std::nullopt;
  JournalHeader h;
  std::memcpy(&h.runId, data.data() + 8, 8);
  std::memcpy(&h.pid, data.data() + 16, 8);
  std::memcpy(&h.startTimeUs, data.data() + 24, 8);
  return h;
}

std::string rowJournalPath(const std::string& storePath, RowId runId) {
  return storePath + "-rows-" + std::to_string(runId);
}

void encodeRow(std::string& out, const Row& row) {
  std::size_t start = out.size();
  std::uint32_t header[2] = {kMagic, 0};
  out.append(reinterpret_cast<const char*>(header), sizeof header);
  out.push_back(static_cast<char>(row.index()));
  Encoder e{out};
  std::visit([&](const auto& r) { fields(e, r); }, row);
  auto length = static_cast<std::uint32_t>(out.size() - start - sizeof header);
  std::memcpy(&out[start + sizeof(std::uint32_t)], &length, sizeof length);
}

std::vector<Row> decodeRows(std::string_view data) {
  std::vector<Row> rows;
  while (data.size() >= 2 * sizeof(std::uint32_t) + 1) {
    std::uint32_t header[2];
    std::memcpy(header, data.data(), sizeof header);
    if (header[0] != kMagic || header[1] < 1 || data.size() - sizeof header < header[1]) break;
    std::string_view body = data.substr(sizeof header, header[1]);
    Decoder d{body.substr(1)};
    Row row;
    if (!decodeAlternative(static_cast<unsigned char>(body[0]), d, row)) break;
    rows.push_back(std::move(row));
    data.remove_prefix(sizeof header + header[1]);
  }
  return rows;
}

}  // namespace dynamo::storage

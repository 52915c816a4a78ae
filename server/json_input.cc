// One-pass validation of request JSON with RapidJSON's SAX reader (a
// second pass only to describe where a lone surrogate escape or a
// duplicate key is).
#include "server/json_input.h"

#include <rapidjson/error/en.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "common/exact_json.h"
#include "common/utf8.h"

namespace corvid::server {

namespace {

using rapidjson::SizeType;

// The raw body is checked to be UTF-8 before parsing, so a decoded string
// can only be ill-formed through a \u escape: RapidJSON 1.1 refuses a high
// surrogate that is not followed by a low one
// (kParseErrorStringUnicodeSurrogateInvalid) but encodes a lone low
// surrogate ("\udc00") as the bytes ED B0 80. kParseValidateEncodingFlag
// does not help: it checks the raw bytes of strings, never what an escape
// decodes to. A surrogate encodes as 0xED followed by 0xA0-0xBF, which
// well-formed UTF-8 never holds (0xED takes 0x80-0x9F there), so finding
// that pair is the whole check; Hangul text (0xED 0x80-0x9F) passes
// without a second validation.
bool DecodesToUtf8(std::string_view decoded) {
  const char* p = decoded.data();
  const char* end = p + decoded.size();
  while ((p = static_cast<const char*>(std::memchr(p, 0xED, static_cast<size_t>(end - p)))) != nullptr) {
    if (++p < end && static_cast<unsigned char>(*p) >= 0xA0) return false;
  }
  return true;
}

uint64_t Load64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
uint64_t Load32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t Rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

// A fast 64-bit hash for telling keys apart before comparing their bytes
// (the wyhash family's folded multiply). Not keyed: it only ever picks
// between at most KeySets::kLinearKeys candidates, so crafted collisions
// cost a few memcmp calls, never a longer scan.
uint64_t FastHash(std::string_view key) {
  constexpr uint64_t k0 = 0xa0761d6478bd642fULL, k1 = 0xe7037ed1a0b428dbULL;
  auto mix = [](uint64_t a, uint64_t b) {
    const unsigned __int128 r = static_cast<unsigned __int128>(a) * b;
    return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
  };
  const char* p = key.data();
  const size_t n = key.size();
  uint64_t a = 0, b = 0, seed = k0 ^ n;
  if (n > 16) {
    const char* end = p + n;
    for (; end - p > 16; p += 16) seed = mix(Load64(p) ^ k1, Load64(p + 8) ^ seed);
    a = Load64(end - 16);
    b = Load64(end - 8);
  } else if (n >= 8) {
    a = Load64(p);
    b = Load64(p + n - 8);
  } else if (n >= 4) {
    a = Load32(p);
    b = Load32(p + n - 4);
  } else if (n > 0) {
    const auto* u = reinterpret_cast<const unsigned char*>(p);
    a = (uint64_t{u[0]} << 16) | (uint64_t{u[n >> 1]} << 8) | u[n - 1];
  }
  return mix(a ^ k1, b ^ seed);
}

// SipHash-1-3 (the hash of Rust's HashMap) under a key drawn once per
// process: a client cannot know it, so cannot send many keys that fall in
// one hash-table bucket and turn a large object's check quadratic.
class KeyedHash {
 public:
  static const KeyedHash& Get() {
    static const KeyedHash hash;
    return hash;
  }
  KeyedHash() {
    try {
      std::random_device rd;
      k0_ = (uint64_t{rd()} << 32) | rd();
      k1_ = (uint64_t{rd()} << 32) | rd();
    } catch (const std::exception&) {  // no entropy source: still unknown to a client
      k0_ = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
      k1_ = reinterpret_cast<uintptr_t>(&k0_) ^ static_cast<uint64_t>(::getpid());
    }
  }
  uint64_t operator()(std::string_view s) const {
    uint64_t v0 = k0_ ^ 0x736f6d6570736575ULL, v1 = k1_ ^ 0x646f72616e646f6dULL;
    uint64_t v2 = k0_ ^ 0x6c7967656e657261ULL, v3 = k1_ ^ 0x7465646279746573ULL;
    auto round = [&] {
      v0 += v1;
      v1 = Rotl(v1, 13);
      v1 ^= v0;
      v0 = Rotl(v0, 32);
      v2 += v3;
      v3 = Rotl(v3, 16);
      v3 ^= v2;
      v0 += v3;
      v3 = Rotl(v3, 21);
      v3 ^= v0;
      v2 += v1;
      v1 = Rotl(v1, 17);
      v1 ^= v2;
      v2 = Rotl(v2, 32);
    };
    const char* p = s.data();
    const size_t n = s.size();
    const char* end = p + (n & ~size_t{7});
    for (; p != end; p += 8) {
      const uint64_t m = Load64(p);
      v3 ^= m;
      round();
      v0 ^= m;
    }
    uint64_t last = uint64_t{n & 0xff} << 56;
    for (size_t i = 0; i < (n & 7); ++i) last |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
    v3 ^= last;
    round();
    v0 ^= last;
    v2 ^= 0xff;
    round();
    round();
    round();
    return v0 ^ v1 ^ v2 ^ v3;
  }

 private:
  uint64_t k0_, k1_;
};

// The keys seen so far in every object still open, to find one repeated
// in its object. Objects nest, so this is a stack: an object's keys (bytes
// in `arena_`, one Entry each in `entries_`) follow its parent's and are
// dropped when it closes. An object of up to kLinearKeys keys is checked
// by comparing each new key with the others (hash first); past that its
// keys go in a hash table of their own (open addressing, at most half
// full), so any body is checked in linear time. One KeySets per thread is
// reused: a body of small objects allocates nothing.
class KeySets {
 public:
  static constexpr size_t kLinearKeys = 16;

  // Forgets every object (a new body, or one whose parse threw).
  void Reset() {
    arena_size_ = 0;
    entries_.clear();
    frames_.clear();
    tables_used_ = 0;
  }
  void Open() { frames_.push_back(Frame{entries_.size(), arena_size_, kNoTable, 0}); }
  void Close() {
    const Frame& f = frames_.back();
    if (f.table != kNoTable) --tables_used_;  // the innermost table: nested ones are closed
    entries_.resize(f.first_entry);
    arena_size_ = f.arena_begin;
    frames_.pop_back();
  }

  // Adds `key` to the innermost open object. Returns false, adding
  // nothing, when that object already has it.
  bool Insert(std::string_view key) {
    Frame& f = frames_.back();
    if (f.table == kNoTable) {
      const uint64_t h = FastHash(key);
      const uint64_t bit = uint64_t{1} << (h >> 58);
      if (f.seen & bit) {  // else no key of the object has this hash
        const Entry* const end = entries_.data() + entries_.size();
        for (const Entry* e = entries_.data() + f.first_entry; e != end; ++e)
          if (e->hash == h && Equal(*e, key)) return false;
      }
      f.seen |= bit;
      if (entries_.size() - f.first_entry < kLinearKeys) {
        Append(key, h);
        return true;
      }
      StartTable(f);
    }
    const uint64_t h = KeyedHash::Get()(key);
    Table& t = tables_[f.table];
    size_t slot = h & t.mask;
    for (; t.slots[slot] != 0; slot = (slot + 1) & t.mask) {
      // Only a matching tag reads the entry: probing stays in the table's cache lines.
      if ((t.slots[slot] >> 32) != (h >> 32)) continue;
      const Entry& e = entries_[(t.slots[slot] & 0xffffffff) - 1];
      if (e.hash == h && Equal(e, key)) return false;
    }
    Append(key, h);
    t.slots[slot] = Slot(h, entries_.size() - 1);
    if (2 * (entries_.size() - f.first_entry) > t.mask) Rehash(t, f.first_entry, 2 * (t.mask + 1));
    return true;
  }

  // Gives back what a large body grew, so an idle thread keeps little.
  void Trim() {
    Reset();
    if (arena_capacity_ > kKeepBytes) {
      arena_.reset();
      arena_capacity_ = 0;
    }
    if (entries_.capacity() * sizeof(Entry) > kKeepBytes) std::vector<Entry>().swap(entries_);
    for (Table& t : tables_)
      if (t.slots.capacity() * sizeof(uint64_t) > kKeepBytes) std::vector<uint64_t>().swap(t.slots);
  }

 private:
  static constexpr size_t kKeepBytes = size_t{1} << 20;
  static constexpr size_t kNoTable = SIZE_MAX;

  struct Entry {
    uint64_t hash;  // FastHash, or the keyed hash once its object has a table
    size_t offset;  // of the key's bytes in arena_
    size_t size;
  };
  struct Frame {
    size_t first_entry;  // this object's keys are entries_[first_entry, end)
    size_t arena_begin;
    size_t table;   // index in tables_, or kNoTable while linear
    uint64_t seen;  // while linear: bit (hash >> 58) set for each key's hash
  };
  struct Table {
    // The top half of a key's hash, then its entry's index + 1; 0 is empty.
    // (A body has far fewer than 2^32 keys.)
    std::vector<uint64_t> slots;
    size_t mask = 0;
  };
  static uint64_t Slot(uint64_t hash, size_t entry) { return (hash & 0xffffffff00000000ULL) | (entry + 1); }

  bool Equal(const Entry& e, std::string_view key) const {
    // (An empty key may come with a null pointer: memcmp must not see it.)
    return e.size == key.size() && (key.empty() || std::memcmp(arena_.get() + e.offset, key.data(), key.size()) == 0);
  }
  void Append(std::string_view key, uint64_t hash) {
    const size_t n = key.size();
    entries_.push_back(Entry{hash, arena_size_, n});
    if (arena_capacity_ - arena_size_ < n) GrowArena(n);
    // Keys are mostly short: copied inline (two overlapping words), not
    // through a call to memcpy.
    char* to = arena_.get() + arena_size_;
    const char* from = key.data();
    if (n > 16) {
      std::memcpy(to, from, n);
    } else if (n >= 8) {
      std::memcpy(to, from, 8);
      std::memcpy(to + n - 8, from + n - 8, 8);
    } else if (n >= 4) {
      std::memcpy(to, from, 4);
      std::memcpy(to + n - 4, from + n - 4, 4);
    } else {
      for (size_t i = 0; i < n; ++i) to[i] = from[i];
    }
    arena_size_ += n;
  }
  // Makes room for `more` bytes past arena_size_.
  void GrowArena(size_t more) {
    const size_t capacity = std::max({size_t{4096}, 2 * arena_capacity_, arena_size_ + more});
    auto grown = std::make_unique_for_overwrite<char[]>(capacity);
    if (arena_size_) std::memcpy(grown.get(), arena_.get(), arena_size_);
    arena_ = std::move(grown);
    arena_capacity_ = capacity;
  }
  // Moves object `f`, which has kLinearKeys keys, to a hash table: the
  // next free one on the stack of tables (its objects nest as they do).
  void StartTable(Frame& f) {
    if (tables_used_ == tables_.size()) tables_.emplace_back();
    f.table = tables_used_++;
    for (size_t i = f.first_entry; i < entries_.size(); ++i)
      entries_[i].hash = KeyedHash::Get()(std::string_view(arena_.get() + entries_[i].offset, entries_[i].size));
    Rehash(tables_[f.table], f.first_entry, 4 * kLinearKeys);
  }
  // Sizes `t` to `slots` (a power of two) and puts entries_[first, end) in it.
  void Rehash(Table& t, size_t first, size_t slots) {
    t.slots.assign(slots, 0);
    t.mask = slots - 1;
    for (size_t i = first; i < entries_.size(); ++i) {
      size_t slot = entries_[i].hash & t.mask;
      while (t.slots[slot] != 0) slot = (slot + 1) & t.mask;
      t.slots[slot] = Slot(entries_[i].hash, i);
    }
  }

  std::unique_ptr<char[]> arena_;  // the keys of the open objects, back to back
  size_t arena_size_ = 0;
  size_t arena_capacity_ = 0;
  std::vector<Entry> entries_;
  std::vector<Frame> frames_;
  std::vector<Table> tables_;
  size_t tables_used_ = 0;
};

// Whether a JSON number's text is beyond a double's range (|x| >
// 1.7976931348623157e308). RapidJSON refuses an exponent above 308 and an
// integer of more digits, but reads 10e308 or 1.8e308 as infinity, which
// no index nor JSON answer can hold (docs/http-choices.md, Documents).
// Only a number with an exponent or more than 300 characters can be.
bool BeyondDoubleRange(std::string_view text) {
  if (text.size() <= 300 && text.find_first_of("eE") == std::string_view::npos) return false;
  return std::isinf(JsonNumberToDouble(text));
}

// Tracks depth, the root's type, the top-level "id" / "_deleted" and,
// given KeySets, each object's keys.
class Handler : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, Handler> {
 public:
  // `keys` (reset, or null not to look for duplicate keys) must outlive the parse.
  Handler(ObjectFields* fields, KeySets* keys) : fields_(fields), keys_(keys) {}

  bool too_deep = false;
  bool root_is_object = false;

  bool StartObject() {
    if (!Open(true)) return false;
    if (keys_) keys_->Open();
    return true;
  }
  bool StartArray() { return Open(false); }
  bool EndObject(SizeType) {
    if (keys_) keys_->Close();
    --depth_;
    return true;
  }
  bool EndArray(SizeType) { --depth_; return true; }
  bool lone_surrogate = false;               // a decoded string was not UTF-8 (parse stopped there)
  std::optional<std::string> duplicate_key;  // a key already in its object (parse stopped there)
  size_t keys_seen = 0;                      // Key() calls, that one included

  bool Key(const char* s, SizeType len, bool) {
    if (!DecodedIsUtf8(s, len)) return false;
    ++keys_seen;
    if (keys_ && !keys_->Insert(std::string_view(s, len))) {
      duplicate_key.emplace(s, len);
      return false;
    }
    pending_ = Pending::kNone;
    if (depth_ == 1 && fields_) {
      if (len == 2 && std::memcmp(s, "id", 2) == 0) pending_ = Pending::kId;
      else if (len == 8 && std::memcmp(s, "_deleted", 8) == 0) pending_ = Pending::kDeleted;
    }
    return true;
  }
  bool String(const char* s, SizeType len, bool) {
    if (!DecodedIsUtf8(s, len)) return false;
    if (pending_ == Pending::kId && depth_ == 1) {
      fields_->id_present = true;
      fields_->id.emplace(s, len);
    }
    return Scalar();
  }
  bool Bool(bool b) {
    if (pending_ == Pending::kDeleted && depth_ == 1) fields_->deleted = b;
    return Scalar();
  }
  // Numbers (kept as text), null: anything that is not a string for "id".
  bool Default() { return Scalar(); }
  bool RawNumber(const char* s, SizeType len, bool) {
    if (BeyondDoubleRange(std::string_view(s, len))) {
      number_too_big = true;
      return false;
    }
    return Scalar();
  }
  bool number_too_big = false;  // a number beyond a double's range (parse stopped at it)

 private:
  enum class Pending { kNone, kId, kDeleted };

  bool DecodedIsUtf8(const char* s, SizeType len) {
    if (!DecodesToUtf8(std::string_view(s, len))) lone_surrogate = true;
    return !lone_surrogate;
  }

  bool Open(bool object) {
    if (depth_ == 0 && !seen_root_) root_is_object = object;
    seen_root_ = true;
    NoteNonString();
    if (++depth_ > kMaxJsonDepth) {
      too_deep = true;
      return false;
    }
    return true;
  }
  bool Scalar() {
    seen_root_ = true;
    NoteNonString();
    pending_ = Pending::kNone;
    return true;
  }
  // A value for a pending "id" that did not arrive through String().
  void NoteNonString() {
    if (pending_ == Pending::kId && depth_ == 1 && !fields_->id) fields_->id_present = true;
    pending_ = Pending::kNone;
  }

  ObjectFields* fields_;
  KeySets* keys_;
  int depth_ = 0;
  bool seen_root_ = false;
  Pending pending_ = Pending::kNone;
};

// Re-parses a body up to its first string that decodes to a lone surrogate
// (or up to its `stop_at_key`-th key) and says where that string is
// ("a.b[2]", "a key of 'a'"). Only runs once such a string was found, so
// the validation of good bodies pays nothing for it.
class Locator : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, Locator> {
 public:
  explicit Locator(size_t stop_at_key = 0) : stop_at_key_(stop_at_key) {}

  bool StartObject() { return Open(true); }
  bool StartArray() { return Open(false); }
  bool EndObject(SizeType) { return Close(); }
  bool EndArray(SizeType) { return Close(); }
  bool Key(const char* s, SizeType len, bool) {
    if (!DecodesToUtf8(std::string_view(s, len))) return false;
    if (++keys_ == stop_at_key_) return false;
    frames_.back().key.assign(s, len);
    frames_.back().awaiting_key = false;
    return true;
  }
  bool String(const char* s, SizeType len, bool) {
    if (!DecodesToUtf8(std::string_view(s, len))) return false;
    return Value();
  }
  bool Default() { return Value(); }
  bool RawNumber(const char*, SizeType, bool) { return Value(); }

  // Where the parse stopped: the string being parsed when it failed.
  std::string Where() const {
    bool in_key = !frames_.empty() && frames_.back().object && frames_.back().awaiting_key;
    // A key belongs to its object; a value to its own member or element.
    std::string path = Path(frames_.size() - (in_key ? 1 : 0));
    if (in_key) return path.empty() ? "a top-level key" : "a key of '" + path + "'";
    return path.empty() ? "the top-level value" : "'" + path + "'";
  }
  // The path of the object whose key stopped the parse ("" at the top).
  std::string KeyObject() const { return frames_.empty() ? "" : Path(frames_.size() - 1); }

 private:
  static constexpr size_t kMaxPathBytes = 200;

  // The path the first `n` frames lead to, cut to about kMaxPathBytes.
  std::string Path(size_t n) const {
    std::string path;
    for (size_t i = 0; i < n; ++i) {
      const Frame& f = frames_[i];
      if (!f.object)
        path.append("[").append(std::to_string(f.index)).append("]");
      else
        path.append(path.empty() ? "" : ".").append(f.key);
      if (path.size() > kMaxPathBytes) break;
    }
    if (path.size() > kMaxPathBytes) path = std::string(Utf8Prefix(path, kMaxPathBytes)) + "...";
    return path;
  }

  struct Frame {
    bool object;
    bool awaiting_key = true;  // objects: the next string is a key
    size_t index = 0;          // arrays: the index of the next element
    std::string key;           // objects: the current member's key
  };

  bool Open(bool object) {
    frames_.push_back(Frame{.object = object, .key = {}});
    return true;
  }
  bool Close() {
    frames_.pop_back();
    return Value();
  }
  // A value is complete: the enclosing object expects a key, an array its next element.
  bool Value() {
    if (frames_.empty()) return true;
    Frame& f = frames_.back();
    if (f.object)
      f.awaiting_key = true;
    else
      ++f.index;
    return true;
  }

  size_t stop_at_key_;
  size_t keys_ = 0;
  std::vector<Frame> frames_;
};

// The value of the four hex digits `s` starts with, or -1.
int Hex4(std::string_view s) {
  if (s.size() < 4) return -1;
  int v = 0;
  for (char c : s.substr(0, 4)) {
    const int d = HexValue(c);
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

// The offset of the opening quote of the well-formed JSON string of `text`
// that `pos` is inside (or at the closing quote of), or npos.
size_t OpeningQuote(std::string_view text, size_t pos) {
  // The opening quote is the first '"' before `pos` that is not escaped,
  // i.e. not preceded by an odd run of backslashes.
  size_t open = pos;
  while (open > 0) {
    open = text.rfind('"', open - 1);
    if (open == std::string_view::npos) return open;
    size_t backslashes = 0;
    while (backslashes < open && text[open - 1 - backslashes] == '\\') ++backslashes;
    if (backslashes % 2 == 0) return open;
  }
  return std::string_view::npos;
}

// `pos` is inside a well-formed JSON string of `text` (or at its closing
// quote) that holds a \u escape spelling a lone surrogate. Returns the
// offset of that escape's backslash (the first such in the string).
size_t LoneSurrogateEscape(std::string_view text, size_t pos) {
  size_t open = OpeningQuote(text, pos);
  if (open == std::string_view::npos) return pos;
  for (size_t i = open + 1; i + 1 < text.size() && text[i] != '"'; ++i) {
    if (text[i] != '\\') continue;
    if (text[i + 1] != 'u') {
      ++i;  // a two-character escape such as \\ or \"
      continue;
    }
    int cp = Hex4(text.substr(i + 2));
    if (cp >= 0xDC00 && cp <= 0xDFFF) return i;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      int low = text.substr(i + 6, 2) == "\\u" ? Hex4(text.substr(i + 8)) : -1;
      if (low < 0xDC00 || low > 0xDFFF) return i;
      i += 6;  // the pair's low half
    }
    i += 5;
  }
  return pos;
}

// The problem for a body whose parse stopped at a string that decodes to
// a lone surrogate: `result` is the stopped parse.
JsonProblem LoneSurrogateProblem(std::string_view text, rapidjson::ParseResult result) {
  // RapidJSON's own error points at a lone high surrogate's escape (a lone
  // low one may come before it in the same string); a string our handler
  // refused ends just before the offset where the parse stopped.
  size_t offset = LoneSurrogateEscape(text, result.Code() == rapidjson::kParseErrorStringUnicodeSurrogateInvalid
                                                ? result.Offset()
                                                : result.Offset() - 1);
  Locator locator;
  rapidjson::Reader reader;
  rapidjson::MemoryStream stream(text.data(), text.size());
  reader.Parse<rapidjson::kParseIterativeFlag | rapidjson::kParseNumbersAsStringsFlag>(stream, locator);
  std::string message = "invalid UTF-8 at offset " + std::to_string(offset) + ": the escape " +
                        std::string(text.substr(offset, 6)) + " spells a lone surrogate (in " + locator.Where() + ")";
  return JsonProblem{"invalid_utf8", std::move(message), offset};
}

// `key` for a message: cut to kMaxKeyBytes at a character boundary, in
// quotes, with quotes, backslashes and control characters escaped as JSON
// spells them (the key is valid UTF-8: it was checked before).
std::string QuotedKey(std::string_view key) {
  constexpr size_t kMaxKeyBytes = 100;
  const std::string_view shown = Utf8Prefix(key, kMaxKeyBytes);
  std::string out = "\"";
  for (char c : shown) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
  if (shown.size() < key.size()) out += "... (" + std::to_string(key.size()) + " bytes)";
  return out;
}

// The problem for a body whose parse stopped at a key already in its
// object: `result` is the stopped parse, `handler` what stopped it.
JsonProblem DuplicateKeyProblem(std::string_view text, rapidjson::ParseResult result, const Handler& handler) {
  // The parse stopped just past the key's closing quote; the offset is its opening one.
  size_t offset = OpeningQuote(text, result.Offset() - 1);
  if (offset == std::string_view::npos) offset = result.Offset() - 1;
  Locator locator(handler.keys_seen);
  rapidjson::Reader reader;
  rapidjson::MemoryStream stream(text.data(), text.size());
  reader.Parse<rapidjson::kParseIterativeFlag | rapidjson::kParseNumbersAsStringsFlag>(stream, locator);
  const std::string object = locator.KeyObject();
  std::string message = "duplicate key " + QuotedKey(*handler.duplicate_key) + " at offset " + std::to_string(offset) +
                        (object.empty() ? " in the top-level object" : " in the object at '" + object + "'");
  return JsonProblem{"duplicate_key", std::move(message), offset};
}

}  // namespace

bool IsBlank(std::string_view text) {
  for (char c : text)
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return false;
  return true;
}

std::optional<JsonProblem> ValidateJsonObject(std::string_view text, ObjectFields* fields, DuplicateKeys duplicates) {
  if (IsBlank(text)) return JsonProblem{"empty_body", "the body is empty; expected a JSON object", std::nullopt};
  ObjectFields scratch;
  if (fields) *fields = ObjectFields{};
  thread_local KeySets key_sets;  // reused: no allocation per body, nor per key
  KeySets* keys = nullptr;
  if (duplicates == DuplicateKeys::kReject) {
    keys = &key_sets;
    keys->Reset();
  }
  Handler handler(fields ? fields : &scratch, keys);
  // Validating UTF-8 up front (ASCII runs eight bytes at a time) is much
  // faster than RapidJSON's byte-by-byte check inside strings, and also
  // catches invalid bytes outside strings.
  if (size_t bad = FindInvalidUtf8(text); bad != std::string_view::npos)
    return JsonProblem{"invalid_utf8", "invalid UTF-8 at offset " + std::to_string(bad), bad};
  rapidjson::Reader reader;
  rapidjson::MemoryStream stream(text.data(), text.size());
  constexpr unsigned kFlags = rapidjson::kParseIterativeFlag | rapidjson::kParseNumbersAsStringsFlag;
  rapidjson::ParseResult ok = reader.Parse<kFlags>(stream, handler);
  if (keys) keys->Trim();
  if (handler.too_deep) {
    return JsonProblem{"too_deep",
                       "JSON nesting exceeds " + std::to_string(kMaxJsonDepth) + " levels at offset " +
                           std::to_string(ok.Offset()),
                       ok.Offset()};
  }
  if (handler.lone_surrogate || ok.Code() == rapidjson::kParseErrorStringUnicodeSurrogateInvalid)
    return LoneSurrogateProblem(text, ok);
  if (handler.duplicate_key) return DuplicateKeyProblem(text, ok, handler);
  if (handler.number_too_big)  // RapidJSON's message for 1e400; the offset is the number's
    return JsonProblem{"invalid_json", "Number too big to be stored in double. at offset " + std::to_string(ok.Offset()),
                       ok.Offset()};
  if (!ok) {
    std::string message = rapidjson::GetParseError_En(ok.Code());
    message += " at offset " + std::to_string(ok.Offset());
    return JsonProblem{"invalid_json", std::move(message), ok.Offset()};
  }
  // RapidJSON's MemoryStream reads a NUL byte as the end of the input, so
  // "{}\0anything" parsed as "{}": JSON text never holds a raw NUL (in a
  // string it must be escaped), so one is an error wherever it stands.
  if (stream.Tell() != text.size())
    return JsonProblem{"invalid_json", "a NUL byte at offset " + std::to_string(stream.Tell()), stream.Tell()};
  if (!handler.root_is_object)
    return JsonProblem{"not_an_object", "the JSON value must be an object", size_t{0}};
  return std::nullopt;
}

}  // namespace corvid::server

// Tests of the stored-body format (storage/body_format.h): exact round trips
// of every JSON shape with and without a trained dictionary, projections of
// structured bodies against the generator's own member slices, DecodedSize's
// bound, corruption and truncation, the store's use of dictionaries and
// projections, and a store written by the previous (format 1) build
// (tests/fixtures/store-v1) opening and reading back identically.
#include "storage/body_format.h"

#include <lmdb.h>
#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "storage/document_store.h"
#include "tests/storage/store_test_util.h"
#include "storage/format.h"

using namespace corvid;
using namespace corvid::storage;
namespace fmt = corvid::storage::format;

namespace {

// ---------------------------------------------------------------------------
// Helpers: temp dirs, store writes, dictionaries.

using testing::Bulk;
using testing::Del;
using testing::OpenStore;
using testing::Put;
using testing::Single;
using testing::TempDir;

body::DictionaryLookup LookupOf(std::vector<std::shared_ptr<const body::Dictionary>> dicts) {
  return [dicts](uint32_t id) -> std::shared_ptr<const body::Dictionary> {
    for (const auto& d : dicts)
      if (d->id() == id) return d;
    return nullptr;
  };
}

// True when a == b; otherwise says where they first differ (no multi-MB
// strings in failure messages).
bool SameBytes(std::string_view a, std::string_view b, std::string* why = nullptr) {
  if (a == b) return true;
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  if (why) {
    *why = "sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size()) + ", first difference at " +
           std::to_string(i) + ": ..." + std::string(a.substr(i > 20 ? i - 20 : 0, 60)) + "... vs ..." +
           std::string(b.substr(i > 20 ? i - 20 : 0, 60)) + "...";
  }
  return false;
}

#define CHECK_SAME(a, b)                           \
  do {                                             \
    std::string why_;                              \
    const bool same_ = SameBytes((a), (b), &why_); \
    INFO(why_);                                    \
    CHECK(same_);                                  \
  } while (0)

// prefix + n (spelled out: GCC 12's -Wrestrict misfires on "lit" + to_string()).
std::string Numbered(std::string_view prefix, uint64_t n) {
  std::string s(prefix);
  s += std::to_string(n);
  return s;
}


// ---------------------------------------------------------------------------
// JSON text generators.

// The text between the quotes of a JSON string holding `s` (UTF-8): the
// required escapes always; given `rng`, optional ones too (\u for ASCII
// letters and non-ASCII, surrogate pairs for astral code points, \/).
std::string Escape(std::string_view s, std::mt19937_64* rng = nullptr) {
  std::string out;
  auto hex4 = [&](uint32_t v, bool upper) {
    char buf[8];
    std::snprintf(buf, sizeof buf, upper ? "\\u%04X" : "\\u%04x", v);
    out += buf;
  };
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    uint32_t cp;
    size_t len;
    if (c < 0x80) {
      cp = c, len = 1;
    } else if ((c >> 5) == 6) {
      cp = ((c & 0x1Fu) << 6) | (s[i + 1] & 0x3F), len = 2;
    } else if ((c >> 4) == 14) {
      cp = ((c & 0x0Fu) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F), len = 3;
    } else {
      cp = ((c & 0x07u) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F), len = 4;
    }
    const bool optional = rng != nullptr && (*rng)() % 3 == 0;
    const bool upper = rng != nullptr && (*rng)() % 2 == 0;
    if (cp == '"')
      out += "\\\"";
    else if (cp == '\\')
      out += "\\\\";
    else if (cp == '\n')
      out += "\\n";
    else if (cp == '\t')
      out += "\\t";
    else if (cp < 0x20)
      hex4(cp, upper);
    else if (optional && cp == '/')
      out += "\\/";
    else if (optional && cp >= 0x10000) {
      hex4(0xD800 + ((cp - 0x10000) >> 10), upper);
      hex4(0xDC00 + ((cp - 0x10000) & 0x3FF), upper);
    } else if (optional && (cp >= 0x80 || (cp >= 'a' && cp <= 'z'))) {
      hex4(cp, upper);
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  return out;
}

// A JSON string value (quotes included) of exactly `len` bytes, mostly
// letters, with escapes, braces, brackets and UTF-8 sprinkled in.
std::string StringValue(std::mt19937_64& rng, size_t len) {
  REQUIRE(len >= 2);
  std::string s(len - 2, 'x');
  for (auto& c : s) c = char('a' + rng() % 26);
  static const std::vector<std::string> kPieces = {
      "\\\"", "\\\\", "{", "}", "[", "]", "\\u00e9", "é", "\\n", "\\\":\\\"", "\\ud83d\\ude00", "😀", ",", " "};
  std::vector<bool> used(s.size(), false);
  const size_t tries = s.size() / 40 + 1;
  for (size_t t = 0; t < tries; ++t) {
    const std::string& p = kPieces[rng() % kPieces.size()];
    if (p.size() > s.size()) continue;
    const size_t at = rng() % (s.size() - p.size() + 1);
    if (std::any_of(used.begin() + at, used.begin() + at + p.size(), [](bool u) { return u; })) continue;
    // Whole tokens on a fill of letters: the string stays valid JSON.
    std::copy(p.begin(), p.end(), s.begin() + at);
    std::fill(used.begin() + at, used.begin() + at + p.size(), true);
  }
  return "\"" + s + "\"";
}

const std::vector<std::string>& EdgeScalars() {
  static const std::vector<std::string> k = {"0",
                                             "1",
                                             "-1",
                                             "1.0",
                                             "-0",
                                             "1e400",
                                             "123456789012345678901234567890",
                                             "0.1",
                                             "-1.5e-7",
                                             "3.25E+2",
                                             "true",
                                             "false",
                                             "null",
                                             "\"\"",
                                             "\"x\"",
                                             "\"{[\\\"]}\"",
                                             "\"\\\\\"",
                                             "\"caf\\u00e9 \\ud83d\\ude00 日本\"",
                                             "\"}\"",
                                             "\"]\"",
                                             "\",\"",
                                             "\"\\\"}\""};
  return k;
}

std::string Ws(std::mt19937_64& rng, bool spaced) {
  if (!spaced) return {};
  static const char kWs[] = {' ', '\t', '\n', '\r'};
  std::string s(rng() % 4, ' ');
  for (auto& c : s) c = kWs[rng() % 4];
  return s;
}

std::string Nested(std::mt19937_64& rng, int depth, bool spaced) {
  const bool object = rng() % 2 == 0;
  const size_t n = rng() % 5;
  std::string s = object ? "{" : "[";
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) s += Ws(rng, spaced) + ",";
    s += Ws(rng, spaced);
    if (object)
      s += "\"" + Escape("k" + std::to_string(i) + (i % 2 ? "}\"" : "]"), &rng) + "\"" + Ws(rng, spaced) + ":" +
           Ws(rng, spaced);
    s += depth > 0 && rng() % 3 == 0 ? Nested(rng, depth - 1, spaced) : EdgeScalars()[rng() % EdgeScalars().size()];
  }
  return s + Ws(rng, spaced) + (object ? "}" : "]");
}

// A generated document with its top-level members as written.
struct Member {
  std::string raw_key;  // between the quotes, escapes kept
  std::string name;     // unescaped
  std::string value;    // the value's text
};
struct GenDoc {
  std::string text;
  std::vector<Member> members;
};

GenDoc Assemble(std::mt19937_64& rng, std::vector<Member> members, bool spaced) {
  GenDoc d;
  d.text = Ws(rng, spaced) + "{";
  for (size_t i = 0; i < members.size(); ++i) {
    if (i > 0) d.text += Ws(rng, spaced) + ",";
    d.text +=
        Ws(rng, spaced) + "\"" + members[i].raw_key + "\"" + Ws(rng, spaced) + ":" + Ws(rng, spaced) + members[i].value;
  }
  d.text += Ws(rng, spaced) + "}" + Ws(rng, spaced);
  d.members = std::move(members);
  return d;
}

// Names that look alike: prefixes, escapes, unicode, JSON punctuation.
const std::vector<std::string>& TrickyNames() {
  static const std::vector<std::string> k = {
      "a",    "ab", "abc",     "ab c",     "a\"b",    "back\\slash", "sl/ash",    "café", "cafe", "naïve",
      "日本", "😀",  "smile😀x", "tab\tkey", "nl\nkey", "score",       "createdAt", "",     "{",    "}",
      "[",    ":",  ",",       "\\u00e9",  "é",       "e",           "\"",        "\\",   "A",    "AB"};
  return k;
}

// 20-2000 top-level members: scalars at every edge, nested values, strings
// around kFrameBytes and (rarely) of 300 KB; spaced or compact. `small`:
// 20-40 members of scalars and short strings (a body stored whole).
GenDoc RandomDoc(std::mt19937_64& rng, bool small = false) {
  const size_t n = small ? 20 + rng() % 21 : 20 + rng() % 1981;
  const bool spaced = rng() % 2 == 0;
  std::vector<std::string> names = TrickyNames();
  std::shuffle(names.begin(), names.end(), rng);
  names.resize(rng() % names.size());
  std::set<std::string> seen(names.begin(), names.end());
  for (size_t i = 0; names.size() < n; ++i)
    if (seen.insert(Numbered("f", i)).second) names.push_back(Numbered("f", i));
  std::shuffle(names.begin(), names.end(), rng);
  int big = 0;
  std::vector<Member> members;
  for (const std::string& name : names) {
    Member m;
    m.name = name;
    m.raw_key = Escape(name, &rng);
    const unsigned r = small ? rng() % 650 : rng() % 1000;
    if (r < 450) {
      m.value = EdgeScalars()[rng() % EdgeScalars().size()];
    } else if (r < 650) {
      m.value = StringValue(rng, 2 + rng() % 60);
    } else if (r < 850) {
      m.value = Nested(rng, 4, spaced);
    } else if (r < 900) {
      const size_t edge[] = {body::kFrameBytes - 1, body::kFrameBytes, body::kFrameBytes + 1};
      m.value = StringValue(rng, edge[rng() % 3]);
    } else if (r < 995 || big >= 2) {
      m.value = StringValue(rng, 100 + rng() % 12000);
    } else {
      ++big;
      m.value = StringValue(rng, size_t{300} << 10);
    }
    members.push_back(std::move(m));
  }
  return Assemble(rng, std::move(members), spaced);
}

// A realistic ~2 KB document: what a collection's dictionary learns from.
std::string SmallDoc(std::mt19937_64& rng, int i) {
  static const char* kNames[] = {"Ann", "Bob", "Chloé", "Dmitri", "Eve", "Farah", "Grace", "Hiro"};
  static const char* kCities[] = {"Lyon", "Porto", "Kraków", "Osaka", "Austin", "Quito"};
  static const char* kStatus[] = {"placed", "paid", "shipped", "delivered", "returned"};
  static const char* kWords[] = {"fast",    "delivery", "gift", "wrap", "please", "leave", "at",   "door",
                                 "fragile", "handle",   "with", "care", "thanks", "again", "order"};
  char num[64];
  std::string s = "{\"id\":\"s" + std::to_string(i) + "\",\"type\":\"order\",\"status\":\"" + kStatus[rng() % 5] +
                  "\",\"score\":" + std::to_string(rng() % 1000) + ",\"createdAt\":\"2024-0" +
                  std::to_string(1 + rng() % 9) + "-1" + std::to_string(rng() % 10) + "T12:00:00Z\",";
  s += "\"customer\":{\"name\":\"" + std::string(kNames[rng() % 8]) + "\",\"email\":\"user" +
       std::to_string(rng() % 100000) + "@example.com\",\"address\":{\"street\":\"" + std::to_string(rng() % 999) +
       " Main Street\",\"city\":\"" + kCities[rng() % 6] + "\",\"zip\":\"" + std::to_string(10000 + rng() % 89999) +
       "\",\"country\":\"FR\"}},\"items\":[";
  const int items = 6 + int(rng() % 6);
  for (int k = 0; k < items; ++k) {
    std::snprintf(num, sizeof num, "%d.%02d", int(rng() % 200), int(rng() % 100));
    s += std::string(k ? "," : "") + "{\"sku\":\"SKU-" + std::to_string(10000 + rng() % 90000) +
         "\",\"title\":\"Item " + kWords[rng() % 15] + " " + kWords[rng() % 15] +
         "\",\"qty\":" + std::to_string(1 + rng() % 5) + ",\"price\":" + num + ",\"tags\":[\"" + kWords[rng() % 15] +
         "\",\"" + kWords[rng() % 15] + "\"],\"warehouse\":\"WH-" + std::to_string(rng() % 12) + "\"}";
  }
  s += "],\"notes\":\"";
  while (s.size() < 1900 + rng() % 200) s += std::string(kWords[rng() % 15]) + " ";
  return s + "\"}";
}

std::vector<std::string> DictionarySamples(uint64_t seed, int n) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> samples;
  for (int i = 0; i < n; ++i) samples.push_back(SmallDoc(rng, i));
  return samples;
}

// A trained dictionary with id 7 (and its bytes), shared by the tests.
struct TestDictionary {
  std::string bytes;
  std::shared_ptr<const body::Dictionary> dict;
};
const TestDictionary& TrainedDictionary() {
  static const TestDictionary d = [] {
    TestDictionary t;
    t.bytes = body::TrainDictionary(DictionarySamples(99, 1000), size_t{64} << 10);
    t.dict = t.bytes.empty() ? nullptr : body::Dictionary::Load(7, t.bytes, 1);
    return t;
  }();
  REQUIRE(!d.bytes.empty());
  REQUIRE(d.dict != nullptr);
  return d;
}

// ---------------------------------------------------------------------------
// An independent reader of the structured layout, from its documentation.

bool ReadVarint(std::string_view s, size_t& pos, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && pos < s.size(); shift += 7) {
    const auto b = static_cast<uint8_t>(s[pos++]);
    v |= uint64_t{b & 0x7fu} << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

struct Layout {
  uint8_t version = 0;
  uint64_t dict_id = 0, text_size = 0;
  struct Frame {
    uint64_t raw, stored;
  };
  std::vector<Frame> frames;
  struct Entry {
    std::string key;
    uint64_t frame, offset, length;
  };
  std::vector<Entry> entries;
  std::vector<size_t> by_key;  // version 2: the entries' indexes in the sorted offsets' order
  size_t header_bytes = 0;     // through the checksum
  std::vector<std::string> frame_texts;
};

std::string Unescaped(std::string_view raw_key);

// Parses a structured body per body_format.h (version 2, or the version 1
// it still reads) and decompresses its frames with plain zstd (and
// `dict_bytes` when the header names a dictionary).
void ReadLayout(std::string_view s, std::string_view dict_bytes, Layout& l) {
  size_t pos = 0;
  REQUIRE(!s.empty());
  l.version = static_cast<uint8_t>(s[0]);
  REQUIRE((l.version == 1 || l.version == 2));
  pos = 1;
  uint64_t count = 0;
  REQUIRE(ReadVarint(s, pos, l.dict_id));
  REQUIRE(ReadVarint(s, pos, l.text_size));
  REQUIRE(ReadVarint(s, pos, count));
  for (uint64_t i = 0; i < count; ++i) {
    Layout::Frame f{};
    REQUIRE(ReadVarint(s, pos, f.raw));
    REQUIRE(ReadVarint(s, pos, f.stored));
    l.frames.push_back(f);
  }
  REQUIRE(ReadVarint(s, pos, count));
  uint64_t dir_bytes = 0;
  if (l.version == 2) REQUIRE(ReadVarint(s, pos, dir_bytes));
  const size_t dir_begin = pos;
  std::map<uint64_t, size_t> entry_at;  // directory offset -> entry index
  for (uint64_t i = 0; i < count; ++i) {
    entry_at[pos - dir_begin] = l.entries.size();
    uint64_t key_len;
    REQUIRE(ReadVarint(s, pos, key_len));
    REQUIRE(pos + key_len <= s.size());
    Layout::Entry e;
    e.key = std::string(s.substr(pos, key_len));
    pos += key_len;
    REQUIRE(ReadVarint(s, pos, e.frame));
    REQUIRE(ReadVarint(s, pos, e.offset));
    REQUIRE(ReadVarint(s, pos, e.length));
    l.entries.push_back(std::move(e));
  }
  if (l.version == 2) {
    CHECK(pos - dir_begin == dir_bytes);
    // Every entry once, in the order of the unescaped keys.
    REQUIRE(pos + 4 * count <= s.size());
    std::set<size_t> seen;
    for (uint64_t i = 0; i < count; ++i) {
      uint32_t off;
      std::memcpy(&off, s.data() + pos + 4 * i, 4);
      const auto it = entry_at.find(off);
      REQUIRE(it != entry_at.end());
      CHECK(seen.insert(it->second).second);
      if (!l.by_key.empty())
        CHECK(Unescaped(l.entries[l.by_key.back()].key) <= Unescaped(l.entries[it->second].key));
      l.by_key.push_back(it->second);
    }
    pos += 4 * count;
  }
  REQUIRE(pos + 4 <= s.size());
  uint32_t sum;
  std::memcpy(&sum, s.data() + pos, 4);
  CHECK(sum == static_cast<uint32_t>(XXH3_64bits(s.data(), pos)));
  pos += 4;
  l.header_bytes = pos;
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  for (const auto& f : l.frames) {
    REQUIRE(pos + f.stored <= s.size());
    std::string text(f.raw, '\0');
    const size_t n = dict_bytes.empty() || l.dict_id == 0
                         ? ZSTD_decompressDCtx(dctx, text.data(), text.size(), s.data() + pos, f.stored)
                         : ZSTD_decompress_usingDict(dctx, text.data(), text.size(), s.data() + pos, f.stored,
                                                     dict_bytes.data(), dict_bytes.size());
    INFO(ZSTD_getErrorName(n));
    CHECK(n == f.raw);
    // Each frame carries zstd's content checksum, as documented.
    // (zstd format: 4 bytes of magic, then the frame header descriptor,
    // whose bit 2 is Content_Checksum_flag.)
    REQUIRE(f.stored >= 5);
    CHECK((static_cast<uint8_t>(s[pos + 4]) & 0x04) != 0);
    l.frame_texts.push_back(std::move(text));
    pos += f.stored;
  }
  ZSTD_freeDCtx(dctx);
  CHECK(pos == s.size());
}

// Checks the structured layout of `stored` against `text`: the frames
// concatenate to the text; each entry's value lies in its frame; values
// of kFrameBytes or more have a frame of their own; entries follow the
// text's order. Returns the entries' value slices in text coordinates.
struct EntryAt {
  std::string key;
  size_t begin, end;
};
std::vector<EntryAt> CheckLayout(std::string_view text, std::string_view stored, const TestDictionary* dict) {
  Layout l;
  ReadLayout(stored, dict ? std::string_view(dict->bytes) : std::string_view(), l);
  CHECK(l.version == 2);
  CHECK(l.dict_id == (dict ? dict->dict->id() : 0));
  CHECK(l.text_size == text.size());
  std::string joined;
  std::vector<size_t> frame_at;
  for (const auto& t : l.frame_texts) {
    frame_at.push_back(joined.size());
    joined += t;
  }
  CHECK_SAME(joined, text);
  std::vector<EntryAt> out;
  std::map<uint64_t, int> per_frame;
  for (const auto& e : l.entries) ++per_frame[e.frame];
  size_t last_end = 0;
  for (const auto& e : l.entries) {
    REQUIRE(e.frame < l.frames.size());
    REQUIRE(e.offset + e.length <= l.frames[e.frame].raw);
    const size_t begin = frame_at[e.frame] + e.offset;
    CHECK(begin >= last_end);
    last_end = begin + e.length;
    if (e.length >= body::kFrameBytes) CHECK(per_frame[e.frame] == 1);
    out.push_back(EntryAt{e.key, begin, begin + e.length});
  }
  // Frames of small values stay near kFrameBytes (one piece may exceed it
  // only alone).
  for (size_t f = 0; f + 1 < l.frames.size(); ++f)
    if (per_frame[f] > 1) CHECK(l.frames[f].raw <= body::kFrameBytes);
  return out;
}

// The unescaped form of a key as written, via RapidJSON.
std::string Unescaped(std::string_view raw_key) {
  const std::string quoted = "\"" + std::string(raw_key) + "\"";
  rapidjson::Document d;
  d.Parse(quoted.data(), quoted.size());
  REQUIRE(!d.HasParseError());
  REQUIRE(d.IsString());
  return std::string(d.GetString(), d.GetStringLength());
}

constexpr unsigned kLenient = rapidjson::kParseNumbersAsStringsFlag;

// Parses `text` with RapidJSON, which refuses exponents beyond a double's
// even with numbers kept as strings: 1e400 (kept by the store as written)
// is read as the same-length 1e300, so offsets stay those of `text`.
void ParseLenient(rapidjson::Document& d, std::string_view text) {
  std::string copy(text);
  for (size_t at = copy.find("1e400"); at != std::string::npos; at = copy.find("1e400", at + 5)) copy[at + 2] = '3';
  d.Parse<kLenient>(copy.data(), copy.size());
}

bool ParsesAsOneValue(std::string_view text) {
  rapidjson::Document d;
  ParseLenient(d, text);
  return !d.HasParseError();
}

// For a document that is valid JSON: the directory lists exactly its
// top-level members (RapidJSON's reading of it), in order, each value slice
// one whole JSON value.
void CheckDirectoryAgainstParser(std::string_view text, const std::vector<EntryAt>& entries) {
  rapidjson::Document d;
  ParseLenient(d, text);
  REQUIRE(!d.HasParseError());
  REQUIRE(d.IsObject());
  REQUIRE(entries.size() == d.MemberCount());
  size_t i = 0;
  for (auto it = d.MemberBegin(); it != d.MemberEnd(); ++it, ++i) {
    CHECK(Unescaped(entries[i].key) == std::string(it->name.GetString(), it->name.GetStringLength()));
    CHECK(ParsesAsOneValue(text.substr(entries[i].begin, entries[i].end - entries[i].begin)));
  }
}

// ---------------------------------------------------------------------------
// Projections.

size_t SkipWs(std::string_view s, size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  return i;
}

// `out` must be a JSON object whose members are exactly `want`, in order,
// each value byte-identical to the original slice.
void CheckProjection(std::string_view out, const std::vector<const Member*>& want) {
  rapidjson::Document d;
  ParseLenient(d, out);
  INFO("projection parse: " << rapidjson::GetParseError_En(d.GetParseError()) << " at " << d.GetErrorOffset());
  REQUIRE(!d.HasParseError());
  REQUIRE(d.IsObject());
  REQUIRE(d.MemberCount() == want.size());
  size_t i = 0;
  for (auto it = d.MemberBegin(); it != d.MemberEnd(); ++it, ++i)
    CHECK(std::string(it->name.GetString(), it->name.GetStringLength()) == want[i]->name);
  // Byte level: walk the text (whitespace tolerated between tokens).
  size_t p = SkipWs(out, 0);
  REQUIRE(p < out.size());
  REQUIRE(out[p] == '{');
  ++p;
  for (size_t m = 0; m < want.size(); ++m) {
    p = SkipWs(out, p);
    if (m > 0) {
      REQUIRE(out[p] == ',');
      p = SkipWs(out, p + 1);
    }
    REQUIRE(out[p] == '"');
    size_t q = p + 1;
    while (q < out.size() && out[q] != '"') q += out[q] == '\\' ? 2 : 1;
    REQUIRE(q < out.size());
    CHECK(Unescaped(out.substr(p + 1, q - p - 1)) == want[m]->name);
    p = SkipWs(out, q + 1);
    REQUIRE(out[p] == ':');
    p = SkipWs(out, p + 1);
    const std::string& v = want[m]->value;
    INFO("member " << m << " (" << want[m]->name << "), value of " << v.size() << " bytes");
    CHECK(out.compare(p, v.size(), v) == 0);
    p += v.size();
  }
  p = SkipWs(out, p);
  REQUIRE(p < out.size());
  CHECK(out[p] == '}');
  CHECK(SkipWs(out, p + 1) == out.size());
}

// Names to project: some of the document's, some absent, some alike.
std::vector<std::string> RandomNames(std::mt19937_64& rng, const GenDoc& doc) {
  std::vector<std::string> names;
  const double p[] = {0.0, 0.01, 0.1, 0.5, 1.0};
  const double keep = p[rng() % 5];
  std::uniform_real_distribution<double> u(0, 1);
  for (const auto& m : doc.members)
    if (u(rng) < keep) names.push_back(m.name);
  static const std::vector<std::string> kAbsent = {"zz-missing", "a ",   "f",     "f1x",    "caf",
                                                   "\\u00E9",    "AB c", "\"a\"", "score ", "createdat"};
  for (int i = rng() % 4; i > 0; --i) names.push_back(kAbsent[rng() % kAbsent.size()]);
  for (int i = rng() % 4; i > 0; --i) names.push_back(TrickyNames()[rng() % TrickyNames().size()]);
  if (names.empty()) names.push_back("zz-missing");
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

// The members a projection on `names` holds (body_format.h): a name's own
// key and the dotted keys whose first component is the name.
std::vector<const Member*> Selected(const GenDoc& doc, const std::vector<std::string>& names) {
  std::vector<const Member*> out;
  for (const auto& m : doc.members) {
    const std::string first = m.name.substr(0, m.name.find('.'));
    if (std::binary_search(names.begin(), names.end(), m.name) || std::binary_search(names.begin(), names.end(), first))
      out.push_back(&m);
  }
  return out;
}

// ---------------------------------------------------------------------------
// Reading a store's LMDB file directly (with the store closed), to see
// which encodings it chose.

struct RawDoc {
  std::string collection, id;
  uint64_t etag = 0;
  uint8_t flags = 0;  // the DocValue's, with a body kept apart's encoding in place of kFlagBodyApart
  std::string body;
  bool apart = false;  // the body is in "bodies" (format 3)
};
struct RawStore {
  uint32_t format = 0;
  bool has_dicts_db = false;
  std::map<uint32_t, std::pair<uint32_t, std::string>> dicts;  // id -> (collection number, bytes)
  std::map<std::string, uint32_t> collection_numbers;
  std::map<std::pair<std::string, std::string>, RawDoc> docs;  // (collection, id)
};

RawStore Inspect(const std::filesystem::path& dir) {
  RawStore out;
  testing::RawEnv raw(dir, false);
  MDB_txn* txn = raw.txn;
  auto open = [&](const char* name, MDB_dbi& dbi) { return mdb_dbi_open(txn, name, 0, &dbi) == 0; };
  auto str = [](const MDB_val& v) { return std::string(static_cast<const char*>(v.mv_data), v.mv_size); };
  MDB_dbi meta, colls, docs, dicts, bodies;
  REQUIRE(open("meta", meta));
  REQUIRE(open("collections", colls));
  REQUIRE(open("docs", docs));
  const bool has_bodies = open("bodies", bodies);
  MDB_val k{6, const_cast<char*>("format")}, v;
  REQUIRE(mdb_get(txn, meta, &k, &v) == 0);
  REQUIRE(v.mv_size == 4);
  out.format = uint32_t(fmt::GetLE(static_cast<const char*>(v.mv_data), 4));
  std::map<uint32_t, std::string> names;
  MDB_cursor* cur;
  REQUIRE(mdb_cursor_open(txn, colls, &cur) == 0);
  for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    const uint32_t n = fmt::GetBE32(static_cast<const char*>(k.mv_data));
    names[n] = str(v).substr(16);
    out.collection_numbers[names[n]] = n;
  }
  mdb_cursor_close(cur);
  REQUIRE(mdb_cursor_open(txn, docs, &cur) == 0);
  for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    const std::string key = str(k), value = str(v);
    fmt::DocView view;
    REQUIRE(fmt::DecodeDoc(value, view));
    RawDoc d;
    d.collection = names[fmt::GetBE32(key.data())];
    d.id = (view.flags & fmt::kFlagLongId) ? std::string(view.long_id) : key.substr(4);
    d.etag = view.etag;
    d.apart = view.flags & fmt::kFlagBodyApart;
    if (d.apart) {  // format 3: the body and its encoding, by etag
      REQUIRE(has_bodies);
      const std::string bk = fmt::BodyKey(view.etag);
      MDB_val bkv{bk.size(), const_cast<char*>(bk.data())}, bv;
      REQUIRE(mdb_get(txn, bodies, &bkv, &bv) == 0);
      REQUIRE(fmt::ApplyBodyEntry(std::string_view(static_cast<const char*>(bv.mv_data), bv.mv_size), view));
    }
    d.flags = view.flags;
    d.body = std::string(view.body);
    out.docs[{d.collection, d.id}] = d;
  }
  mdb_cursor_close(cur);
  if (open("dicts", dicts)) {
    out.has_dicts_db = true;
    REQUIRE(mdb_cursor_open(txn, dicts, &cur) == 0);
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
      out.dicts[fmt::GetBE32(static_cast<const char*>(k.mv_data))] = {fmt::GetBE32(static_cast<const char*>(v.mv_data)),
                                                                      str(v).substr(4)};
    mdb_cursor_close(cur);
  }
  return out;
}

uint64_t StructuredDictId(std::string_view stored) {
  size_t pos = 1;
  uint64_t id = 0;
  REQUIRE(ReadVarint(stored, pos, id));
  return id;
}

uint64_t DictBodyId(std::string_view stored) {
  size_t pos = 0;
  uint64_t id = 0;
  REQUIRE(ReadVarint(stored, pos, id));
  return id;
}

}  // namespace

// ===========================================================================
// 1. Round trips.

TEST_CASE("every JSON shape round-trips byte-exactly, with and without a dictionary", "[body]") {
  const TestDictionary& td = TrainedDictionary();
  const auto lookup = LookupOf({td.dict});
  std::mt19937_64 rng(1);
  const size_t kMin = body::kStructuredMinBytes;

  struct Shape {
    std::string name, text;
    bool object_json;         // a well-formed JSON object (structured when large)
    bool check_flags = true;  // false: only the round trip is required
  };
  std::vector<Shape> shapes;
  auto add = [&](std::string name, std::string text, bool object_json = true) {
    shapes.push_back(Shape{std::move(name), std::move(text), object_json});
  };
  // Small objects.
  add("empty object", "{}");
  add("empty object, whitespace", " \n\t{\r\n }\t\n ");
  add("one member", R"({"a":1})");
  add("whitespace everywhere", "  {  \"a\"  :\t[ 1 ,\n 2 , { \"b\" : null } ]  ,\r\n \"c\" :  \"d\"  }  \n");
  add("number edges",
      R"({"a":1.0,"b":-0,"c":1e400,"d":123456789012345678901234567890,"e":0.1,"f":-1.5e-7,"g":[1.0,-0,1e400],"h":0})");
  add("unicode keys", "{\"caf\\u00e9\":1,\"\\ud83d\\ude00\":2,\"日本\":3,\"é\":4,\"\\u00E9x\":5}");
  add("escaped quotes and backslashes", R"({"a\"b":"c\\d","\\":"\"","x\\\"y":"{[]}\"}{","\/":"\/","":""})");
  add("strings with JSON punctuation", R"({"s":"{\"a\":[1,2]}","t":"]]]}}}","u":",:,:","v":"\\\\\"\\"})");
  add("arrays and objects as top-level values", R"({"arr":[1,[2,[3]],{"x":[]}],"obj":{"y":{"z":{}}},"e":[]})");
  {
    std::string deep;
    for (int i = 0; i < 200; ++i) deep += i % 2 ? "[" : "{\"d\":";
    deep += "\"bottom\"";
    for (int i = 199; i >= 0; --i) deep += i % 2 ? "]" : "}";
    add("200 levels deep", "{\"deep\":" + deep + "}");
    add("200 levels deep, large", "{\"pad\":" + StringValue(rng, 20000) + ",\"deep\":" + deep + ",\"z\":1}");
  }
  add("2 KB document", SmallDoc(rng, 5000));
  // Large objects.
  add("1 MB string", "{\"s\":" + StringValue(rng, size_t{1} << 20) + "}");
  add("5 MB string among small members",
      "{\"a\":1,\"s\":" + StringValue(rng, size_t{5} << 20) + ",\"b\":[true,false],\"c\":\"}\"}");
  {
    std::string many = "{";
    for (int i = 0; i < 50000; ++i) many += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i % 7);
    add("50k small keys", many + "}");
  }
  {
    std::string ws = "\n\n  {";
    for (int i = 0; i < 2000; ++i)
      ws += std::string(i ? "\n\t ," : "") + " \"k" + std::to_string(i) + "\" \t:\r\n " +
            EdgeScalars()[i % EdgeScalars().size()] + " \n";
    add("whitespace everywhere, large", ws + "\n\t}\n\t  ");
  }
  {
    std::string u = "{";
    for (int i = 0; i < 600; ++i) {
      const std::string& n = TrickyNames()[i % TrickyNames().size()];
      u += std::string(i ? "," : "") + "\"" + Escape(n + std::to_string(i), &rng) +
           "\":" + (i % 3 ? StringValue(rng, 30) : EdgeScalars()[i % EdgeScalars().size()]);
    }
    add("unicode and escaped keys, large", u + "}");
  }
  {
    std::string nums = "{";
    for (int i = 0; i < 3000; ++i)
      nums += std::string(i ? "," : "") + "\"n" + std::to_string(i) + "\":" + EdgeScalars()[i % 9];
    add("number edges, large", nums + "}");
  }
  {
    std::string nested = "{";
    for (int i = 0; i < 300; ++i)
      nested += std::string(i ? "," : "") + "\"v" + std::to_string(i) + "\":" + Nested(rng, 5, i % 2);
    add("nested values with punctuation in strings, large", nested + "}");
  }
  for (size_t len : {body::kFrameBytes - 1, body::kFrameBytes, body::kFrameBytes + 1}) {
    const std::string v = StringValue(rng, len);
    const std::string tag = std::to_string(len);
    add("value of " + tag + " in the middle",
        "{\"a\":1,\"b\":\"x\",\"big\":" + v + ",\"c\":2,\"pad\":" + StringValue(rng, 14000) + "}");
    add("value of " + tag + " first", "{\"big\":" + v + ",\"pad\":" + StringValue(rng, 14000) + ",\"z\":0}");
    add("value of " + tag + " last", "{\"pad\":" + StringValue(rng, 14000) + ",\"a\":[],\"big\":" + v + "}");
    std::string several = "{";
    for (int i = 0; i < 8; ++i) several += std::string(i ? "," : "") + "\"s" + std::to_string(i) + "\":" + v;
    add("eight values of " + tag, several + "}");
    std::string packed = "{";  // small members adding up to about a frame, then a boundary
    for (int i = 0; i < 40; ++i)
      packed += std::string(i ? "," : "") + "\"p" + std::to_string(i) + "\":" + StringValue(rng, len / 8);
    add(Numbered("packed members of ", len / 8), packed + "}");
  }
  add("empty object padded with whitespace, large", "{" + std::string(20000, ' ') + "}");
  add("empty object with whitespace around, large", std::string(10000, '\n') + "{}" + std::string(10000, '\t'));
  for (size_t size : {kMin - 1, kMin, kMin + 1}) {
    const std::string prefix = "{\"a\":1,\"s\":";
    add(Numbered("object of ", size) + " bytes", prefix + StringValue(rng, size - prefix.size() - 1) + "}");
  }
  // Not objects (stored whole).
  add("empty text", "", false);
  add("array", "[1,2,3]", false);
  add("string", "\"just a string\"", false);
  add("number", "42", false);
  add("null", "null", false);
  {
    std::string arr = "[";
    for (int i = 0; i < 4000; ++i) arr += Numbered(i ? "," : "", i * 7919);
    add("large array", arr + "]", false);
  }
  add("large string", StringValue(rng, 20000), false);
  add("large number", std::string(20000, '7'), false);
  add("object then garbage", "{\"a\":" + StringValue(rng, 20000) + "} trailing", false);
  add("two objects", "{\"a\":" + StringValue(rng, 10000) + "}{\"b\":" + StringValue(rng, 10000) + "}", false);
  add("unterminated object", "{\"a\":" + StringValue(rng, 20000), false);
  add("unterminated string", "{\"a\":\"" + std::string(20000, 'x'), false);
  add("trailing comma", "{\"a\":" + StringValue(rng, 20000) + ",}", false);
  add("unclosed nesting", "{\"a\":" + std::string(20000, '['), false);
  add("key without value", "{\"a\":" + StringValue(rng, 20000) + ",\"b\"}", false);
  add("missing colon", "{\"a\" " + StringValue(rng, 20000) + "}", false);
  add("binary garbage", std::string(20000, '\x01') + "\xff\xfe{", false);
  // Text a validated body never is, where only the round trip is promised.
  shapes.push_back(Shape{"empty object then text", "{}" + std::string(20000, 'x'), false, false});
  shapes.push_back(Shape{"mismatched brackets", "{\"a\":[}" + std::string(20000, ' '), false, false});

  for (const Shape& shape : shapes) {
    for (const bool with_dict : {false, true}) {
      INFO("shape: " << shape.name << " (" << shape.text.size() << " bytes), dictionary: " << with_dict);
      const body::Dictionary* dict = with_dict ? td.dict.get() : nullptr;
      std::string stored;
      const uint8_t flags = body::Encode(shape.text, dict, 1, 1024, stored);
      std::string back;
      const Status st = body::DecodeWhole(flags, stored, lookup, back);
      INFO(st.ToString());
      REQUIRE(st.ok());
      CHECK_SAME(back, shape.text);
      // Whole reads of every kind agree.
      auto size = body::DecodedSize(flags, stored, {});
      REQUIRE(size.ok());
      CHECK(*size == shape.text.size());
      std::string fields_all;
      uint64_t reported = 0;
      REQUIRE(body::DecodeFields(flags, stored, lookup, {}, fields_all, &reported).ok());
      CHECK_SAME(fields_all, shape.text);
      CHECK(reported == *size);  // the size a read reports is DecodedSize's
      // The documented choice of encoding.
      if (!shape.check_flags) {
        INFO("flags " << int(flags));
        CHECK((flags & ~(fmt::kFlagStructured | fmt::kFlagZstd | fmt::kFlagDict)) == 0);
      } else if (shape.text.size() >= kMin && shape.object_json) {
        CHECK(flags == fmt::kFlagStructured);
        if (flags == fmt::kFlagStructured) {
          const auto entries = CheckLayout(shape.text, stored, with_dict ? &td : nullptr);
          if (shape.name.find("whitespace around") == std::string::npos &&
              shape.name.find("padded with whitespace") == std::string::npos)
            CheckDirectoryAgainstParser(shape.text, entries);
          else
            CHECK(entries.empty());
        }
      } else {
        CHECK((flags & fmt::kFlagStructured) == 0);
      }
      CHECK((flags & (fmt::kFlagDeleted | fmt::kFlagLongId)) == 0);
      if (!with_dict) CHECK((flags & fmt::kFlagDict) == 0);
      if ((flags & fmt::kFlagStructured) == 0) {
        // A body stored whole is projected whole.
        const std::vector<std::string> names = {"a", "s", "zz"};
        std::string projected;
        REQUIRE(body::DecodeFields(flags, stored, lookup, names, projected).ok());
        CHECK_SAME(projected, shape.text);
        auto bound = body::DecodedSize(flags, stored, names);
        REQUIRE(bound.ok());
        CHECK(*bound == shape.text.size());
      }
      if (flags == 0) CHECK(stored == shape.text);
    }
  }

  // A 2 KB document: with its collection's dictionary, kFlagDict and
  // smaller than zstd alone.
  const std::string small = SmallDoc(rng, 6000);
  std::string plain, with;
  CHECK(body::Encode(small, nullptr, 1, 1024, plain) == fmt::kFlagZstd);
  CHECK(body::Encode(small, td.dict.get(), 1, 1024, with) == fmt::kFlagDict);
  CHECK(DictBodyId(with) == 7);
  CHECK(with.size() < plain.size());
  // Tiny bodies stay raw even with a dictionary; mid-size ones (under the
  // store's compress threshold) are compressed with one.
  std::string tiny;
  CHECK(body::Encode(R"({"a":1})", td.dict.get(), 1, 1024, tiny) == 0);
  const std::string mid = small.substr(0, 400) + "\"}";
  std::string mid_out;
  const uint8_t mid_flags = body::Encode(mid, td.dict.get(), 1, 1024, mid_out);
  CHECK((mid_flags == fmt::kFlagDict || mid_flags == 0));
}

// ===========================================================================
// 2 and 3. Projections and DecodedSize.

TEST_CASE("DecodeFields projects random large documents exactly; DecodedSize bounds it", "[body][heavy]") {
  const TestDictionary& td = TrainedDictionary();
  const auto lookup = LookupOf({td.dict});
  std::mt19937_64 rng(20261204);
  int structured = 0, whole = 0, projections = 0;
  for (int doc_no = 0; doc_no < 40; ++doc_no) {
    const GenDoc doc = RandomDoc(rng, doc_no % 8 == 7);
    const bool with_dict = doc_no % 2 == 1;
    INFO("document " << doc_no << ": " << doc.members.size() << " members, " << doc.text.size()
                     << " bytes, dictionary: " << with_dict);
    std::string stored;
    const uint8_t flags = body::Encode(doc.text, with_dict ? td.dict.get() : nullptr, 1, 1024, stored);
    std::string back;
    REQUIRE(body::DecodeWhole(flags, stored, lookup, back).ok());
    CHECK_SAME(back, doc.text);
    auto whole_size = body::DecodedSize(flags, stored, {});
    REQUIRE(whole_size.ok());
    CHECK(*whole_size == doc.text.size());
    if (doc.text.size() >= body::kStructuredMinBytes) {
      ++structured;
      REQUIRE(flags == fmt::kFlagStructured);
      // The directory holds exactly the generator's members.
      const auto entries = CheckLayout(doc.text, stored, with_dict ? &td : nullptr);
      REQUIRE(entries.size() == doc.members.size());
      for (size_t i = 0; i < entries.size(); ++i) {
        INFO("member " << i);
        CHECK(entries[i].key == doc.members[i].raw_key);
        CHECK(doc.text.compare(entries[i].begin, entries[i].end - entries[i].begin, doc.members[i].value) == 0);
      }
    } else {
      ++whole;
    }
    for (int round = 0; round < 6; ++round) {
      const std::vector<std::string> names = RandomNames(rng, doc);
      INFO("round " << round << ": " << names.size() << " names");
      std::string out;
      uint64_t reported = 0;
      const Status st = body::DecodeFields(flags, stored, lookup, names, out, &reported);
      INFO(st.ToString());
      REQUIRE(st.ok());
      auto bound = body::DecodedSize(flags, stored, names);
      REQUIRE(bound.ok());
      CHECK(*bound >= out.size());
      CHECK(reported == *bound);  // the size a read reports is DecodedSize's
      if (flags & fmt::kFlagStructured) {
        CheckProjection(out, Selected(doc, names));
        ++projections;
      } else {
        CHECK_SAME(out, doc.text);  // a whole body comes whole
        CHECK(*bound == doc.text.size());
      }
    }
    // Every member alone, for a few documents: each name finds its value,
    // including the escaped ones, and only it ("a" never selects "ab").
    if (doc_no < 4 && (flags & fmt::kFlagStructured)) {
      for (size_t i = 0; i < doc.members.size(); i += 1 + doc.members.size() / 200) {
        const std::vector<std::string> one = {doc.members[i].name};
        std::string out;
        REQUIRE(body::DecodeFields(flags, stored, lookup, one, out).ok());
        CheckProjection(out, {&doc.members[i]});
        auto bound = body::DecodedSize(flags, stored, one);
        REQUIRE(bound.ok());
        CHECK(*bound >= out.size());
      }
    }
  }
  CHECK(structured >= 30);
  CHECK(whole >= 5);
  CHECK(projections >= 180);
}

TEST_CASE("names that match only after unescaping, and look-alike prefixes", "[body]") {
  const auto lookup = LookupOf({});
  std::mt19937_64 rng(3);
  std::vector<Member> members = {
      {"caf\\u00e9", "café", "1"},
      {"\\ud83d\\ude00", "😀", "2"},
      {"a\\\"b", "a\"b", "3"},
      {"\\\\u00e9", "\\u00e9", "4"},  // an escaped backslash: the name is the literal text \u00e9
      {"a", "a", "5"},
      {"ab", "ab", "6"},
      {"\\u0061bc", "abc", "7"},
      {"sl\\/ash", "sl/ash", "8"},
      {"t\\tab", "t\tab", "9"},
      {"", "", "10"},
      {"a.b", "a.b", "11"},  // dotted keys: a reader of "a" may be reading a.b through them
      {"a\\u002eb.c", "a.b.c", "12"},
      {"ab.c", "ab.c", "13"},
      {".a", ".a", "14"},
      {"pad", "pad", StringValue(rng, 20000)},
  };
  const GenDoc doc = Assemble(rng, members, false);
  std::string stored;
  REQUIRE(body::Encode(doc.text, nullptr, 1, 1024, stored) == fmt::kFlagStructured);
  auto project = [&](std::vector<std::string> names) {
    std::sort(names.begin(), names.end());
    std::string out;
    REQUIRE(body::DecodeFields(fmt::kFlagStructured, stored, lookup, names, out).ok());
    auto bound = body::DecodedSize(fmt::kFlagStructured, stored, names);
    REQUIRE(bound.ok());
    CHECK(*bound >= out.size());
    return out;
  };
  auto expect = [&](std::vector<std::string> names) {
    std::sort(names.begin(), names.end());
    INFO("names: " << names.size());
    CheckProjection(project(names), Selected(doc, names));
  };
  expect({"café"});
  expect({"😀"});
  expect({"a\"b"});
  expect({"\\u00e9"});
  expect({"é"});  // matches nothing: the key \\u00e9 is a backslash and text
  // Dotted keys, spelled out rather than through Selected (which states the
  // same rule as the code): a reader of "a" gets a, a.b and the escaped
  // a.b.c, not ab.c nor .a; a reader of "a.b" only that key; a reader of ""
  // the empty key and .a.
  auto expect_exactly = [&](std::vector<std::string> names, const std::vector<std::string>& keys) {
    std::sort(names.begin(), names.end());
    std::vector<const Member*> want;
    for (const auto& m : doc.members)
      if (std::find(keys.begin(), keys.end(), m.name) != keys.end()) want.push_back(&m);
    REQUIRE(want.size() == keys.size());
    INFO("names: " << names.size());
    CheckProjection(project(names), want);
  };
  expect_exactly({"a"}, {"a", "a.b", "a.b.c"});
  expect_exactly({"a.b"}, {"a.b"});
  expect_exactly({""}, {"", ".a"});
  expect_exactly({"ab"}, {"ab", "ab.c"});
  expect({"ab"});
  expect({"abc"});
  expect({"a", "abc"});
  expect({"sl/ash", "t\tab"});
  expect({""});
  expect({"caf", "cafe", "ab ", "A"});
  expect({"café", "😀", "a\"b", "\\u00e9", "a", "ab", "abc", "sl/ash", "t\tab", "", "pad"});
}

TEST_CASE("a head answers a projection exactly as its body does, or declines; a damaged one is Corruption",
          "[body][heavy]") {
  const TestDictionary& td = TrainedDictionary();
  const auto lookup = LookupOf({td.dict});
  std::mt19937_64 rng(20261207);
  int heads = 0, answered = 0, declined = 0;
  // The names of `doc`'s first members (the head's, when they are small),
  // and now and then one more member's or a dotted spelling.
  auto leading = [&](const GenDoc& doc) {
    std::vector<std::string> names;
    const size_t n = 1 + rng() % 3;
    for (size_t i = 0; i < n && i < doc.members.size(); ++i) names.push_back(doc.members[i].name);
    if (rng() % 4 == 0) names.push_back(doc.members[rng() % doc.members.size()].name);
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
  };
  for (int doc_no = 0; doc_no < 60; ++doc_no) {
    GenDoc doc = RandomDoc(rng);
    if (doc_no % 3 == 0) {  // leading members small, so the head holds several
      std::vector<Member> members = doc.members;
      for (size_t i = 0; i < 6 && i < members.size(); ++i) members[i].value = std::to_string(rng() % 1000);
      doc = Assemble(rng, members, doc_no % 2 == 0);
    }
    INFO("document " << doc_no << ": " << doc.members.size() << " members, " << doc.text.size() << " bytes");
    std::string stored, head;
    const uint8_t flags = body::Encode(doc.text, doc_no % 2 ? td.dict.get() : nullptr, 1, 1024, stored, &head);
    CHECK(head == body::HeadOf(doc.text));  // what verify recomputes, without compressing
    if (!(flags & fmt::kFlagStructured)) {
      CHECK(head.empty());
      continue;
    }
    if (head.empty()) continue;
    ++heads;
    CHECK(head.size() <= body::kHeadMaxBytes);
    for (int round = 0; round < 12; ++round) {
      const std::vector<std::string> names = round % 2 ? RandomNames(rng, doc) : leading(doc);
      INFO("round " << round << ": " << names.size() << " names");
      std::string from_head, from_body;
      auto a = body::HeadFields(head, names, from_head);
      REQUIRE(a.ok());
      REQUIRE(body::DecodeFields(flags, stored, lookup, names, from_body).ok());
      if (*a) {
        CHECK_SAME(from_head, from_body);
        ++answered;
      } else {
        ++declined;
      }
    }
  }
  CHECK(heads >= 25);
  CHECK(answered >= 100);
  CHECK(declined >= 100);

  // Dotted keys after the head: a reader of "a" wants them, so the head
  // declines; a reader of "b" it answers.
  std::vector<Member> members = {{"a", "a", "1"}, {"b", "b", "2"}, {"a\u002ex", "a.x", "3"}};
  members.insert(members.begin() + 2, Member{"pad", "pad", StringValue(rng, 20000)});
  const GenDoc dotted = Assemble(rng, members, false);
  const std::string head = body::HeadOf(dotted.text);
  REQUIRE_FALSE(head.empty());
  std::string out;
  auto a = body::HeadFields(head, std::vector<std::string>{"a"}, out);
  REQUIRE(a.ok());
  CHECK_FALSE(*a);
  a = body::HeadFields(head, std::vector<std::string>{"b"}, out);
  REQUIRE(a.ok());
  CHECK(*a);
  CHECK(out == R"({"b":2})");
  a = body::HeadFields(head, std::vector<std::string>{"a.x"}, out);  // a key after the head
  REQUIRE(a.ok());
  CHECK_FALSE(*a);

  // Every flipped byte and every truncation is Corruption.
  for (size_t i = 0; i < head.size(); ++i) {
    std::string bad = head;
    bad[i] ^= static_cast<char>(1 + rng() % 255);
    CHECK(body::HeadFields(bad, std::vector<std::string>{"b"}, out).status().code() == StatusCode::kCorruption);
    CHECK(body::HeadFields(head.substr(0, i), std::vector<std::string>{"b"}, out).status().code() ==
          StatusCode::kCorruption);
  }
}

// ===========================================================================
// 4. Corruption and truncation.

namespace {

struct Encoded {
  std::string name;
  uint8_t flags;
  std::string stored;
  std::string text;
};

std::vector<Encoded> CorruptionSubjects(const TestDictionary& td) {
  std::mt19937_64 rng(4);
  std::vector<Member> members;
  for (int i = 0; i < 200; ++i) {
    Member m;
    m.name = Numbered("m", i);
    m.raw_key = m.name;
    m.value =
        i == 50 ? StringValue(rng, 6000) : (i % 4 == 0 ? Nested(rng, 3, false) : StringValue(rng, 10 + rng() % 200));
    members.push_back(std::move(m));
  }
  const std::string large = Assemble(rng, members, false).text;
  const std::string small = SmallDoc(rng, 1);
  std::vector<Encoded> out;
  auto add = [&](std::string name, const std::string& text, const body::Dictionary* dict, uint8_t want) {
    Encoded e{std::move(name), 0, {}, text};
    e.flags = body::Encode(text, dict, 1, 1024, e.stored);
    REQUIRE(e.flags == want);
    out.push_back(std::move(e));
  };
  add("structured", large, nullptr, fmt::kFlagStructured);
  add("structured with dictionary", large, td.dict.get(), fmt::kFlagStructured);
  add("zstd", small, nullptr, fmt::kFlagZstd);
  add("dictionary", small, td.dict.get(), fmt::kFlagDict);
  return out;
}

}  // namespace

TEST_CASE("a flipped byte in a structured header is Corruption; in a frame, an error or the exact text", "[body][heavy]") {
  const TestDictionary& td = TrainedDictionary();
  const auto lookup = LookupOf({td.dict});
  const std::vector<std::string> names = {"m10", "m100", "m150", "m199", "m50"};
  for (const Encoded& e : CorruptionSubjects(td)) {
    INFO("encoding: " << e.name << ", " << e.stored.size() << " stored bytes");
    std::string good_fields;
    REQUIRE(body::DecodeFields(e.flags, e.stored, lookup, names, good_fields).ok());
    size_t header = 0;
    if (e.flags == fmt::kFlagStructured) {
      Layout l;
      ReadLayout(e.stored, td.bytes, l);
      header = l.header_bytes;
    }
    size_t silent_same = 0, detected = 0;
    for (size_t pos = 0; pos < e.stored.size(); ++pos) {
      for (const uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xFF}}) {
        std::string bad = e.stored;
        bad[pos] = char(bad[pos] ^ mask);
        INFO("byte " << pos << " ^ " << int(mask) << (pos < header ? " (header)" : " (frames)"));
        std::string out;
        const Status whole = body::DecodeWhole(e.flags, bad, lookup, out);
        std::string fields_out;
        const Status fields = body::DecodeFields(e.flags, bad, lookup, names, fields_out);
        if (pos < header) {
          // The header is checksummed: every flip is caught by every reader.
          // DecodedSize, an estimate that leaves the checksum to the read
          // after it, stays within the bytes (an answer or Corruption).
          CHECK(whole.code() == StatusCode::kCorruption);
          CHECK(fields.code() == StatusCode::kCorruption);
          for (const auto& size : {body::DecodedSize(e.flags, bad, names), body::DecodedSize(e.flags, bad, {})})
            CHECK((size.ok() || size.status().code() == StatusCode::kCorruption));
          continue;
        }
        // A frame: zstd's content checksum catches a change of the text;
        // what decodes must be exactly the text.
        if (whole.ok()) {
          ++silent_same;
          CHECK_SAME(out, e.text);
        } else {
          ++detected;
          CHECK(whole.code() == StatusCode::kCorruption);
        }
        if (fields.ok()) CHECK_SAME(fields_out, good_fields);
        (void)body::DecodedSize(e.flags, bad, names);  // no decompression: may not notice; must not crash
      }
    }
    INFO("frame flips detected: " << detected << ", harmless: " << silent_same);
    CHECK(detected > 0);
  }
}

TEST_CASE("a body truncated at any length is an error, never a crash", "[body]") {
  const TestDictionary& td = TrainedDictionary();
  const auto lookup = LookupOf({td.dict});
  const std::vector<std::string> names = {"m0", "m199", "m50"};
  for (const Encoded& e : CorruptionSubjects(td)) {
    INFO("encoding: " << e.name << ", " << e.stored.size() << " stored bytes");
    std::vector<size_t> lengths;
    for (size_t n = 0; n < std::min<size_t>(200, e.stored.size()); ++n) lengths.push_back(n);
    for (size_t back = 1; back <= 8; ++back) lengths.push_back(e.stored.size() - back);
    lengths.push_back(e.stored.size() / 2);
    for (size_t n : lengths) {
      INFO("truncated to " << n);
      const std::string_view cut = std::string_view(e.stored).substr(0, n);
      std::string out;
      CHECK(!body::DecodeWhole(e.flags, cut, lookup, out).ok());
      CHECK(!body::DecodeFields(e.flags, cut, lookup, names, out).ok());
      // DecodedSize reads headers only (and not the checksum): it must
      // stay within the bytes; the decoders above catch the cut.
      for (const auto& size : {body::DecodedSize(e.flags, cut, names), body::DecodedSize(e.flags, cut, {})})
        CHECK((size.ok() || size.status().code() == StatusCode::kCorruption));
    }
  }
}

TEST_CASE("a body naming an unknown dictionary is Corruption", "[body]") {
  const TestDictionary& td = TrainedDictionary();
  std::mt19937_64 rng(5);
  const std::string small = SmallDoc(rng, 2);
  const std::string large = "{\"a\":1,\"big\":" + StringValue(rng, 30000) + ",\"b\":2}";
  for (const std::string* text : {&small, &large}) {
    std::string stored;
    const uint8_t flags = body::Encode(*text, td.dict.get(), 1, 1024, stored);
    REQUIRE((flags == fmt::kFlagDict || flags == fmt::kFlagStructured));
    INFO("flags " << int(flags));
    std::string out;
    // No dictionary at all, one that is not it, and no lookup.
    const auto other = body::Dictionary::Load(8, td.bytes, 1);
    for (const body::DictionaryLookup& lookup : {LookupOf({}), LookupOf({other}), body::DictionaryLookup{}}) {
      CHECK(body::DecodeWhole(flags, stored, lookup, out).code() == StatusCode::kCorruption);
      CHECK(body::DecodeFields(flags, stored, lookup, std::vector<std::string>{"a", "b"}, out).code() ==
            StatusCode::kCorruption);
    }
    REQUIRE(body::DecodeWhole(flags, stored, LookupOf({td.dict}), out).ok());
    CHECK_SAME(out, *text);
  }
}

// ===========================================================================
// 5. The store: trained dictionaries, projections, reopening.

namespace {

// A ~300 KB document with "score" before its blob and "createdAt" after it
// (or without "score").
GenDoc LargeStoreDoc(std::mt19937_64& rng, int i, bool with_score) {
  std::vector<Member> m;
  auto add = [&](std::string name, std::string value) { m.push_back(Member{Escape(name), name, std::move(value)}); };
  add("id", "\"L" + std::to_string(i) + "\"");
  add("kind", "\"large\"");
  if (with_score) add("score", std::to_string(1000 + i) + ".50");
  add("meta", Nested(rng, 4, false));
  for (int k = 0; k < 40; ++k) add(Numbered("f", k), EdgeScalars()[rng() % EdgeScalars().size()]);
  add("blob", StringValue(rng, size_t{300} << 10));
  add("createdAt", "\"2024-06-" + std::to_string(10 + i % 20) + "T00:00:00Z\"");
  add("scores", "[1,2,3]");  // a look-alike of "score"
  add("tail", Nested(rng, 3, false));
  return Assemble(rng, std::move(m), false);
}

const std::vector<std::string> kProjected = {"createdAt", "score"};  // sorted

}  // namespace

TEST_CASE("the store trains a dictionary, projects large documents and reads back exactly after reopening",
          "[body][storage]") {
  TempDir dir;
  std::mt19937_64 rng(55);
  std::map<std::string, std::string> truth;  // id -> body (collection "orders")
  std::map<std::string, GenDoc> large;       // id -> generated large document
  std::vector<std::string> small_docs;
  for (int i = 0; i < 2500; ++i) small_docs.push_back(SmallDoc(rng, i));
  auto small_id = [](int i) {
    char b[16];
    std::snprintf(b, sizeof b, "s%04d", i);
    return std::string(b);
  };
  auto large_put = [&](std::vector<WriteOp>& ops, int i, bool with_score) {
    GenDoc d = LargeStoreDoc(rng, i, with_score);
    const std::string id = Numbered("L", i);
    ops.push_back(Put("orders", id, d.text));
    truth[id] = d.text;
    large[id] = std::move(d);
  };
  {
    auto store = OpenStore(dir.path);
    for (int b = 0; b < 25; ++b) {
      std::vector<WriteOp> ops;
      for (int i = b * 100; i < b * 100 + 100; ++i) {
        ops.push_back(Put("orders", small_id(i), small_docs[i]));
        truth[small_id(i)] = small_docs[i];
      }
      if (b == 0) large_put(ops, 0, true);  // before the collection has a dictionary
      if (b == 5) large_put(ops, 1, false);
      if (b == 20) {
        for (int t = 0; t < 10; ++t) {
          const std::string body = "{\"score\":" + std::to_string(t) + ",\"createdAt\":\"x\",\"t\":true}";
          ops.push_back(Put("orders", Numbered("tiny", t), body));
          truth[Numbered("tiny", t)] = body;
        }
      }
      if (b == 24) {
        large_put(ops, 3, true);
        large_put(ops, 4, true);
      }
      REQUIRE(Bulk(*store, std::move(ops)).status.ok());
    }
    REQUIRE(Single(*store, Del("orders", small_id(5))).status.ok());
    REQUIRE(Single(*store, Del("orders", small_id(2000))).status.ok());
    truth.erase(small_id(5));
    truth.erase(small_id(2000));
    REQUIRE(Single(*store, Put("orders", small_id(10), small_docs[11])).status.ok());  // rewritten after training
    truth[small_id(10)] = small_docs[11];
    for (const auto& [id, body] : truth) {
      auto doc = store->Get("orders", id);
      REQUIRE(doc.ok());
      CHECK_SAME(doc->body, body);
    }
  }

  // What was stored, read from LMDB directly.
  RawStore raw = Inspect(dir.path);
  CHECK(raw.format == fmt::kFormatVersion);
  REQUIRE(raw.dicts.size() == 1);
  const uint32_t dict_id = raw.dicts.begin()->first;
  CHECK(raw.dicts.begin()->second.first == raw.collection_numbers.at("orders"));
  CHECK(raw.dicts.begin()->second.second.size() <= (size_t{64} << 10));
  size_t dict_bodies = 0;
  uint64_t dict_bytes_sum = 0;
  for (int i = 0; i < 2500; ++i) {
    const auto it = raw.docs.find({"orders", small_id(i)});
    REQUIRE(it != raw.docs.end());
    const RawDoc& d = it->second;
    INFO("doc " << d.id << " flags " << int(d.flags));
    if (i == 5 || i == 2000) {
      CHECK(d.flags == fmt::kFlagDeleted);
      continue;
    }
    if (i < 100 && i != 10) CHECK(d.flags == fmt::kFlagZstd);  // written before there was a dictionary
    if (i >= 1500 || i == 10) {
      CHECK(d.flags == fmt::kFlagDict);
      if (d.flags == fmt::kFlagDict) CHECK(DictBodyId(d.body) == dict_id);
    }
    if (d.flags == fmt::kFlagDict) ++dict_bodies;
    if (i >= 1500) dict_bytes_sum += d.body.size();
  }
  CHECK(dict_bodies >= 1400);
  for (int t = 0; t < 10; ++t) CHECK(raw.docs.at({"orders", Numbered("tiny", t)}).flags == 0);
  CHECK(raw.docs.at({"orders", "L0"}).flags == fmt::kFlagStructured);
  CHECK(StructuredDictId(raw.docs.at({"orders", "L0"}).body) == 0);
  for (const char* id : {"L3", "L4"}) {
    const RawDoc& d = raw.docs.at({"orders", id});
    CHECK(d.flags == fmt::kFlagStructured);
    CHECK(StructuredDictId(d.body) == dict_id);
  }

  // The same small documents without a dictionary (one bulk into a new
  // collection: nothing is sampled) take markedly more room.
  {
    TempDir plain_dir;
    {
      auto plain = OpenStore(plain_dir.path);
      std::vector<WriteOp> ops;
      for (int i = 0; i < 2500; ++i) ops.push_back(Put("orders", small_id(i), small_docs[i]));
      REQUIRE(Bulk(*plain, std::move(ops)).status.ok());
    }
    RawStore p = Inspect(plain_dir.path);
    CHECK(p.dicts.empty());
    uint64_t plain_sum = 0;
    for (int i = 1500; i < 2500; ++i) {
      if (i == 2000) continue;
      plain_sum += p.docs.at({"orders", small_id(i)}).body.size();
      CHECK(p.docs.at({"orders", small_id(i)}).flags == fmt::kFlagZstd);
    }
    INFO("bodies 1500..2499: " << dict_bytes_sum << " bytes with the dictionary, " << plain_sum << " without");
    CHECK(dict_bytes_sum * 10 < plain_sum * 8);  // at least 20% smaller (35% when written)
    const auto size_a = std::filesystem::file_size(dir.path / "data.mdb");
    const auto size_b = std::filesystem::file_size(plain_dir.path / "data.mdb");
    INFO("data.mdb: " << size_a << " (with dictionary, and 4 large documents) vs " << size_b);
    SUCCEED();
  }

  // The documented byte accounting of a projected batch, from the stored bodies.
  auto decoded_size = [&](const std::string& id, std::span<const std::string> fields) {
    const RawDoc& d = raw.docs.at({"orders", id});
    if (d.flags & fmt::kFlagDeleted) return uint64_t{0};
    auto n = body::DecodedSize(d.flags, d.body, fields);
    REQUIRE(n.ok());
    return *n;
  };

  for (int reopen = 0; reopen < 2; ++reopen) {
    INFO("after reopening " << reopen + 1 << " time(s)");
    auto store = OpenStore(dir.path);
    for (const auto& [id, body] : truth) {
      auto doc = store->Get("orders", id);
      INFO("Get " << id << ": " << doc.status().ToString());
      REQUIRE(doc.ok());
      CHECK_SAME(doc->body, body);
      CHECK(doc->etag == raw.docs.at({"orders", id}).etag);
    }
    CHECK(store->Get("orders", small_id(5)).status().code() == StatusCode::kNotFound);
    const auto info = store->Collection("orders");
    REQUIRE(info);
    CHECK(info->count == truth.size());
    CHECK(info->tombstones == 2);

    {  // (batches pin a read snapshot: gone before the store closes)
      // Projected: large documents carry only the fields; small ones whole.
      auto batch = store->ReadChangeBatch("orders", 0, 100000, size_t{1} << 34, kProjected);
      REQUIRE(batch.ok());
      const auto changes = (*batch)->changes();
      CHECK((*batch)->complete());
      REQUIRE(changes.size() == truth.size() + 2);
      size_t projected = 0;
      std::vector<std::string> ids;
      for (const DocChange& c : changes) {
        const std::string id(c.id);
        ids.push_back(id);
        INFO("change " << c.etag << " " << id);
        if (c.deleted) {
          CHECK(c.json.empty());
          continue;
        }
        if (large.count(id)) {
          CheckProjection(c.json, Selected(large.at(id), kProjected));
          ++projected;
        } else {
          CHECK_SAME(c.json, truth.at(id));
        }
      }
      CHECK(projected == large.size());
      // Unprojected: everything whole.
      auto full = store->ReadChangeBatch("orders", 0, 100000, size_t{1} << 34);
      REQUIRE(full.ok());
      for (const DocChange& c : (*full)->changes())
        if (!c.deleted) CHECK_SAME(c.json, truth.at(std::string(c.id)));

      // The byte limit cuts an etag prefix, the change that reaches it last,
      // counted by DecodedSize of what is read.
      std::vector<uint64_t> sizes;
      for (const auto& id : ids) sizes.push_back(decoded_size(id, kProjected));
      for (const size_t max_bytes : {size_t{1}, size_t{5000}, size_t{100000}, size_t{1} << 20, size_t{2500000}}) {
        size_t keep = 0;
        uint64_t bytes = 0;
        for (; keep < sizes.size(); ++keep) {
          if (keep > 0 && bytes >= max_bytes) break;
          bytes += sizes[keep];
        }
        auto cut = store->ReadChangeBatch("orders", 0, 100000, max_bytes, kProjected);
        REQUIRE(cut.ok());
        INFO("max_bytes " << max_bytes);
        const auto got = (*cut)->changes();
        CHECK(got.size() == keep);
        CHECK((*cut)->complete() == (keep == sizes.size()));
        for (size_t i = 0; i < std::min(got.size(), changes.size()); ++i) {
          CHECK(got[i].etag == changes[i].etag);
          CHECK(got[i].json == changes[i].json);
        }
      }
    }

    if (reopen == 0) {
      // Written after reopening: the stored dictionary is used again.
      std::vector<WriteOp> ops;
      for (int i = 2500; i < 2510; ++i) {
        std::string body = SmallDoc(rng, i);
        ops.push_back(Put("orders", small_id(i), body));
        truth[small_id(i)] = body;
      }
      large_put(ops, 5, true);
      REQUIRE(Bulk(*store, std::move(ops)).status.ok());
      store.reset();
      raw = Inspect(dir.path);
      CHECK(raw.dicts.size() == 1);
      for (int i = 2500; i < 2510; ++i) {
        const RawDoc& d = raw.docs.at({"orders", small_id(i)});
        CHECK(d.flags == fmt::kFlagDict);
        if (d.flags == fmt::kFlagDict) CHECK(DictBodyId(d.body) == dict_id);
      }
      CHECK(raw.docs.at({"orders", "L5"}).flags == fmt::kFlagStructured);
      CHECK(StructuredDictId(raw.docs.at({"orders", "L5"}).body) == dict_id);
    }
  }
}

// ===========================================================================
// 6. A store written by the previous build (format 1).

namespace {

std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct ExpectedDoc {
  std::string collection, id;
  uint64_t etag = 0;
  bool deleted = false;
  std::optional<std::string> body;  // exact, or:
  uint64_t body_size = 0;
  uint64_t body_hash = 0;
  std::string body_head;
};

struct ExpectedStore {
  uint64_t last_etag = 0;
  std::vector<CollectionInfo> collections;
  std::vector<ExpectedDoc> docs;  // in change-feed (etag) order
};

ExpectedStore LoadExpected(const std::filesystem::path& file) {
  const std::string text = ReadFile(file);
  rapidjson::Document d;
  d.Parse(text.data(), text.size());
  REQUIRE(!d.HasParseError());
  ExpectedStore e;
  REQUIRE(d["formatVersion"].GetInt() == 1);
  e.last_etag = d["lastEtag"].GetUint64();
  for (const auto& c : d["collections"].GetArray())
    e.collections.push_back(CollectionInfo{c["name"].GetString(), c["count"].GetUint64(), c["tombstones"].GetUint64()});
  for (const auto& x : d["docs"].GetArray()) {
    ExpectedDoc doc;
    doc.collection = x["collection"].GetString();
    doc.id = std::string(x["id"].GetString(), x["id"].GetStringLength());
    doc.etag = x["etag"].GetUint64();
    doc.deleted = x["deleted"].GetBool();
    if (x.HasMember("body")) {
      doc.body = std::string(x["body"].GetString(), x["body"].GetStringLength());
    } else if (!doc.deleted) {
      doc.body_size = x["bodySize"].GetUint64();
      doc.body_hash = std::stoull(x["bodyFnv1a64"].GetString(), nullptr, 16);
      doc.body_head = x["bodyHead"].GetString();
    }
    e.docs.push_back(std::move(doc));
  }
  return e;
}

void CheckBody(std::string_view got, const ExpectedDoc& want) {
  if (want.body) {
    CHECK_SAME(got, *want.body);
  } else {
    CHECK(got.size() == want.body_size);
    CHECK(Fnv1a64(got) == want.body_hash);
    CHECK(got.substr(0, want.body_head.size()) == want.body_head);
  }
}

// Every document of the fixture reads back as expected.json says (exact
// body and etag; tombstones NotFound), except those in `replaced`
// (rewritten or deleted since).
void CheckOldStore(DocumentStore& store, const ExpectedStore& e, const std::map<std::string, std::string>& replaced) {
  for (const ExpectedDoc& d : e.docs) {
    if (replaced.count(d.collection + "/" + d.id)) continue;
    INFO(d.collection << "/" << d.id.substr(0, 40) << " (" << d.id.size() << " bytes), etag " << d.etag);
    auto got = store.Get(d.collection, d.id);
    if (d.deleted) {
      CHECK(got.status().code() == StatusCode::kNotFound);
      continue;
    }
    INFO(got.status().ToString());
    REQUIRE(got.ok());
    CHECK(got->etag == d.etag);
    CheckBody(got->body, d);
  }
}

}  // namespace

TEST_CASE("a store written by the format-1 build opens, reads back identically and takes new bodies",
          "[body][storage][fixture]") {
  const std::filesystem::path fixture = std::filesystem::path(CORVID_FIXTURES_DIR) / "store-v1";
  const ExpectedStore expected = LoadExpected(fixture / "expected.json");
  TempDir dir;
  std::filesystem::create_directories(dir.path);
  std::filesystem::copy_file(fixture / "data.mdb", dir.path / "data.mdb");
  std::filesystem::permissions(dir.path / "data.mdb", std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::add);

  // The fixture is what it claims: format 1, no dictionaries, and every
  // old encoding present.
  const RawStore before = Inspect(dir.path);
  CHECK(before.format == 1);
  CHECK(before.dicts.empty());
  std::set<uint8_t> encodings;
  for (const auto& [key, d] : before.docs) encodings.insert(d.flags);
  CHECK(encodings.count(0));
  CHECK(encodings.count(fmt::kFlagZstd));
  CHECK(encodings.count(fmt::kFlagLongId));
  CHECK(encodings.count(fmt::kFlagDeleted));
  CHECK(encodings.count(fmt::kFlagDeleted | fmt::kFlagLongId));
  for (const auto& [key, d] : before.docs) CHECK((d.flags & (fmt::kFlagDict | fmt::kFlagStructured)) == 0);
  CHECK(before.docs.size() == expected.docs.size());

  std::map<std::string, std::string> replaced;  // "coll/id" -> new body
  std::map<std::string, std::string> fresh;     // "coll/id" -> body of documents new since
  std::mt19937_64 rng(66);
  GenDoc large_new;
  auto check_all = [&](DocumentStore& store) {
    CheckOldStore(store, expected, replaced);
    for (const auto* m : {&replaced, &fresh})
      for (const auto& [key, body] : *m) {
        const size_t slash = key.find('/');
        auto got = store.Get(key.substr(0, slash), key.substr(slash + 1));
        INFO(key << ": " << got.status().ToString());
        if (body.empty()) {
          CHECK(got.status().code() == StatusCode::kNotFound);
          continue;
        }
        REQUIRE(got.ok());
        CHECK_SAME(got->body, body);
      }
  };

  {
    auto store = OpenStore(dir.path);
    CHECK(store->LastEtag() == expected.last_etag);
    CheckOldStore(*store, expected, replaced);
    // The change feed, whole and per collection.
    auto feed = store->ChangesSince(0, 100000);
    REQUIRE(feed.ok());
    REQUIRE(feed->size() == expected.docs.size());
    for (size_t i = 0; i < feed->size(); ++i) {
      const Change& c = (*feed)[i];
      const ExpectedDoc& d = expected.docs[i];
      CHECK(c.etag == d.etag);
      CHECK(c.collection == d.collection);
      CHECK(c.id == d.id);
      CHECK(c.deleted == d.deleted);
    }
    const auto colls = store->Collections();
    REQUIRE(colls.size() == expected.collections.size());
    for (size_t i = 0; i < colls.size(); ++i) {
      CHECK(colls[i].name == expected.collections[i].name);
      CHECK(colls[i].count == expected.collections[i].count);
      CHECK(colls[i].tombstones == expected.collections[i].tombstones);
    }
    // Change batches (projected or not: old bodies come whole) and listings.
    for (const auto& c : expected.collections) {
      for (const bool project : {false, true}) {
        auto batch =
            store->ReadChangeBatch(c.name, 0, 100000, size_t{1} << 30,
                                   project ? std::span<const std::string>(kProjected) : std::span<const std::string>());
        REQUIRE(batch.ok());
        size_t n = 0;
        for (const DocChange& ch : (*batch)->changes()) {
          const auto it = std::find_if(expected.docs.begin(), expected.docs.end(),
                                       [&](const ExpectedDoc& d) { return d.collection == c.name && d.id == ch.id; });
          REQUIRE(it != expected.docs.end());
          CHECK(ch.etag == it->etag);
          CHECK(ch.deleted == it->deleted);
          if (!ch.deleted) CheckBody(ch.json, *it);
          ++n;
        }
        CHECK(n == c.count + c.tombstones);
      }
      auto page = store->ListDocuments(c.name, "", 1000);
      REQUIRE(page.ok());
      CHECK(page->docs.size() == c.count);
      for (size_t i = 1; i < page->docs.size(); ++i) CHECK(page->docs[i - 1].id < page->docs[i].id);
      for (const auto& entry : page->docs) {
        const auto it = std::find_if(expected.docs.begin(), expected.docs.end(),
                                     [&](const ExpectedDoc& d) { return d.collection == c.name && d.id == entry.id; });
        REQUIRE(it != expected.docs.end());
        CHECK(entry.etag == it->etag);
        CheckBody(entry.body, *it);
      }
    }

    // New writes beside the old bodies: enough small documents into an old
    // collection to train its dictionary, a large one, a replace, deletes
    // and a new collection.
    for (int b = 0; b < 12; ++b) {
      std::vector<WriteOp> ops;
      for (int i = b * 100; i < b * 100 + 100; ++i) {
        const std::string id = Numbered("new", i);
        std::string body = SmallDoc(rng, i);
        fresh["users/" + id] = body;
        ops.push_back(Put("users", id, std::move(body)));
      }
      REQUIRE(Bulk(*store, std::move(ops)).status.ok());
    }
    large_new = LargeStoreDoc(rng, 9, true);
    fresh["users/large-new"] = large_new.text;
    REQUIRE(Single(*store, Put("users", "large-new", large_new.text)).status.ok());
    replaced["users/z0"] = SmallDoc(rng, 9000);
    REQUIRE(Single(*store, Put("users", "z0", replaced["users/z0"])).status.ok());
    replaced["users/u3"] = "";
    REQUIRE(Single(*store, Del("users", "u3")).status.ok());
    fresh["fresh/a"] = R"({"score":1,"createdAt":"now"})";
    REQUIRE(Single(*store, Put("fresh", "a", fresh["fresh/a"])).status.ok());
    check_all(*store);
    CHECK(store->LastEtag() > expected.last_etag);
  }

  // On disk: stamped with the current format, one dictionary for "users",
  // the new bodies in the new encodings and kept by etag, the untouched old
  // ones as they were, in their DocValues.
  const RawStore after = Inspect(dir.path);
  CHECK(after.format == fmt::kFormatVersion);
  REQUIRE(after.dicts.size() == 1);
  const uint32_t dict_id = after.dicts.begin()->first;
  CHECK(after.dicts.begin()->second.first == after.collection_numbers.at("users"));
  CHECK(after.docs.at({"users", "new1199"}).flags == fmt::kFlagDict);
  CHECK(after.docs.at({"users", "z0"}).flags == fmt::kFlagDict);
  CHECK(after.docs.at({"users", "large-new"}).flags == fmt::kFlagStructured);
  CHECK(StructuredDictId(after.docs.at({"users", "large-new"}).body) == dict_id);
  for (const char* id : {"new1199", "z0", "large-new"}) CHECK(after.docs.at({"users", id}).apart);
  CHECK(after.docs.at({"fresh", "a"}).apart);
  for (const auto& [key, d] : before.docs) {
    if (replaced.count(key.first + "/" + key.second)) continue;
    const RawDoc& now = after.docs.at(key);
    CHECK(!now.apart);
    CHECK(now.flags == d.flags);
    CHECK(now.etag == d.etag);
    CHECK(now.body == d.body);
  }

  // Reopened: everything again, and a projection across old and new bodies.
  {
    auto store = OpenStore(dir.path);
    check_all(*store);
    auto batch = store->ReadChangeBatch("users", 0, 100000, size_t{1} << 30, kProjected);
    REQUIRE(batch.ok());
    size_t seen_large = 0, seen_old = 0;
    for (const DocChange& ch : (*batch)->changes()) {
      const std::string id(ch.id);
      if (ch.deleted) continue;
      if (id == "large-new") {
        CheckProjection(ch.json, Selected(large_new, kProjected));
        ++seen_large;
      } else if (fresh.count("users/" + id)) {
        CHECK_SAME(ch.json, fresh.at("users/" + id));
      } else if (replaced.count("users/" + id)) {
        CHECK_SAME(ch.json, replaced.at("users/" + id));
      } else {
        const auto it = std::find_if(expected.docs.begin(), expected.docs.end(),
                                     [&](const ExpectedDoc& d) { return d.collection == "users" && d.id == id; });
        REQUIRE(it != expected.docs.end());
        CheckBody(ch.json, *it);  // old bodies come whole
        ++seen_old;
      }
    }
    CHECK(seen_large == 1);
    CHECK(seen_old + 2 == expected.collections[1].count);  // all but z0 (replaced) and u3 (deleted)
  }
}

// This process's file-backed resident bytes (RssFile), or 0 if unknown.
uint64_t RssFileBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("RssFile:", 0) == 0) return std::stoull(line.substr(8)) * 1024;
  return 0;
}

// An index reading two fields of large documents touches each body's
// header, and Linux maps a touched page's whole folio (up to 2 MB on 6.18):
// without the drops a batch over them left the whole store mapped, in the
// server's RSS (page cache, not memory it holds). Batches drop the map's
// pages every StoreOptions::drop_resident_every bytes of bodies they read.
TEST_CASE("change batches over large bodies keep the store's pages out of the resident set", "[body][storage]") {
  // "p1" is in the bodies' second frame: every document's body is read
  // (heads answer createdAt and score alone without touching it).
  const std::vector<std::string> projected = {"createdAt", "p1", "score"};
  TempDir dir;
  std::mt19937_64 rng(61);
  constexpr int kDocs = 300;
  std::map<std::string, std::string> truth;
  StoreOptions options;
  options.drop_resident_every = size_t{1} << 20;
  {
    auto store = OpenStore(dir.path, options);
    for (int b = 0; b < kDocs / 25; ++b) {
      std::vector<WriteOp> ops;
      for (int i = b * 25; i < b * 25 + 25; ++i) {
        std::string text = "{\"id\":\"L" + std::to_string(i) + "\",\"score\":" + std::to_string(i) +
                           ",\"createdAt\":\"2024-01-0" + std::to_string(1 + i % 9) + "\"";
        for (int k = 0; k < 40; ++k) text += ",\"p" + std::to_string(k) + "\":" + StringValue(rng, 5000);
        text += "}";
        ops.push_back(Put("users", Numbered("L", i), text));
        truth[Numbered("L", i)] = std::move(text);
      }
      REQUIRE(Bulk(*store, std::move(ops)).status.ok());
    }
  }
  const RawStore raw = Inspect(dir.path);
  uint64_t stored = 0;
  for (const auto& [key, d] : raw.docs) stored += d.body.size();
  REQUIRE(stored > (uint64_t{24} << 20));

  for (const bool drops : {true, false}) {
    INFO((drops ? "with" : "without") << " drops");
    StoreOptions o = options;
    if (!drops) o.drop_resident_every = 0;
    auto store = OpenStore(dir.path, o);
    {  // A first batch of two maps the code and the trees' pages a batch uses.
      auto warm = store->ReadChangeBatch("users", 0, 2, size_t{1} << 30, projected);
      REQUIRE(warm.ok());
    }
    const auto before = int64_t(RssFileBytes());
    auto batch = store->ReadChangeBatch("users", 2, 100000, size_t{1} << 30, projected);
    REQUIRE(batch.ok());
    const int64_t grown = int64_t(RssFileBytes()) - before;
    const auto changes = (*batch)->changes();
    REQUIRE(changes.size() == kDocs - 2);
    for (const DocChange& c : changes) {
      const RawDoc& d = raw.docs.at({"users", std::string(c.id)});
      std::string want;
      REQUIRE(body::DecodeFields(d.flags, d.body, LookupOf({}), projected, want).ok());
      CHECK_SAME(c.json, want);
    }
    INFO("RssFile grew by " << grown << " bytes over " << stored << " bytes of bodies");
    // With the drops, what was read since the last one (1 MiB and the
    // folios around it); without, what the batch touched: a page of each
    // body at least (the test's check that it measures something).
    if (drops) CHECK(grown < (int64_t{8} << 20));
    else CHECK(grown >= int64_t(changes.size()) * 4096);
    auto full = store->ReadChangeBatch("users", 0, 100000, size_t{1} << 30);
    REQUIRE(full.ok());
    REQUIRE((*full)->changes().size() == kDocs);
    for (const DocChange& c : (*full)->changes()) CHECK_SAME(c.json, truth.at(std::string(c.id)));
  }
}

// Structured bodies written by the version-1 encoder (fdb6382; see
// tests/fixtures/body-v1/generate.cc): they read back whole, and every
// projection of them is the one their version-2 encoding gives.
// What DecodedSize(names) gives for a structured body, from its layout:
// "{}", and per field asked for (its key, or its key's first dotted
// component, is a name) its key with quotes, colon and comma, and once
// each frame holding one.
uint64_t ProjectedByLayout(const Layout& l, const std::vector<std::string>& names) {
  uint64_t size = 2, last = UINT64_MAX;
  for (const auto& e : l.entries) {
    const std::string key = Unescaped(e.key);
    const std::string first = key.substr(0, key.find('.'));
    const bool asked = std::any_of(names.begin(), names.end(),
                                   [&](const std::string& n) { return key == n || first == n; });
    if (!asked) continue;
    if (e.frame != last) size += l.frames[e.frame].raw;
    last = e.frame;
    size += e.key.size() + 4;
  }
  return size;
}

TEST_CASE("structured bodies of version 1 read whole, and project as version 2 does", "[body][fixture]") {
  const std::filesystem::path dir = std::filesystem::path(CORVID_FIXTURES_DIR) / "body-v1";
  const std::string dict_bytes = ReadFile(dir / "dict-7.bin");
  const auto dict = body::Dictionary::Load(7, dict_bytes, 1);
  REQUIRE(dict != nullptr);
  const auto lookup = LookupOf({dict});
  std::mt19937_64 rng(18);
  for (const std::string base : {"a", "b"}) {
    const std::string text = ReadFile(dir / (base + ".json"));
    // Names to ask for: every key and its first component, and names no
    // key has.
    std::vector<std::string> pool = {"zz", "a.b.c.d", "", "p1", "k919", "A", "é", "caf"};
    rapidjson::Document d;
    ParseLenient(d, text);
    REQUIRE(d.IsObject());
    for (const auto& m : d.GetObject()) {
      const std::string key(m.name.GetString(), m.name.GetStringLength());
      pool.push_back(key);
      pool.push_back(key.substr(0, key.find('.')));
    }
    std::vector<std::vector<std::string>> asks;
    for (const auto& n : pool) asks.push_back({n});
    for (int i = 0; i < 200; ++i) {
      std::vector<std::string> ask;
      for (size_t k = 1 + rng() % 6; k > 0; --k) ask.push_back(pool[rng() % pool.size()]);
      asks.push_back(std::move(ask));
    }
    asks.push_back(pool);
    for (auto& ask : asks) {
      std::sort(ask.begin(), ask.end());
      ask.erase(std::unique(ask.begin(), ask.end()), ask.end());
    }
    for (const bool with_dict : {false, true}) {
      INFO(base << (with_dict ? " with the dictionary" : ""));
      const std::string v1 = ReadFile(dir / (base + (with_dict ? "-dict" : "") + ".stored"));
      Layout l;
      ReadLayout(v1, dict_bytes, l);
      REQUIRE(l.version == 1);
      CHECK(l.dict_id == (with_dict ? 7u : 0u));
      std::string whole;
      REQUIRE(body::DecodeWhole(fmt::kFlagStructured, v1, lookup, whole).ok());
      CHECK_SAME(whole, text);
      std::string v2;
      REQUIRE(body::Encode(text, with_dict ? dict.get() : nullptr, 1, 1024, v2) == fmt::kFlagStructured);
      REQUIRE(static_cast<uint8_t>(v2[0]) == 2);
      Layout l2;
      ReadLayout(v2, dict_bytes, l2);
      size_t nonempty = 0;
      for (const auto& ask : asks) {
        std::string from_v1, from_v2;
        REQUIRE(body::DecodeFields(fmt::kFlagStructured, v1, lookup, ask, from_v1).ok());
        REQUIRE(body::DecodeFields(fmt::kFlagStructured, v2, lookup, ask, from_v2).ok());
        CHECK_SAME(from_v1, from_v2);
        nonempty += from_v1.size() > 2;
        auto size_v1 = body::DecodedSize(fmt::kFlagStructured, v1, ask);
        auto size_v2 = body::DecodedSize(fmt::kFlagStructured, v2, ask);
        REQUIRE(size_v1.ok());
        REQUIRE(size_v2.ok());
        // Each by its own frames (the encoder's cuts have changed since).
        CHECK(*size_v1 == ProjectedByLayout(l, ask));
        CHECK(*size_v2 == ProjectedByLayout(l2, ask));
        CHECK(*size_v1 >= from_v1.size());
        CHECK(*size_v2 >= from_v2.size());
      }
      CHECK(nonempty > asks.size() / 2);
    }
  }
}

namespace corvid::storage {
namespace {

// Documents of one vocabulary, then of another: the dictionary trained on
// the first compresses the second markedly worse, and the store trains a
// second one for the collection (the first stays, for its bodies).
TEST_CASE("a collection whose documents drift gets a new dictionary, and old bodies still read", "[body][storage]") {
  TempDir dir;
  std::mt19937_64 rng(77);
  auto doc = [&](int i, bool drifted) {
    static const char* const kA[] = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"};
    std::string text;
    while (text.size() < 1800) {
      if (drifted) {
        char hex[17];
        std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(rng()));
        text += hex;
      } else {
        text += kA[rng() % 8];
      }
      text += ' ';
    }
    return std::string("{\"n\":") + std::to_string(i) + ",\"kind\":\"" + (drifted ? "b" : "a") + "\",\"text\":\"" +
           text + "\"}";
  };
  std::map<std::string, std::string> truth;
  {
    auto store = OpenStore(dir.path);
    int n = 0;
    // 1000 to train, then ~9 MB of the same kind (the first window), then
    // ~9 MB of the other kind and 1000 more to sample it.
    const int first = 1000 + 5000, second = 5000 + 1500;
    for (int batch = 0; n < first + second; ++batch) {
      std::vector<WriteOp> ops;
      for (int k = 0; k < 250 && n < first + second; ++k, ++n) {
        const std::string id = Numbered("d", n);
        ops.push_back(Put("drift", id, doc(n, n >= first)));
        truth[id] = ops.back().body;
      }
      REQUIRE(Bulk(*store, ops).status.ok());
    }
  }
  const RawStore raw = Inspect(dir.path);
  REQUIRE(raw.dicts.size() == 2);
  CHECK(raw.dicts.begin()->second.first == std::next(raw.dicts.begin())->second.first);  // one collection
  // Bodies name both dictionaries, and every one reads back exactly.
  std::set<uint64_t> used;
  for (const auto& [key, d] : raw.docs)
    if (d.flags & format::kFlagDict) used.insert(static_cast<uint8_t>(d.body[0]));  // ids < 128: one varint byte
  CHECK(used.size() == 2);
  auto store = OpenStore(dir.path);
  for (const auto& [id, body] : truth) {
    auto got = store->Get("drift", id);
    REQUIRE(got.ok());
    REQUIRE(got->body == body);
  }
}

}  // namespace
}  // namespace corvid::storage

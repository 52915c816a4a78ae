// Encoder and decoders of stored bodies (layout in body_format.h).
#include "storage/body_format.h"

#define ZDICT_STATIC_LINKING_ONLY
#include <xxhash.h>
#include <zdict.h>

#include <algorithm>
#include <cassert>
#include <cstring>

#include "common/utf8.h"
#include "common/varint.h"
#include "storage/format.h"

namespace corvid::storage::body {

namespace fmt = format;

namespace {

struct CctxDeleter {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DctxDeleter {
  void operator()(ZSTD_DCtx* c) const { ZSTD_freeDCtx(c); }
};

// One compression and one decompression context per thread: creating one
// costs an allocation of ~160 KB and its page faults.
ZSTD_CCtx* Cctx() {
  thread_local std::unique_ptr<ZSTD_CCtx, CctxDeleter> c(ZSTD_createCCtx());
  return c.get();
}
ZSTD_DCtx* Dctx() {
  thread_local std::unique_ptr<ZSTD_DCtx, DctxDeleter> d(ZSTD_createDCtx());
  return d.get();
}

// Appends one zstd frame of `text` (with the content checksum) to `out`,
// with `dict` when given. False if zstd fails.
bool AppendFrame(std::string& out, std::string_view text, const Dictionary* dict, int level) {
  ZSTD_CCtx* c = Cctx();
  if (c == nullptr) return false;
  ZSTD_CCtx_reset(c, ZSTD_reset_session_and_parameters);
  ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1);
  if (dict != nullptr) {
    ZSTD_CCtx_refCDict(c, dict->cdict());  // the dictionary's level
  } else {
    ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level);
  }
  const size_t at = out.size();
  out.resize(at + ZSTD_compressBound(text.size()));
  const size_t n = ZSTD_compress2(c, out.data() + at, out.size() - at, text.data(), text.size());
  if (ZSTD_isError(n)) {
    out.resize(at);
    return false;
  }
  out.resize(at + n);
  return true;
}

// Decompresses one frame of exactly `raw` bytes into out[at, at + raw).
Status DecodeFrame(std::string_view frame, uint64_t raw, const Dictionary* dict, char* out) {
  ZSTD_DCtx* d = Dctx();
  if (d == nullptr) return Status::Internal("zstd: cannot allocate a decompression context");
  const size_t got = dict != nullptr ? ZSTD_decompress_usingDDict(d, out, raw, frame.data(), frame.size(), dict->ddict())
                                     : ZSTD_decompressDCtx(d, out, raw, frame.data(), frame.size());
  if (ZSTD_isError(got) || got != raw) return Status::Corruption("document body: zstd frame does not decode");
  return Status::Ok();
}

// Whether `stored` bytes of zstd can decode to `raw` bytes. A zstd block
// holds at most 128 KiB and takes at least 3 bytes of header (an RLE block
// 4), and no body decodes beyond 16 GiB: a frame claiming more is corrupt,
// and must not make a reader allocate (or, summed, wrap) what it claims.
bool PlausibleFrame(uint64_t raw, uint64_t stored) {
  return raw <= (uint64_t{1} << 34) && raw <= (stored / 3 + 1) * (uint64_t{128} << 10);
}

Status FrameSize(std::string_view frame, uint64_t& size) {
  const unsigned long long n = ZSTD_getFrameContentSize(frame.data(), frame.size());
  if (n == ZSTD_CONTENTSIZE_ERROR || n == ZSTD_CONTENTSIZE_UNKNOWN || !PlausibleFrame(n, frame.size()))
    return Status::Corruption("document body: bad zstd frame header");
  size = n;
  return Status::Ok();
}

// A top-level field of a JSON object's text: its key (between the quotes,
// as written) and its value's bytes.
struct Field {
  std::string_view key;
  size_t value_begin, value_end;
};

// Splits a JSON object's text at its top-level values. The text was
// validated before it was stored, but the scan checks what it relies on
// and gives up (false) on anything else: such a body is stored whole.
bool ScanObject(std::string_view t, std::vector<Field>& fields) {
  fields.clear();
  size_t i = 0;
  const size_t n = t.size();
  auto ws = [&] {
    while (i < n && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r')) ++i;
  };
  auto skip_string = [&]() -> bool {  // at the opening quote
    for (++i; i < n; ++i) {
      if (t[i] == '\\') {
        ++i;
      } else if (t[i] == '"') {
        ++i;
        return true;
      }
    }
    return false;
  };
  ws();
  if (i >= n || t[i] != '{') return false;
  ++i;
  ws();
  if (i < n && t[i] == '}') {
    ++i;
    ws();
    return i == n;
  }
  for (;;) {
    ws();
    if (i >= n || t[i] != '"') return false;
    const size_t key_begin = i + 1;
    if (!skip_string()) return false;
    const std::string_view key = t.substr(key_begin, i - 1 - key_begin);
    ws();
    if (i >= n || t[i] != ':') return false;
    ++i;
    ws();
    const size_t value_begin = i;
    if (i >= n) return false;
    if (t[i] == '"') {
      if (!skip_string()) return false;
    } else if (t[i] == '{' || t[i] == '[') {
      size_t depth = 0;
      for (; i < n; ++i) {
        const char c = t[i];
        if (c == '"') {
          if (!skip_string()) return false;
          --i;
        } else if (c == '{' || c == '[') {
          ++depth;
        } else if (c == '}' || c == ']') {
          if (--depth == 0) {
            ++i;
            break;
          }
        }
      }
      if (depth != 0) return false;
    } else {
      while (i < n && t[i] != ',' && t[i] != '}' && t[i] != ' ' && t[i] != '\t' && t[i] != '\n' && t[i] != '\r') ++i;
      if (i == value_begin) return false;
    }
    fields.push_back(Field{key, value_begin, i});
    ws();
    if (i >= n) return false;
    if (t[i] == ',') {
      ++i;
      continue;
    }
    if (t[i] != '}') return false;
    ++i;
    ws();
    return i == n;
  }
}

// A key as written (escapes and all) decoded to its UTF-8 bytes.
void UnescapeKey(std::string_view raw, std::string& out) {
  out.clear();
  auto hex = [&](size_t at, uint32_t& v) {
    v = 0;
    if (at + 4 > raw.size()) return false;
    for (size_t k = 0; k < 4; ++k) {
      const char c = raw[at + k];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f') v |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= uint32_t(c - 'A' + 10);
      else return false;
    }
    return true;
  };
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\\' || i + 1 >= raw.size()) {
      out.push_back(raw[i]);
      continue;
    }
    const char e = raw[++i];
    switch (e) {
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'u': {
        uint32_t cp;
        if (!hex(i + 1, cp)) break;
        i += 4;
        uint32_t lo;
        if (cp >= 0xD800 && cp < 0xDC00 && i + 2 < raw.size() && raw[i + 1] == '\\' && raw[i + 2] == 'u' &&
            hex(i + 3, lo) && lo >= 0xDC00 && lo < 0xE000) {
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          i += 6;
        }
        AppendUtf8(out, cp);
        break;
      }
      default: out.push_back(e);  // \" \\ \/
    }
  }
}

// The key as its unescaped bytes: `raw` itself unless it has an escape
// (then decoded into `buf`).
std::string_view Unescaped(std::string_view raw, std::string& buf) {
  if (raw.find('\\') == std::string_view::npos) return raw;
  UnescapeKey(raw, buf);
  return buf;
}

// Whether the top-level key `raw` (escaped as stored) is one a reader of
// `names` wants: a name itself, or a dotted key whose first component is
// one ({"author.name": x} for "author", KeySpells in postings/definition.h).
bool KeyIn(std::string_view raw, std::span<const std::string> names) {
  thread_local std::string buf;
  const std::string_view key = Unescaped(raw, buf);
  if (std::binary_search(names.begin(), names.end(), key)) return true;
  const size_t dot = key.find('.');
  return dot != std::string_view::npos && std::binary_search(names.begin(), names.end(), key.substr(0, dot));
}

// A structured body's header, parsed: its frames; its directory is read
// on demand (FindFields), since a reader usually wants a few fields.
struct Structured {
  uint8_t version = 0;
  uint64_t dict_id = 0, text_size = 0;
  struct Frame {
    uint64_t raw, stored, raw_off, stored_off;  // offsets: in the text, and from the frames' start
  };
  std::vector<Frame> frames;
  const char* fields_begin = nullptr;  // the directory's entries
  const char* fields_end = nullptr;    // bounds them
  uint64_t field_count = 0;
  const char* sorted = nullptr;  // version 2: field_count u32 offsets of entries, by key
  std::string_view data;         // the frames (set by a checked parse only)
};
struct FieldEntry {
  std::string_view key;
  uint64_t frame, offset, length;
  const char* at;  // where the entry starts: document order
};

// Decodes the directory entry at *p (< end) into e; false if malformed.
bool NextField(const char*& p, const char* end, const Structured& s, FieldEntry& e) {
  e.at = p;
  uint64_t key_len = 0;
  if (!GetVarint(p, end, key_len) || key_len > uint64_t(end - p)) return false;
  e.key = std::string_view(p, key_len);
  p += key_len;
  if (!GetVarint(p, end, e.frame) || !GetVarint(p, end, e.offset) || !GetVarint(p, end, e.length)) return false;
  return e.frame < s.frames.size() && e.offset <= s.frames[e.frame].raw && e.length <= s.frames[e.frame].raw - e.offset;
}

// The entries a reader of `names` wants (KeyIn), in document order, into
// `out`. Version 2 binary-searches the sorted offsets for each name and
// its dotted spellings ("a" and every "a.…"); version 1 walks the
// directory. False if an entry it reads is malformed.
bool FindFields(const Structured& s, std::span<const std::string> names, std::vector<FieldEntry>& out) {
  out.clear();
  FieldEntry e;
  if (s.version == 1) {
    const char* p = s.fields_begin;
    for (uint64_t i = 0; i < s.field_count; ++i) {
      if (!NextField(p, s.fields_end, s, e)) return false;
      if (KeyIn(e.key, names)) out.push_back(e);
    }
    return true;
  }
  thread_local std::string buf;
  const uint64_t dir = uint64_t(s.fields_end - s.fields_begin);
  bool ok = true;
  // The entry of rank i in key order (false: malformed).
  const auto entry = [&](uint64_t i, FieldEntry& f) {
    uint32_t off;
    std::memcpy(&off, s.sorted + 4 * i, 4);
    const char* p = s.fields_begin + off;
    return off < dir && NextField(p, s.fields_end, s, f);
  };
  // The first rank whose key is not below `key`.
  const auto lower_bound = [&](std::string_view key) {
    uint64_t lo = 0, hi = s.field_count;
    while (lo < hi && ok) {
      const uint64_t mid = lo + (hi - lo) / 2;
      if (!entry(mid, e)) ok = false;
      else if (Unescaped(e.key, buf) < key) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  // Appends the entries from rank `i` on while their keys satisfy `match`.
  const auto take = [&](uint64_t i, auto&& match) {
    for (; i < s.field_count && ok; ++i) {
      if (!entry(i, e)) ok = false;
      else if (!match(Unescaped(e.key, buf))) return;
      else out.push_back(e);
    }
  };
  thread_local std::string prefix;
  for (const std::string& name : names) {
    take(lower_bound(name), [&](std::string_view k) { return k == name; });
    if (name.find('.') != std::string::npos) continue;  // a first component has no dot
    prefix = name;
    prefix.push_back('.');
    take(lower_bound(prefix), [&](std::string_view k) { return k.starts_with(prefix); });
  }
  std::sort(out.begin(), out.end(), [](const FieldEntry& a, const FieldEntry& b) { return a.at < b.at; });
  out.erase(std::unique(out.begin(), out.end(), [](const FieldEntry& a, const FieldEntry& b) { return a.at == b.at; }),
            out.end());
  return ok;
}

// DecodedSize of a projection: the frames holding the `found` entries,
// and their keys.
uint64_t ProjectedSize(const Structured& s, const std::vector<FieldEntry>& found) {
  uint64_t size = 2, last = UINT64_MAX;
  for (const FieldEntry& e : found) {
    if (e.frame != last) size += s.frames[e.frame].raw;
    last = e.frame;
    size += e.key.size() + 4;
  }
  return size;
}

// Parses the header. kChecked checks the header's checksum (and in version
// 1, every directory entry) before the frames are read; kFramesOnly
// parses the frame table and bounds the directory, without the checksum:
// enough to size what a read will decode (DecodedSize), which the read
// that follows checks in full. Entries are bounds-checked as they are
// read (NextField), so a crafted header with a right checksum is refused,
// not followed.
enum class Parse { kChecked, kFramesOnly };
Status ParseStructured(std::string_view s, Structured& out, Parse parse = Parse::kChecked) {
  const auto bad = [] { return Status::Corruption("document body: bad structured header"); };
  const char* p = s.data();
  const char* end = p + s.size();
  if (p == end || (static_cast<uint8_t>(*p) != 1 && static_cast<uint8_t>(*p) != 2)) return bad();
  out.version = static_cast<uint8_t>(*p);
  ++p;
  uint64_t count = 0;
  if (!GetVarint(p, end, out.dict_id) || !GetVarint(p, end, out.text_size) || !GetVarint(p, end, count) ||
      count > s.size())
    return bad();
  out.frames.clear();
  uint64_t raw_off = 0, stored_off = 0;
  for (uint64_t f = 0; f < count; ++f) {
    Structured::Frame fr{};
    if (!GetVarint(p, end, fr.raw) || !GetVarint(p, end, fr.stored) || fr.stored > s.size() ||
        !PlausibleFrame(fr.raw, fr.stored))
      return bad();
    fr.raw_off = raw_off;
    fr.stored_off = stored_off;
    raw_off += fr.raw;
    stored_off += fr.stored;
    out.frames.push_back(fr);
  }
  // Each frame is bounded, and there are at most s.size() of them: the
  // sums cannot wrap. The whole text is bounded as one frame is.
  if (raw_off != out.text_size || out.text_size > (uint64_t{1} << 34)) return bad();
  if (!GetVarint(p, end, count) || count > s.size()) return bad();
  out.field_count = count;
  out.sorted = nullptr;
  if (out.version == 2) {
    uint64_t dir = 0;
    if (!GetVarint(p, end, dir) || dir > uint64_t(end - p) || dir > UINT32_MAX) return bad();
    out.fields_begin = p;
    out.fields_end = p + dir;
    p += dir;
    if (count > uint64_t(end - p) / 4) return bad();
    out.sorted = p;
    p += 4 * count;
  } else {
    out.fields_begin = p;
    out.fields_end = end;
    if (parse == Parse::kChecked) {
      FieldEntry e;
      for (uint64_t f = 0; f < count; ++f)
        if (!NextField(p, end, out, e)) return bad();
      out.fields_end = p;
    }
  }
  if (parse == Parse::kFramesOnly) {
    out.data = {};
    return Status::Ok();
  }
  if (end - p < 4) return bad();
  uint32_t sum;
  std::memcpy(&sum, p, 4);
  if (sum != static_cast<uint32_t>(XXH3_64bits(s.data(), size_t(p - s.data())))) return bad();
  p += 4;
  out.data = std::string_view(p, size_t(end - p));
  if (stored_off != out.data.size()) return bad();
  return Status::Ok();
}

Status DictFor(uint64_t id, const DictionaryLookup& dicts, std::shared_ptr<const Dictionary>& out) {
  out.reset();
  if (id == 0) return Status::Ok();
  if (id > UINT32_MAX || !dicts || !(out = dicts(static_cast<uint32_t>(id))))
    return Status::Corruption("document body: unknown compression dictionary " + std::to_string(id));
  return Status::Ok();
}

}  // namespace

std::shared_ptr<const Dictionary> Dictionary::Load(uint32_t id, std::string_view bytes, int level) {
  std::shared_ptr<Dictionary> d(new Dictionary());
  d->id_ = id;
  d->bytes_ = bytes.size();
  d->cdict_ = ZSTD_createCDict(bytes.data(), bytes.size(), level);
  d->ddict_ = ZSTD_createDDict(bytes.data(), bytes.size());
  if (d->cdict_ == nullptr || d->ddict_ == nullptr) return nullptr;
  return d;
}

Dictionary::~Dictionary() {
  ZSTD_freeCDict(cdict_);
  ZSTD_freeDDict(ddict_);
}

namespace {

// Frames: pieces of the text ending where a top-level value ends (the
// last one the closing brace), grouped up to kFrameBytes (the first frame
// up to kFirstFrameBytes); a piece whose value alone reaches kFrameBytes
// has a frame of its own. `frame_of` gets each field's frame.
struct FrameSpan {
  size_t begin, end;
};
void CutFrames(std::string_view json, const std::vector<Field>& fields, std::vector<FrameSpan>& spans,
               std::vector<uint64_t>& frame_of) {
  spans.clear();
  frame_of.assign(fields.size(), 0);
  size_t begin = 0, piece_begin = 0;
  for (size_t f = 0; f < fields.size(); ++f) {
    const size_t piece_end = fields[f].value_end;
    const bool large = fields[f].value_end - fields[f].value_begin >= kFrameBytes;
    const size_t target = spans.empty() ? kFirstFrameBytes : kFrameBytes;
    if ((large || piece_end - begin > target) && piece_begin > begin) {
      spans.push_back(FrameSpan{begin, piece_begin});
      begin = piece_begin;
    }
    frame_of[f] = spans.size();
    if (large) {
      spans.push_back(FrameSpan{begin, piece_end});
      begin = piece_end;
    }
    piece_begin = piece_end;
  }
  spans.push_back(FrameSpan{begin, json.size()});
}

// A field's key, unescaped, and its place among the fields.
struct Keyed {
  std::string_view key;  // into the `unescaped` SortKeys filled
  uint32_t field;
};

// The fields' keys, unescaped, sorted (stably: equal keys keep their order).
void SortKeys(const std::vector<Field>& fields, std::vector<std::string>& unescaped, std::vector<Keyed>& keyed) {
  keyed.clear();
  unescaped.resize(fields.size());
  for (size_t f = 0; f < fields.size(); ++f)
    keyed.push_back(Keyed{Unescaped(fields[f].key, unescaped[f]), static_cast<uint32_t>(f)});
  std::stable_sort(keyed.begin(), keyed.end(), [](const Keyed& a, const Keyed& b) { return a.key < b.key; });
}

// The head (layout in body_format.h) of a body cut so: the first frame's
// fields, each flagged when a field after the head has a key starting
// with its key and a dot (`keyed`: SortKeys'). Empty if over kHeadMaxBytes.
void BuildHead(std::string_view json, const std::vector<Field>& fields, const std::vector<uint64_t>& frame_of,
               const FrameSpan& first, const std::vector<Keyed>& keyed, std::string& head) {
  head.clear();
  if (first.begin != 0 || first.end > kHeadMaxBytes) return;
  head.push_back(1);
  PutVarint(head, first.end);
  head.append(json.substr(0, first.end));
  size_t count = 0;
  while (count < fields.size() && frame_of[count] == 0) ++count;
  PutVarint(head, count);
  thread_local std::string buf, prefix;
  for (size_t f = 0; f < count; ++f) {
    PutVarint(head, fields[f].key.size());
    head.append(fields[f].key);
    PutVarint(head, fields[f].value_begin);
    PutVarint(head, fields[f].value_end - fields[f].value_begin);
    prefix.assign(Unescaped(fields[f].key, buf));
    prefix.push_back('.');
    auto it = std::lower_bound(keyed.begin(), keyed.end(), std::string_view(prefix),
                               [](const Keyed& k, std::string_view p) { return k.key < p; });
    bool later_dotted = false;
    for (; !later_dotted && it != keyed.end() && it->key.starts_with(prefix); ++it) later_dotted = frame_of[it->field] != 0;
    head.push_back(later_dotted ? 1 : 0);
  }
  const auto sum = static_cast<uint32_t>(XXH3_64bits(head.data(), head.size()));
  head.append(reinterpret_cast<const char*>(&sum), 4);
  if (head.size() > kHeadMaxBytes) head.clear();
}

}  // namespace

uint8_t Encode(std::string_view json, const Dictionary* dict, int level, size_t compress_threshold, std::string& out,
               std::string* head) {
  out.clear();
  if (head != nullptr) head->clear();
  thread_local std::vector<Field> fields;
  if (json.size() >= kStructuredMinBytes && ScanObject(json, fields)) {
    thread_local std::vector<FrameSpan> spans;
    thread_local std::vector<uint64_t> frame_of;
    CutFrames(json, fields, spans, frame_of);
    std::string header;
    header.push_back(2);
    PutVarint(header, dict != nullptr ? dict->id() : 0);
    PutVarint(header, json.size());
    PutVarint(header, spans.size());
    thread_local std::string frames;
    frames.clear();
    bool ok = true;
    for (const FrameSpan& sp : spans) {
      const size_t at = frames.size();
      ok = ok && AppendFrame(frames, json.substr(sp.begin, sp.end - sp.begin), dict, level);
      PutVarint(header, sp.end - sp.begin);
      PutVarint(header, frames.size() - at);
    }
    thread_local std::string directory;
    thread_local std::vector<uint32_t> entry_at;  // each field's entry in the directory
    directory.clear();
    entry_at.clear();
    for (size_t f = 0; f < fields.size(); ++f) {
      entry_at.push_back(static_cast<uint32_t>(directory.size()));
      PutVarint(directory, fields[f].key.size());
      directory.append(fields[f].key);
      PutVarint(directory, frame_of[f]);
      PutVarint(directory, fields[f].value_begin - spans[frame_of[f]].begin);
      PutVarint(directory, fields[f].value_end - fields[f].value_begin);
    }
    if (ok && directory.size() <= UINT32_MAX) {
      thread_local std::vector<Keyed> keyed;
      thread_local std::vector<std::string> unescaped;
      SortKeys(fields, unescaped, keyed);
      PutVarint(header, fields.size());
      PutVarint(header, directory.size());
      header += directory;
      for (const Keyed& k : keyed) header.append(reinterpret_cast<const char*>(&entry_at[k.field]), 4);
      if (head != nullptr) BuildHead(json, fields, frame_of, spans[0], keyed, *head);
      const auto sum = static_cast<uint32_t>(XXH3_64bits(header.data(), header.size()));
      header.append(reinterpret_cast<const char*>(&sum), 4);
      out.reserve(header.size() + frames.size());
      out = header;
      out += frames;
      if (frames.capacity() > (size_t{4} << 20)) std::string().swap(frames);
      return fmt::kFlagStructured;
    }
    out.clear();
    if (head != nullptr) head->clear();
  }
  if (dict != nullptr && json.size() >= kDictCompressMinBytes) {
    PutVarint(out, dict->id());
    if (AppendFrame(out, json, dict, level) && out.size() < json.size()) return fmt::kFlagDict;
    out.clear();
  }
  if (json.size() >= compress_threshold && AppendFrame(out, json, nullptr, level) && out.size() < json.size())
    return fmt::kFlagZstd;
  out.assign(json);
  return 0;
}

Result<uint64_t> DecodedSize(uint8_t flags, std::string_view stored, std::span<const std::string> names) {
  if (flags & fmt::kFlagStructured) {
    thread_local Structured s;
    if (Status st = ParseStructured(stored, s, Parse::kFramesOnly); !st.ok()) return st;
    if (names.empty()) return s.text_size;
    thread_local std::vector<FieldEntry> found;
    if (!FindFields(s, names, found)) return Status::Corruption("document body: bad structured header");
    return ProjectedSize(s, found);
  }
  if (flags & fmt::kFlagDict) {
    const char* p = stored.data();
    uint64_t id;
    if (!GetVarint(p, stored.data() + stored.size(), id)) return Status::Corruption("document body: bad dictionary id");
    stored.remove_prefix(size_t(p - stored.data()));
  }
  if (flags & (fmt::kFlagZstd | fmt::kFlagDict)) {
    uint64_t n;
    if (Status st = FrameSize(stored, n); !st.ok()) return st;
    return n;
  }
  return uint64_t{stored.size()};
}

Status DecodeWhole(uint8_t flags, std::string_view stored, const DictionaryLookup& dicts, std::string& out) {
  std::shared_ptr<const Dictionary> dict;
  if (flags & fmt::kFlagStructured) {
    thread_local Structured s;
    if (Status st = ParseStructured(stored, s); !st.ok()) return st;
    if (Status st = DictFor(s.dict_id, dicts, dict); !st.ok()) return st;
    out.resize(s.text_size);
    for (const auto& f : s.frames)
      if (Status st = DecodeFrame(s.data.substr(f.stored_off, f.stored), f.raw, dict.get(), out.data() + f.raw_off);
          !st.ok())
        return st;
    return Status::Ok();
  }
  if (flags & fmt::kFlagDict) {
    const char* p = stored.data();
    uint64_t id;
    if (!GetVarint(p, stored.data() + stored.size(), id)) return Status::Corruption("document body: bad dictionary id");
    if (Status st = DictFor(id, dicts, dict); !st.ok()) return st;
    stored.remove_prefix(size_t(p - stored.data()));
  }
  if (flags & (fmt::kFlagZstd | fmt::kFlagDict)) {
    uint64_t n;
    if (Status st = FrameSize(stored, n); !st.ok()) return st;
    out.resize(n);
    return DecodeFrame(stored, n, dict.get(), out.data());
  }
  out.assign(stored);
  return Status::Ok();
}

Status DecodeFields(uint8_t flags, std::string_view stored, const DictionaryLookup& dicts,
                    std::span<const std::string> names, std::string& out, uint64_t* decoded_size) {
  assert(std::is_sorted(names.begin(), names.end()));  // KeyIn and FindFields search them
  if (!(flags & fmt::kFlagStructured) || names.empty()) {
    Status st = DecodeWhole(flags, stored, dicts, out);
    if (decoded_size != nullptr) *decoded_size = out.size();  // DecodedSize: the text's
    return st;
  }
  thread_local Structured s;
  if (Status st = ParseStructured(stored, s); !st.ok()) return st;
  std::shared_ptr<const Dictionary> dict;
  if (Status st = DictFor(s.dict_id, dicts, dict); !st.ok()) return st;
  thread_local std::string frame;
  uint64_t decoded = UINT64_MAX;  // the frame in `frame`
  out.clear();
  out.push_back('{');
  thread_local std::vector<FieldEntry> found;
  if (!FindFields(s, names, found)) return Status::Corruption("document body: bad structured header");
  if (decoded_size != nullptr) *decoded_size = ProjectedSize(s, found);
  for (const FieldEntry& e : found) {
    if (e.frame != decoded) {
      const auto& f = s.frames[e.frame];
      frame.resize(f.raw);
      if (Status st = DecodeFrame(s.data.substr(f.stored_off, f.stored), f.raw, dict.get(), frame.data()); !st.ok())
        return st;
      decoded = e.frame;
    }
    if (out.size() > 1) out.push_back(',');
    out.push_back('"');
    out.append(e.key);
    out.append("\":");
    out.append(frame, e.offset, e.length);
  }
  out.push_back('}');
  if (frame.capacity() > (size_t{4} << 20)) std::string().swap(frame);
  return Status::Ok();
}

std::string HeadOf(std::string_view json) {
  // Encode's steps up to its head, without compressing the frames.
  std::string head;
  std::vector<Field> fields;
  if (json.size() < kStructuredMinBytes || !ScanObject(json, fields)) return head;
  std::vector<FrameSpan> spans;
  std::vector<uint64_t> frame_of;
  CutFrames(json, fields, spans, frame_of);
  std::vector<Keyed> keyed;
  std::vector<std::string> unescaped;
  SortKeys(fields, unescaped, keyed);
  BuildHead(json, fields, frame_of, spans[0], keyed, head);
  return head;
}

Result<bool> HeadFields(std::string_view head, std::span<const std::string> names, std::string& out) {
  assert(std::is_sorted(names.begin(), names.end()) && !names.empty());
  const auto bad = [] { return Status::Corruption("document head: malformed"); };
  if (head.size() < 5) return bad();
  const char* p = head.data();
  const char* end = p + head.size() - 4;
  uint32_t sum;
  std::memcpy(&sum, end, 4);
  if (sum != static_cast<uint32_t>(XXH3_64bits(head.data(), head.size() - 4)) || static_cast<uint8_t>(*p) != 1)
    return bad();
  ++p;
  uint64_t size = 0, count = 0;
  if (!GetVarint(p, end, size) || size > uint64_t(end - p)) return bad();
  const std::string_view text(p, size);
  p += size;
  if (!GetVarint(p, end, count) || count > uint64_t(end - p)) return bad();
  struct HeadField {
    std::string_view key, value;
    bool dotted_later;
  };
  thread_local std::vector<HeadField> fields;
  fields.clear();
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t key_len = 0, offset = 0, length = 0;
    if (!GetVarint(p, end, key_len) || key_len > uint64_t(end - p)) return bad();
    const std::string_view key(p, key_len);
    p += key_len;
    if (!GetVarint(p, end, offset) || !GetVarint(p, end, length) || offset > size || length > size - offset ||
        p == end || static_cast<uint8_t>(*p) > 1)
      return bad();
    fields.push_back(HeadField{key, text.substr(offset, length), *p++ == 1});
  }
  if (p != end) return bad();
  thread_local std::string buf;
  for (const std::string& name : names) {
    const auto it = std::find_if(fields.begin(), fields.end(),
                                 [&](const HeadField& f) { return Unescaped(f.key, buf) == name; });
    if (it == fields.end() || it->dotted_later) return false;
  }
  out.clear();
  out.push_back('{');
  for (const HeadField& f : fields) {
    if (!KeyIn(f.key, names)) continue;
    if (out.size() > 1) out.push_back(',');
    out.push_back('"');
    out.append(f.key);
    out.append("\":");
    out.append(f.value);
  }
  out.push_back('}');
  return true;
}

std::string TrainDictionary(const std::vector<std::string>& samples, size_t max_bytes) {
  std::string joined;
  std::vector<size_t> sizes;
  for (const auto& s : samples) {
    joined += s;
    sizes.push_back(s.size());
  }
  std::string dict(max_bytes, '\0');
  // fastCover with fixed parameters: ZDICT_trainFromBuffer searches k and
  // d, ~3x the time for the same compression (2.3 KB StackOverflow-like
  // documents, 1000 samples: 0.30 s and 0.418 of the text; these, 0.09 s
  // and 0.416), and the write that completes a sample waits for it.
  ZDICT_fastCover_params_t params{};
  params.k = 200;
  params.d = 8;
  params.f = 20;
  params.accel = 1;
  params.splitPoint = 1.0;
  params.zParams.compressionLevel = 1;
  const size_t n = ZDICT_trainFromBuffer_fastCover(dict.data(), dict.size(), joined.data(), sizes.data(),
                                                   static_cast<unsigned>(sizes.size()), params);
  if (ZDICT_isError(n)) return {};
  dict.resize(n);
  return dict;
}

}  // namespace corvid::storage::body

// The on-disk layout of the document store, and its encoders/decoders.
// Everything Corvid writes to LMDB is described here, so a data directory
// can be recognised and verified long after it was written.
//
// Environment: `<data>/store/data.mdb` (LMDB, default durable sync mode),
// with these named databases. Integers in keys are big-endian (so LMDB's
// bytewise order is numeric order); integers in values are little-endian.
//
//   "meta"         "format"      -> u32 kFormatVersion
//                  "last_etag"   -> u64 last etag given to a durable write
//                  "next_coll"   -> u32 next collection number to assign
//                  "purge_scan"  -> u64 every tombstone up to this etag is purged
//                  "purged_max"  -> u64 the highest etag of a purged tombstone
//                  "log_applied" -> u64 cluster mode: the last log entry applied
//                  "log_resume"  -> u64 cluster mode: where a restart reads the log from
//                  "log_hash"    -> u64 cluster mode: XXH3-64 of entry log_applied's
//                                   bytes (checked against the log's copy)
//   "collections"  u32 number    -> u64 live documents | u64 tombstones | name
//                  (names are up to 512 bytes, over LMDB's key limit, so
//                  the number is the key and the name index lives in memory)
//   "docs"         DocKey        -> DocValue
//   "bodies"       u64 etag      -> u8 encoding flags | body (format 3: the
//                  body of the live document written at that etag, its
//                  DocValue flagged kFlagBodyApart; written in etag order
//                  with MDB_APPEND, so its leaf pages fill completely, and
//                  an index build reads them in order. "docs" keyed by id
//                  then holds ~30 bytes per document, not the body: ids
//                  written out of key order half-fill B-tree leaves, which
//                  held only two or three ~1 KB bodies each)
//   "heads"        u64 etag      -> the head of the structured body at that
//                  etag in "bodies" (format 4; layout in body_format.h):
//                  its first frame's text raw and its fields' places, in
//                  a leaf page, so an index reading leading fields never
//                  touches the body's overflow pages. Written and removed
//                  with its body; bodies written before format 4 have none
//                  (their readers read the body)
//   "changes"      u64 etag      -> u32 collection | u8 flags | id bytes
//   "coll_changes" u32 coll | u64 etag -> u8 flags | id bytes
//   "dicts"        u32 dictionary id -> u32 collection | zstd dictionary
//                  (trained from the collection's documents; ids grow, the
//                  highest of a collection is the one new bodies use, older
//                  ones stay for the bodies written with them)
//   "clock"        u64 unix seconds -> u64 the last etag then (a sample a
//                  minute: a tombstone's age is told from its etag)
//
// DocKey = u32 collection number | id, when the id is at most
// kMaxDirectIdBytes; longer ids (LMDB keys are at most 511 bytes) use
// u32 | first kLongIdPrefix bytes | u64 hash(id), exactly kMaxKeyBytes long,
// and the full id is kept in the value and compared on every read.
//
// DocValue = u64 etag | u8 flags | [u16 id length | id, if kFlagLongId] | body
//   flags: kFlagDeleted     tombstone, body empty
//          kFlagZstd        body is one zstd frame of the JSON text
//          kFlagLongId      the full id follows (see DocKey)
//          kFlagDict        body is a varint dictionary id and one zstd
//                           frame of the text compressed with it
//          kFlagStructured  body is the structured layout (large documents)
//          kFlagBodyApart   the body is in "bodies" under this etag (with
//                           its own encoding flags: kFlagZstd, kFlagDict,
//                           kFlagStructured or none for raw JSON); the
//                           DocValue has no body (format 3)
//   The body encodings are documented in body_format.h, beside their
//   encoder and decoders.
//
// Format versions: 1 had only raw and kFlagZstd bodies and no "dicts"; 2
// kept every body in its DocValue; 3 writes bodies to "bodies"; 4 writes
// heads. An older store opens unchanged and is stamped 4 (its old bodies
// stay readable where they are; rewritten documents take the new layout),
// so an older build refuses it (it would leave heads behind).
//
// Each document has exactly one entry in "changes" and "coll_changes": its
// latest write (older ones are removed when it is rewritten), tombstones
// included, until a tombstone is purged (--tombstone-retention) with its
// two change entries. "clock", "purge_scan", "purged_max" and the "log_" keys came without
// a version change: a store without them has purged nothing.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "common/fnv1a.h"

namespace corvid::storage::format {

inline constexpr uint32_t kFormatVersion = 4;
inline constexpr size_t kMaxKeyBytes = 511;
inline constexpr size_t kMaxDirectIdBytes = 498;
inline constexpr size_t kLongIdPrefix = kMaxKeyBytes - 4 - 8;

inline constexpr uint8_t kFlagDeleted = 1;
inline constexpr uint8_t kFlagZstd = 2;
inline constexpr uint8_t kFlagLongId = 4;
inline constexpr uint8_t kFlagDict = 8;
inline constexpr uint8_t kFlagStructured = 16;
inline constexpr uint8_t kFlagBodyApart = 32;
// The flags a body's own encoding may carry (a "bodies" entry's first byte).
inline constexpr uint8_t kBodyEncodingFlags = kFlagZstd | kFlagDict | kFlagStructured;

inline void PutBE32(std::string& out, uint32_t v) {
  char b[4] = {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
  out.append(b, 4);
}
inline void PutBE64(std::string& out, uint64_t v) {
  PutBE32(out, uint32_t(v >> 32));
  PutBE32(out, uint32_t(v));
}
inline uint32_t GetBE32(const char* p) {
  auto u = reinterpret_cast<const unsigned char*>(p);
  return (uint32_t(u[0]) << 24) | (uint32_t(u[1]) << 16) | (uint32_t(u[2]) << 8) | u[3];
}
inline uint64_t GetBE64(const char* p) { return (uint64_t(GetBE32(p)) << 32) | GetBE32(p + 4); }

inline void PutLE(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char(v >> (8 * i)));
}
inline uint64_t GetLE(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// 64-bit FNV-1a with a murmur3 finalizer: stable forever (it is on disk).
inline uint64_t IdHash(std::string_view s) {
  uint64_t h = Fnv1a64(s);
  h ^= h >> 33; h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

inline std::string DocKey(uint32_t coll, std::string_view id) {
  std::string key;
  key.reserve(4 + std::min(id.size(), kMaxKeyBytes));
  PutBE32(key, coll);
  if (id.size() <= kMaxDirectIdBytes) {
    key.append(id);
  } else {
    key.append(id.substr(0, kLongIdPrefix));
    PutBE64(key, IdHash(id));
  }
  return key;
}

inline std::string ChangeKey(uint64_t etag) {
  std::string key;
  PutBE64(key, etag);
  return key;
}

// A "bodies" (or "heads") key: the etag the body was written at.
inline std::string BodyKey(uint64_t etag) { return ChangeKey(etag); }

inline std::string CollChangeKey(uint32_t coll, uint64_t etag) {
  std::string key;
  PutBE32(key, coll);
  PutBE64(key, etag);
  return key;
}

// A decoded DocValue; views point into LMDB's memory map (valid while the
// transaction that read them is open).
struct DocView {
  uint64_t etag = 0;
  uint8_t flags = 0;
  std::string_view long_id;  // set iff kFlagLongId
  std::string_view body;     // raw or zstd, see flags
};

// Returns false if `v` is not a well-formed DocValue.
inline bool DecodeDoc(std::string_view v, DocView& out) {
  if (v.size() < 9) return false;
  out.etag = GetLE(v.data(), 8);
  out.flags = static_cast<uint8_t>(v[8]);
  size_t pos = 9;
  out.long_id = {};
  if (out.flags & kFlagLongId) {
    if (v.size() < pos + 2) return false;
    size_t n = GetLE(v.data() + pos, 2);
    pos += 2;
    if (v.size() < pos + n) return false;
    out.long_id = v.substr(pos, n);
    pos += n;
  }
  out.body = v.substr(pos);
  return true;
}

// Points `view` (a DocValue flagged kFlagBodyApart, or one with only its
// etag set) at the "bodies" entry `v`: its body, and its encoding flags in
// place of kFlagBodyApart. False if `v` is malformed.
inline bool ApplyBodyEntry(std::string_view v, DocView& view) {
  if (v.empty() || (uint8_t(v[0]) & ~kBodyEncodingFlags) != 0) return false;
  view.flags = uint8_t((view.flags & ~kFlagBodyApart) | uint8_t(v[0]));
  view.body = v.substr(1);
  return true;
}

inline std::string EncodeDocHeader(uint64_t etag, uint8_t flags, std::string_view id) {
  std::string v;
  PutLE(v, etag, 8);
  if (id.size() > kMaxDirectIdBytes) flags |= kFlagLongId;
  v.push_back(char(flags));
  if (flags & kFlagLongId) {
    PutLE(v, id.size(), 2);
    v.append(id);
  }
  return v;
}

}  // namespace corvid::storage::format

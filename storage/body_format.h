// The stored body of a document: how its JSON text is kept in a DocValue
// (format.h) so that reads cost what they use. Small bodies are one zstd
// frame, with the collection's trained dictionary once it has one (a
// 2 KB document alone compresses poorly: 0.56 of its text for the
// StackOverflow-like documents of bench/small_machine.py, 0.42 with a
// dictionary of its collection's common strings). Large
// bodies are "structured": the text cut at its top-level values into
// frames of a few KB, each value larger than that in a frame of its own,
// behind a directory of the top-level keys, so one field is read by
// decompressing one small frame and never touching the others' pages.
// Both give back the exact bytes that were written.
//
// Encodings, by the DocValue flags (format.h):
//   0                  the JSON text, raw
//   kFlagZstd          one zstd frame of the text
//   kFlagDict          varint dictionary id, then one zstd frame of the
//                      text compressed with that dictionary
//   kFlagStructured    the structured layout:
//     u8 version (2)
//     varint dictionary id (0: none)
//     varint text length
//     varint frame count F; per frame: varint raw length, varint stored length
//     varint field count N
//     varint directory length D, then the directory: D bytes holding, per
//       top-level field in document order, varint key length, the key as
//       written between its quotes (escapes kept), varint frame, varint
//       offset of the value in the frame's text, varint value length
//     N u32 (little-endian): each field's entry as its offset in the
//       directory, in the order of the keys' unescaped bytes, so that a
//       reader finds a field by binary search (log N entries decoded, not
//       the directory of a 900-field document; see bench/RESULTS.md)
//     u32 the low 32 bits of the XXH3-64 of every byte above
//     the F frames, back to back: each a zstd frame (content checksum on)
//       of consecutive bytes of the text; concatenated they are the text.
//   Version 1 (written until 2026-12-07, still read) is version 2 without
//   D and the sorted offsets: its directory follows the field count
//   directly, and a reader walks all of it.
// Dictionaries live in the store's "dicts" database (format.h).
//
// A structured body's head (format 4; the store keeps it in its "heads"
// database, format.h, under the body's etag): the first frame's text
// raw, with its fields' places, so that an index that reads only a
// document's leading fields (ids, dates, scores) reads ~100-1000 bytes
// from a dense B-tree instead of touching the body's pages at all (an
// index build over 90-900 KB documents spent most of its time faulting
// in each body's first page: bench/RESULTS.md). Written only when the
// head is at most kHeadMaxBytes, so that LMDB keeps it in a leaf page.
//   u8 version (1)
//   varint text length T, then the text's first T bytes (the first frame:
//     "{" and the leading fields, whole)
//   varint field count K; per field, in document order: varint key
//     length, the key as written (escapes kept), varint offset of the
//     value in those T bytes, varint value length, u8 flags (1: a key of
//     a field after the head starts with this key, unescaped, and a dot)
//   u32 the low 32 bits of the XXH3-64 of every byte above
#pragma once

#include <zstd.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace corvid::storage::body {

// Bodies at least this large are structured.
inline constexpr size_t kStructuredMinBytes = size_t{16} << 10;
// A frame of small values holds about this much text; a value at least
// this large gets a frame of its own. The first frame holds less: it has
// the fields a document starts with, which indexes read most (ids, dates,
// scores), so reading them decompresses about 1 KiB or less (unless the
// first value alone is larger; a first frame of
// 4 KiB, until 2026-12-07, took a fifth of an index build's time over
// the 90-900 KB documents, and built at half the rate: bench/RESULTS.md;
// the store is as large either way). Measured on 90-900 KB
// documents of ~1 KB values (bench/large_docs.py case c): 4 KiB frames
// stored 0.44 of the text and a GET of 897 KB took 1.7 ms; 16 KiB 0.40 and
// 1.25 ms; 128 KiB 0.38 and 1.35 ms (one zstd frame of the whole text,
// the previous format: 0.36 and 0.9 ms).
inline constexpr size_t kFirstFrameBytes = size_t{1} << 10;
inline constexpr size_t kFrameBytes = size_t{16} << 10;
// With a dictionary, bodies this large are compressed (without one,
// StoreOptions::compress_threshold).
inline constexpr size_t kDictCompressMinBytes = 128;

// A trained dictionary, ready for both directions. Immutable; shared.
class Dictionary {
 public:
  static std::shared_ptr<const Dictionary> Load(uint32_t id, std::string_view bytes, int level);
  ~Dictionary();
  uint32_t id() const { return id_; }
  const ZSTD_CDict* cdict() const { return cdict_; }
  const ZSTD_DDict* ddict() const { return ddict_; }
  size_t bytes() const { return bytes_; }

 private:
  Dictionary() = default;
  uint32_t id_ = 0;
  ZSTD_CDict* cdict_ = nullptr;
  ZSTD_DDict* ddict_ = nullptr;
  size_t bytes_ = 0;
};

// The dictionary with this id, or nullptr if there is none (Corruption
// then, for a body that names it).
using DictionaryLookup = std::function<std::shared_ptr<const Dictionary>(uint32_t id)>;

// The most bytes a head takes (LMDB keeps values up to ~2,000 bytes in
// its leaf pages with 4 KiB pages).
inline constexpr size_t kHeadMaxBytes = 1536;

// Encodes `json` (a JSON object's text, validated: the scan that cuts it
// relies on that; anything it does not recognize as an object is kept
// whole) into `out`; returns the DocValue flags to store with it. With
// `head`, a structured body's head goes there (emptied when it has none).
uint8_t Encode(std::string_view json, const Dictionary* dict, int level, size_t compress_threshold, std::string& out,
               std::string* head = nullptr);

// The head Encode writes for `json` (empty: none), from the text alone
// (Encode's cut and head, nothing compressed): what `corvid verify`
// compares a stored head with.
std::string HeadOf(std::string_view json);

// Whether the head answers a projection of `names` (sorted, unescaped, not
// empty) exactly as DecodeFields on its body would: each name is a key of
// the head, and no key after the head begins with it and a dot (a key
// after the head cannot be a name then: keys are unique). If so `out` gets
// that projection, byte for byte DecodeFields' text, and true; false if
// the body must be read. Corruption if the head is malformed.
Result<bool> HeadFields(std::string_view head, std::span<const std::string> names, std::string& out);

// The whole text back, exactly as written.
Status DecodeWhole(uint8_t flags, std::string_view stored, const DictionaryLookup& dicts, std::string& out);

// What DecodeFields(names) will decode, from the stored bytes' headers (no
// decompression): the text's size, or for a structured body and a non-empty
// `names` the size of the frames holding those fields. An estimate for
// sizing a batch: it reads the directory (not the frames) and leaves the
// header's checksum to the decode that follows.
Result<uint64_t> DecodedSize(uint8_t flags, std::string_view stored, std::span<const std::string> names);

// The top-level fields whose names are in `names` (sorted, unescaped), and
// the dotted keys whose first component is ("a.b" for "a": a key may stand
// for several levels, KeySpells in postings/definition.h), as
// one JSON object text in document order (a projection: what an index
// that reads only those fields needs). A structured body decompresses
// only the frames holding them; a whole body is decoded and returned
// whole (every reader of a projection accepts more fields than it asked
// for); empty `names`: the whole text.
// `decoded_size` (if given) gets what DecodedSize(names) gives for the
// same body, from the same read of its header.
Status DecodeFields(uint8_t flags, std::string_view stored, const DictionaryLookup& dicts,
                    std::span<const std::string> names, std::string& out, uint64_t* decoded_size = nullptr);

// Trains a dictionary of at most `max_bytes` from `samples` (ZDICT); empty
// when the samples are too few or too alike to train from.
std::string TrainDictionary(const std::vector<std::string>& samples, size_t max_bytes);

}  // namespace corvid::storage::body

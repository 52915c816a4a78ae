// Manifest file "MANIFEST", version 2 (little-endian), rewritten whole by
// WriteFileAtomic (tmp, fsync, rename, fsync dir) after every batch/merge:
//    0  char[8] magic "CVDMAN01"
//    8  u32 version (2; 1 ended with the home-made Checksum64), u32 0
//   16  u64 definition fingerprint
//   24  u64 lastIndexedEtag the listed segments cover
//   32  u64 next segment id
//   40  u32 segment count, u32 0
//   48  per segment: u64 id, u32 doc_count, u32 n, n bytes: the deleted doc
//       numbers as a portable-format roaring bitmap (RoaringFormatSpec)
//   end u64 XXH3-64 of every preceding byte
// Segment i lives in "seg-<id as 16 hex digits>.cvs" (format: segment_format.h).
// A manifest of another version is outdated: the index rebuilds.
#include "postings/manifest.h"

#include <xxhash.h>

#include <cstring>

#include "postings/file_util.h"

namespace corvid::postings {
namespace {

constexpr char kManifestMagic[8] = {'C', 'V', 'D', 'M', 'A', 'N', '0', '1'};
constexpr uint32_t kManifestVersion = 2;

}  // namespace

std::string EncodeManifest(uint64_t fingerprint, uint64_t etag, uint64_t next_segment_id,
                           std::span<const ManifestEntry> segments) {
  std::string out(kManifestMagic, 8);
  PutFixed<uint32_t>(out, kManifestVersion);
  PutFixed<uint32_t>(out, 0);
  PutFixed<uint64_t>(out, fingerprint);
  PutFixed<uint64_t>(out, etag);
  PutFixed<uint64_t>(out, next_segment_id);
  PutFixed<uint32_t>(out, static_cast<uint32_t>(segments.size()));
  PutFixed<uint32_t>(out, 0);
  for (const ManifestEntry& seg : segments) {
    PutFixed<uint64_t>(out, seg.id);
    PutFixed<uint32_t>(out, seg.doc_count);
    const size_t n = roaring_bitmap_portable_size_in_bytes(seg.deleted);
    PutFixed<uint32_t>(out, static_cast<uint32_t>(n));
    const size_t at = out.size();
    out.resize(at + n);
    roaring_bitmap_portable_serialize(seg.deleted, out.data() + at);
  }
  PutFixed<uint64_t>(out, XXH3_64bits(out.data(), out.size()));
  return out;
}

Result<DecodedManifest> DecodeManifest(std::string_view m) {
  auto bad = [](const char* why) { return Status::Corruption(std::string("MANIFEST: ") + why); };
  if (m.size() < 56 || std::memcmp(m.data(), kManifestMagic, 8) != 0) return bad("not a manifest");
  // A version no build wrote (0, or newer than this one) is believed only
  // if the file passes this version's checksum (a flipped bit there is
  // damage); an older one had another checksum.
  if (const uint32_t version = GetFixed<uint32_t>(m.data() + 8); version != kManifestVersion) {
    if ((version > kManifestVersion || version == 0) && XXH3_64bits(m.data(), m.size() - 8) != GetFixed<uint64_t>(m.data() + m.size() - 8))
      return bad(("checksum mismatch (and its format version, " + std::to_string(version) + ", is not this build's)").c_str());
    return bad(kOutdatedFormat.data());
  }
  if (XXH3_64bits(m.data(), m.size() - 8) != GetFixed<uint64_t>(m.data() + m.size() - 8)) return bad("checksum mismatch");
  DecodedManifest d;
  d.fingerprint = GetFixed<uint64_t>(m.data() + 16);
  d.etag = GetFixed<uint64_t>(m.data() + 24);
  d.next_segment_id = GetFixed<uint64_t>(m.data() + 32);
  const uint32_t count = GetFixed<uint32_t>(m.data() + 40);
  size_t p = 48;
  const size_t end = m.size() - 8;
  for (uint32_t i = 0; i < count; ++i) {
    if (p + 16 > end) return bad("truncated");
    DecodedManifest::Segment s;
    s.id = GetFixed<uint64_t>(m.data() + p);
    s.doc_count = GetFixed<uint32_t>(m.data() + p + 8);
    const uint32_t n = GetFixed<uint32_t>(m.data() + p + 12);
    p += 16;
    if (p + n > end) return bad("truncated");
    s.deleted.reset(roaring_bitmap_portable_deserialize_safe(m.data() + p, n));
    if (!s.deleted) return bad("bad deleted-docs bitmap");
    p += n;
    d.segments.push_back(std::move(s));
  }
  if (p != end) return bad("trailing bytes");
  return d;
}

}  // namespace corvid::postings

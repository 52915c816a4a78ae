// The manifest of a search index: which segment files make it up, their
// deleted documents, and the etag they cover. Rewritten whole and
// crash-safely after every batch and merge (search_index.cc); its encoder
// and decoder (format at the top of manifest.cc) live here.
#pragma once

#include <roaring/roaring.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "postings/segment.h"

namespace corvid::postings {

inline constexpr const char* kManifestName = "MANIFEST";

// One segment as the manifest lists it (for encoding: `deleted` is borrowed).
struct ManifestEntry {
  uint64_t id = 0;
  uint32_t doc_count = 0;
  const roaring_bitmap_t* deleted = nullptr;
};

std::string EncodeManifest(uint64_t fingerprint, uint64_t etag, uint64_t next_segment_id,
                           std::span<const ManifestEntry> segments);

struct DecodedManifest {
  uint64_t fingerprint = 0, etag = 0, next_segment_id = 0;
  struct Segment {
    uint64_t id = 0;
    uint32_t doc_count = 0;
    Bitmap deleted;
  };
  std::vector<Segment> segments;
};

// Corruption (naming what is wrong) for anything but a whole, checksummed
// manifest of this version.
Result<DecodedManifest> DecodeManifest(std::string_view bytes);

}  // namespace corvid::postings

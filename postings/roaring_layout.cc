// CRoaring's layout, written and read (roaring_layout.h).
#include "postings/roaring_layout.h"

#include <cstdlib>
#include <vector>

#include "postings/file_util.h"
#include "postings/segment.h"

namespace corvid::postings {
namespace {

// CRoaring's frozen layout of a bitmap with one container (as
// roaring_bitmap_frozen_serialize writes it): the container's data (array:
// u16 low bits per value; run: u16 start, u16 length - 1 per run), u16 key
// (high bits), u16 count (array: cardinality - 1; run: runs), u8 type
// (2 array, 3 run), u32 (containers << 15 | 13766).
constexpr uint8_t kFrozenArray = 2, kFrozenRun = 3;
constexpr uint32_t kFrozenCookie = 13766;

// The fast path of AppendFrozenBitmap: one chunk of at most 4096 values,
// written directly (no bitmap built). False, writing nothing, otherwise.
bool AppendFrozenSmall(std::string& out, std::span<const uint32_t> docs) {
  const size_t n = docs.size();
  if (n == 0 || n > 4096 || (docs.front() >> 16) != (docs.back() >> 16)) return false;
  size_t runs = 1;
  for (size_t i = 1; i < n; ++i) runs += docs[i] != docs[i - 1] + 1;
  // run_optimize keeps an array unless runs are strictly smaller (4r vs 2n bytes).
  const bool as_run = 2 * runs < n;
  const size_t at = out.size();
  out.resize(at + (as_run ? 4 * runs : 2 * n) + 9);
  char* p = out.data() + at;
  auto put16 = [&](uint32_t v) {
    const uint16_t x = static_cast<uint16_t>(v);
    std::memcpy(p, &x, 2);
    p += 2;
  };
  if (as_run) {
    size_t start = 0;
    for (size_t i = 1; i <= n; ++i) {
      if (i < n && docs[i] == docs[i - 1] + 1) continue;
      put16(docs[start]);
      put16(static_cast<uint32_t>(i - start - 1));
      start = i;
    }
  } else {
    for (uint32_t d : docs) put16(d);
  }
  put16(docs.front() >> 16);
  put16(static_cast<uint32_t>(as_run ? runs : n - 1));
  *p++ = static_cast<char>(as_run ? kFrozenRun : kFrozenArray);
  const uint32_t header = (uint32_t{1} << 15) | kFrozenCookie;
  std::memcpy(p, &header, 4);
  return true;
}

void AppendFrozenByLibrary(std::string& out, std::span<const uint32_t> docs) {
  Bitmap bm(roaring_bitmap_of_ptr(docs.size(), docs.data()));
  roaring_bitmap_run_optimize(bm.get());
  const size_t at = out.size();
  out.resize(at + roaring_bitmap_frozen_size_in_bytes(bm.get()));
  roaring_bitmap_frozen_serialize(bm.get(), out.data() + at);
}

// Whether the fast path writes exactly what this CRoaring writes: checked
// once per process on arrays and runs around the array/run threshold, so
// another library version falls back to the library instead of writing a
// layout it cannot read.
bool FrozenFastPathAgrees() {
  static const bool agrees = [] {
    const std::vector<std::vector<uint32_t>> cases = {{5}, {1, 2}, {1, 2, 3}, {1, 3, 5, 7, 9}, {7, 8, 20, 21},
                                                      {7, 8, 20, 21, 22}, {65536 * 3 + 1, 65536 * 3 + 2, 65536 * 4 - 1}};
    for (const auto& c : cases) {
      std::string a, b;
      if (!AppendFrozenSmall(a, c)) return false;
      AppendFrozenByLibrary(b, c);
      if (a != b) return false;
    }
    return true;
  }();
  return agrees;
}

}  // namespace

void AppendFrozenBitmap(std::string& out, std::span<const uint32_t> docs) {
  if (FrozenFastPathAgrees() && AppendFrozenSmall(out, docs)) return;
  AppendFrozenByLibrary(out, docs);
}

bool FrozenReaderAgrees() {
  static const bool agrees = [] {
    std::vector<std::vector<uint32_t>> cases = {{5}, {1, 2, 3}, {7, 8, 20, 21, 22}, {65536 * 3 + 1, 65536 * 4 - 1}};
    std::vector<uint32_t> mixed;  // a run, an array and a bitset chunk, in that order
    for (uint32_t v = 10; v < 3000; ++v) mixed.push_back(v);
    for (uint32_t v = 65536; v < 65536 + 4000; v += 7) mixed.push_back(v);
    for (uint32_t v = 2 * 65536; v < 3 * 65536; v += 3) mixed.push_back(v);
    cases.push_back(mixed);
    for (const auto& c : cases) {
      std::string frozen;  // ForEachFrozen reads unaligned: no alignment needed
      AppendFrozenByLibrary(frozen, c);
      std::vector<uint32_t> read;
      ForEachFrozen(frozen.data(), frozen.size(), [&](uint32_t v) { read.push_back(v); });
      if (read != c) return false;
    }
    return true;
  }();
  return agrees;
}

const roaring_bitmap_t* ShortListBitmap(uint32_t chunks, const uint8_t* pairs, const uint16_t* lows_in) {
  const size_t c = chunks;
  const size_t head = sizeof(roaring_bitmap_t) + c * (sizeof(void*) + sizeof(array_container_t));
  char* arena = static_cast<char*>(std::malloc(head + 3 * c));
  if (arena == nullptr) return nullptr;
  auto* bm = reinterpret_cast<roaring_bitmap_t*>(arena);
  auto** containers = reinterpret_cast<void**>(arena + sizeof(roaring_bitmap_t));
  auto* arrays = reinterpret_cast<array_container_t*>(arena + sizeof(roaring_bitmap_t) + c * sizeof(void*));
  auto* keys = reinterpret_cast<uint16_t*>(arena + head);
  auto* typecodes = reinterpret_cast<uint8_t*>(keys + c);
  roaring_array_t& ra = bm->high_low_container;
  ra.size = ra.allocation_size = static_cast<int32_t>(c);
  ra.containers = containers;
  ra.keys = keys;
  ra.typecodes = typecodes;
  ra.flags = ROARING_FLAG_FROZEN;
  const uint8_t* p = pairs;
  const uint16_t* lows = lows_in;
  for (size_t k = 0; k < c; ++k) {
    uint32_t key, count;
    p = GetVarint(p, &key);
    p = GetVarint(p, &count);
    keys[k] = static_cast<uint16_t>(key);
    typecodes[k] = ARRAY_CONTAINER_TYPE_CODE;
    arrays[k] = array_container_t{static_cast<int32_t>(count), static_cast<int32_t>(count), const_cast<uint16_t*>(lows)};
    containers[k] = &arrays[k];
    lows += count;
  }
  return bm;
}


}  // namespace corvid::postings

// Sorting and deep paging: the sort keys a request names, a hit's key and
// the total order over keys, the searchAfter key read against them, and
// sort values written back as searchAfter reads them.
#pragma once

#include <roaring/roaring.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "postings/search_index.h"
#include "postings/snapshot.h"

namespace corvid::postings::search {

struct SortKey {
  const FieldDef* field = nullptr;  // nullptr: _score
  bool desc = true;
};

struct Hit {
  double score;
  uint32_t seg;
  uint32_t doc;
  std::string_view id;
  std::vector<Number> num;            // per sort key (numeric)
  std::vector<std::string_view> str;  // per sort key (keyword)
  std::vector<bool> missing;
};

// The request's "sort" ("", or comma-separated [-|+]field / _score) as
// keys; InvalidArgument "sort: ..." for an unknown or unsortable field.
Result<std::vector<SortKey>> ParseSort(const SearchDefinitionImpl& def, const std::string& sort);

// The answer's order: a total order, its last key the id (the key
// searchAfter compares with).
inline bool HitLess(const std::vector<SortKey>& sort, const Hit& a, const Hit& b) {
  for (size_t si = 0; si < sort.size(); ++si) {
    const SortKey& key = sort[si];
    if (key.field == nullptr) {
      if (a.score != b.score) return a.score > b.score;
      continue;
    }
    if (a.missing[si] != b.missing[si]) return b.missing[si];  // missing values sort last
    if (a.missing[si]) continue;
    if (key.field->kind != FieldKind::kText) {
      if (a.num[si] != b.num[si]) return key.desc ? a.num[si] > b.num[si] : a.num[si] < b.num[si];
    } else if (a.str[si] != b.str[si]) {
      return key.desc ? a.str[si] > b.str[si] : a.str[si] < b.str[si];
    }
  }
  if (a.score != b.score) return a.score > b.score;  // _score as the tie-break
  return a.id < b.id;
}

// Whether the sort names a field (not only _score): a field sort, whose
// walks are pinned (walks.h).
inline bool SortsByField(const std::vector<SortKey>& sort) {
  for (const SortKey& k : sort)
    if (k.field != nullptr) return true;
  return false;
}

// `at`'s place in its walk (walks.h): the request's q, filter and op, the
// sort keys as read, then `at`'s sort key, as bytes equal exactly when two keys are the same
// place in the same walk. Numbers are taken as they read (ParseNumber), not
// as written, so a client that rewrites a key's JSON text (1.5e-07 for
// 1.5e-7) still names the place.
std::string WalkPosition(const SearchRequest& req, const std::vector<SortKey>& sort, const Hit& at);

// Calls keep(hit) for every final match docs[j] of segment k (scores[j]:
// its score), with its values of the sort's fields.
void FieldSortHits(const Segment& seg, uint32_t k, const std::vector<SortKey>& sort, const roaring_bitmap_t* final_bm,
                   const std::vector<uint32_t>& docs, const std::vector<double>& scores,
                   const std::function<void(Hit&&)>& keep);

// Reads req.search_after against the request's sort keys into `after`: a
// Hit with that key (score, per sort key its value or missing, and the id;
// strings point into req). InvalidParameter "searchAfter" when offset is
// not 0 or the key does not fit the sort; `after` is then unspecified.
Status ReadSearchAfter(const std::vector<SortKey>& sort, const SearchRequest& req, Hit& after);

// A number or date sort value as JSON text that ParseNumber reads back to
// the same Number: an integer exactly (with its residual beyond 2^53), any
// other value as RapidJSON's round-trip double.
template <class Writer>
void WriteSortNumber(Writer& w, Number n) {
  if (n.residual != 0) {
    __extension__ using Int128 = __int128;
    const Int128 v = static_cast<Int128>(n.value) + n.residual;
    if (v < 0)
      w.Int64(static_cast<int64_t>(v));
    else
      w.Uint64(static_cast<uint64_t>(v));
    return;
  }
  if (std::trunc(n.value) == n.value && n.value >= -0x1p63 && n.value < 0x1p64) {
    if (n.value < 0x1p63)
      w.Int64(static_cast<int64_t>(n.value));
    else
      w.Uint64(static_cast<uint64_t>(n.value));
    return;
  }
  w.Double(n.value);
}

}  // namespace corvid::postings::search

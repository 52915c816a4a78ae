// Sorting and deep paging (sort.h).
#include "postings/search/sort.h"

#include <algorithm>
#include <limits>

#include "postings/search/compiler.h"
#include "postings/search/query.h"

namespace corvid::postings::search {
namespace {

// What a searchAfter value is, for messages.
std::string DescribeSortValue(const SortValue& v) {
  switch (v.type) {
    case SortValue::Type::kNull:
      return "null";
    case SortValue::Type::kNumber:
      return "the number " + v.text;
    case SortValue::Type::kString:
      break;
  }
  return "a string";
}

}  // namespace

Result<std::vector<SortKey>> ParseSort(const SearchDefinitionImpl& def, const std::string& sort_text) {
  std::vector<SortKey> sort;
  if (sort_text.empty()) return sort;
  size_t start = 0;
  while (start <= sort_text.size()) {
    size_t comma = sort_text.find(',', start);
    std::string item = sort_text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? sort_text.size() + 1 : comma + 1;
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (item.empty()) return Bad("sort: empty sort key");
    SortKey key;
    key.desc = item[0] == '-';
    if (item[0] == '-' || item[0] == '+') item.erase(item.begin());
    if (item == "_score") {
      key.desc = true;
    } else {
      key.field = def.Find(item);
      if (key.field == nullptr) return Bad("sort: unknown field '" + item + "'");
      if (key.field->kind == FieldKind::kText && !key.field->WholeValues())
        return Bad("sort: field '" + item + "' is a text field; sort on number, date or keyword/facet fields");
    }
    sort.push_back(key);
  }
  return sort;
}

void FieldSortHits(const Segment& seg, uint32_t k, const std::vector<SortKey>& sort, const roaring_bitmap_t* final_bm,
                   const std::vector<uint32_t>& docs, const std::vector<double>& scores,
                   const std::function<void(Hit&&)>& keep) {
  const size_t m = docs.size();
  // A document with several values sorts by its smallest ascending and
  // its largest descending (Elasticsearch's default sort mode).
  // Keyword sort keys: from the terms in dictionary order.
  std::vector<std::vector<std::string_view>> kw(sort.size());
  for (size_t si = 0; si < sort.size(); ++si) {
    const FieldDef* fd = sort[si].field;
    if (fd == nullptr || fd->kind != FieldKind::kText) continue;
    const bool largest = sort[si].desc;
    kw[si].assign(m, std::string_view());
    std::vector<bool> set(m, false);
    for (uint32_t ti = 0; ti < seg.term_count(fd->slot); ++ti) {
      auto bm = seg.Postings(fd->slot, ti);
      Bitmap both(roaring_bitmap_and(bm.get(), final_bm));
      roaring_uint32_iterator_t it;
      roaring_init_iterator(both.get(), &it);
      for (; it.has_value; roaring_advance_uint32_iterator(&it)) {
        size_t j = std::lower_bound(docs.begin(), docs.end(), it.current_value) - docs.begin();
        if (!set[j] || largest) {
          set[j] = true;
          kw[si][j] = seg.term(fd->slot, ti);
        }
      }
    }
    for (size_t j = 0; j < m; ++j)
      if (!set[j]) kw[si][j] = std::string_view(nullptr, 0);
  }
  // Numeric keys from the values in ascending order, where the column
  // (the double of each document's smallest value) is not the key: the
  // largest value descending when some document has several, and every
  // key when some value is an integer beyond 2^53 (a residual).
  std::vector<std::vector<Number>> exact(sort.size());
  for (size_t si = 0; si < sort.size(); ++si) {
    const FieldDef* fd = sort[si].field;
    if (fd == nullptr || fd->kind == FieldKind::kText) continue;
    const bool largest = sort[si].desc && seg.multi_valued(fd->slot);
    if (!largest && !seg.has_residuals(fd->slot)) continue;
    exact[si].assign(m, Number{std::numeric_limits<double>::quiet_NaN(), 0});
    for (const NumEntry& e : seg.sorted(fd->slot)) {
      const uint32_t doc = e.doc;  // a copy: NumEntry is packed
      const auto at = std::lower_bound(docs.begin(), docs.end(), doc);
      if (at == docs.end() || *at != doc) continue;
      Number& key = exact[si][at - docs.begin()];
      if (largest || std::isnan(key.value)) key = e.number();
    }
  }
  for (size_t j = 0; j < m; ++j) {
    Hit h{scores[j], k, docs[j], seg.id(docs[j]), {}, {}, {}};
    for (size_t si = 0; si < sort.size(); ++si) {
      const FieldDef* fd = sort[si].field;
      Number v;
      std::string_view sv;
      bool missing = false;
      if (fd != nullptr && fd->kind != FieldKind::kText) {
        v = exact[si].empty() ? Number{seg.column(fd->slot)[docs[j]], 0} : exact[si][j];
        missing = std::isnan(v.value);
      } else if (fd != nullptr) {
        sv = kw[si][j];
        missing = sv.data() == nullptr;
      }
      h.num.push_back(v);
      h.str.push_back(sv);
      h.missing.push_back(missing);
    }
    keep(std::move(h));
  }
}

std::string WalkPosition(const SearchRequest& req, const std::vector<SortKey>& sort, const Hit& at) {
  std::string p;
  auto text = [&](std::string_view s) {
    const auto n = static_cast<uint32_t>(s.size());
    p.append(reinterpret_cast<const char*>(&n), sizeof n);
    p.append(s);
  };
  auto number = [&](double v, int32_t residual) {
    if (v == 0) v = 0;  // -0 reads back as 0
    p.append(reinterpret_cast<const char*>(&v), sizeof v);
    p.append(reinterpret_cast<const char*>(&residual), sizeof residual);
  };
  text(req.q);
  text(req.filter);
  p.push_back(req.op == DefaultOperator::kAnd ? 'a' : 'o');
  for (const SortKey& k : sort) {  // the keys as read: "n,-d", "n, -d" and "+n,-d" are one sort
    text(k.field == nullptr ? std::string_view() : std::string_view(k.field->name));
    p.push_back(k.desc ? 'd' : 'a');
  }
  for (size_t si = 0; si < sort.size(); ++si) {
    const FieldDef* fd = sort[si].field;
    if (fd == nullptr) {
      p.push_back('s');
      number(at.score, 0);
    } else if (at.missing[si]) {
      p.push_back('m');
    } else if (fd->kind != FieldKind::kText) {
      p.push_back('n');
      number(at.num[si].value, at.num[si].residual);
    } else {
      p.push_back('t');
      text(at.str[si]);
    }
  }
  text(at.id);
  return p;
}

Status ReadSearchAfter(const std::vector<SortKey>& sort, const SearchRequest& req, Hit& after) {
  const std::vector<SortValue>& key = *req.search_after;
  const size_t n = sort.empty() ? 1 : sort.size();  // the default sort is by score
  auto name = [&](size_t i) -> std::string {
    if (i == n) return "the document id";
    if (sort.empty() || sort[i].field == nullptr) return "_score";
    return "sort field '" + sort[i].field->name + "'";
  };
  if (req.offset != 0)
    return Status::InvalidParameter(
        "searchAfter", "searchAfter: offset must be 0 with searchAfter (the key says where the page starts), got " +
                           std::to_string(req.offset));
  if (key.size() != n + 1) {
    std::string expected;
    for (size_t i = 0; i <= n; ++i) expected += (i == 0 ? "" : i == n ? ", then " : ", ") + name(i);
    return Status::InvalidParameter("searchAfter", "searchAfter: expected " + std::to_string(n + 1) +
                                                       " values as a hit's \"sort\" holds them (" + expected +
                                                       "), got " + std::to_string(key.size()));
  }
  after = Hit{0, 0, 0, {}, {}, {}, {}};
  after.num.assign(sort.size(), Number{});
  after.str.assign(sort.size(), std::string_view());
  after.missing.assign(sort.size(), false);
  bool score_read = false;
  for (size_t i = 0; i <= n; ++i) {
    const SortValue& v = key[i];
    const FieldDef* fd = i == n || sort.empty() ? nullptr : sort[i].field;
    auto wrong = [&](const char* expected) {
      return Status::InvalidParameter("searchAfter", "searchAfter[" + std::to_string(i) + "]: " + name(i) + " takes " +
                                                         expected + ", got " + DescribeSortValue(v));
    };
    if (i == n) {
      if (v.type != SortValue::Type::kString) return wrong("a string");
      after.id = v.text;
    } else if (fd == nullptr) {
      const std::optional<Number> x = v.type == SortValue::Type::kNumber ? ParseNumber(v.text) : std::nullopt;
      if (!x) return wrong("a number");
      // A hit has one score: a sort naming _score twice carries it twice, and the first is read.
      if (!score_read) after.score = x->value;
      score_read = true;
    } else if (v.type == SortValue::Type::kNull) {
      after.missing[i] = true;  // missing values sort last, whatever the direction
    } else if (fd->kind != FieldKind::kText) {
      const std::optional<Number> x = v.type == SortValue::Type::kNumber ? ParseNumber(v.text) : std::nullopt;
      if (!x)
        return wrong(fd->kind == FieldKind::kDate ? "a number (milliseconds since the epoch) or null"
                                                  : "a number or null");
      after.num[i] = *x;
    } else {
      if (v.type != SortValue::Type::kString) return wrong("a string or null");
      after.str[i] = v.text;
    }
  }
  return Status::Ok();
}

}  // namespace corvid::postings::search

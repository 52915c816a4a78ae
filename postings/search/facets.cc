// Facets (facets.h).
#include "postings/search/facets.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>

namespace corvid::postings::search {

void CountFacets(const SearchDefinitionImpl& def, const Segment& seg, const roaring_bitmap_t* final_bm,
                 const std::vector<std::string>& facets, FacetCounts& facet_counts) {
  for (const auto& f : facets) {
    const FieldDef* fd = def.Find(f);
    auto& counts = facet_counts[f];
    for (uint32_t ti = 0; ti < seg.term_count(fd->slot); ++ti) {
      auto bm = seg.Postings(fd->slot, ti);
      uint64_t c = roaring_bitmap_and_cardinality(bm.get(), final_bm);
      if (c > 0) counts[std::string(seg.term(fd->slot, ti))] += c;
    }
  }
}

std::string RenderFacets(const std::vector<std::string>& facets, FacetCounts& facet_counts) {
  rapidjson::StringBuffer fb;
  rapidjson::Writer<rapidjson::StringBuffer> fw(fb);
  fw.StartObject();
  for (const auto& f : facets) {
    fw.Key(f.data(), static_cast<rapidjson::SizeType>(f.size()));
    std::vector<std::pair<std::string, uint64_t>> v(facet_counts[f].begin(), facet_counts[f].end());
    std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    fw.StartObject();
    for (const auto& [val, c] : v) {
      fw.Key(val.data(), static_cast<rapidjson::SizeType>(val.size()));
      fw.Uint64(c);
    }
    fw.EndObject();
  }
  fw.EndObject();
  return std::string(fb.GetString(), fb.GetSize());
}

}  // namespace corvid::postings::search

// Rendering hits (render.h).
#include "postings/search/render.h"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <map>

#include "common/exact_json.h"
#include "postings/search/highlight.h"

namespace corvid::postings::search {

Status RenderHits(const Snapshot& snap, const SearchRequest& req, const std::vector<Hit>& hits, size_t top,
                  const std::vector<SortKey>& sort, const std::vector<std::string>& highlight, const CNode& root,
                  std::string& out) {
  const SearchDefinitionImpl& def = *snap.def;
  std::map<uint32_t, HighlightQuery> hl_terms;
  if (!highlight.empty()) CollectHighlight(root, false, hl_terms);
  // A hit's "fields" come from its segment when every path asked for is
  // one the definition stores there (the default: all of them, copied as
  // indexed); otherwise, and for "*" and highlights, from the document.
  const std::vector<std::string>* store_paths = &def.store();
  const std::vector<std::vector<std::string>>* store_split = &def.store_split();
  bool store_all = def.store_all();
  std::vector<std::string> asked_paths;
  std::vector<std::vector<std::string>> asked_split;
  if (req.fields) {
    store_all = false;
    for (const auto& f : *req.fields) {
      if (f == "*") {
        store_all = true;
      } else if (std::find(asked_paths.begin(), asked_paths.end(), f) == asked_paths.end()) {
        asked_paths.push_back(f);
        asked_split.push_back(SplitPath(f));
      }
    }
    store_paths = &asked_paths;
    store_split = &asked_split;
  }
  const bool want_fields = store_all || !store_paths->empty();
  const bool all_stored = def.stores_in_segments() && !store_all &&
                          std::all_of(store_paths->begin(), store_paths->end(), [&](const std::string& p) {
                            return std::find(def.store().begin(), def.store().end(), p) != def.store().end();
                          });
  const bool whole_stored = all_stored && *store_paths == def.store();  // copy the segment's object as it is
  std::string scratch;  // a hit's stored object, parsed in place when only some paths are asked for
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.StartArray();
  for (size_t i = req.offset; i < top; ++i) {
    const Hit& h = hits[i];
    w.StartObject();
    w.Key("id");
    w.String(h.id.data(), static_cast<rapidjson::SizeType>(h.id.size()));
    w.Key("score");
    w.Double(h.score);
    const Segment& seg = *snap.segments[h.seg].segment;
    const bool fields_from_segment = want_fields && all_stored && seg.has_stored();
    if (fields_from_segment) {
      const std::string_view stored = seg.stored(h.doc);
      w.Key("fields");
      if (whole_stored) {
        w.RawValue(stored.data(), stored.size(), rapidjson::kObjectType);
      } else {
        scratch.assign(stored.data(), stored.size());
        rapidjson::Document d;
        BigIntegers big;
        if (ParseInsituWithExactNumbers(d, scratch.data(), &big).IsError() || !d.IsObject())
          return Status::Corruption("a stored-fields record of segment " + std::to_string(h.seg) + " is not an object");
        w.StartObject();
        for (const std::string& p : *store_paths) {
          auto m = d.FindMember(rapidjson::StringRef(p.data(), p.size()));
          if (m == d.MemberEnd()) continue;
          w.Key(p.data(), static_cast<rapidjson::SizeType>(p.size()));
          WriteExactly(m->value, w, &big);
        }
        w.EndObject();
      }
    }
    if (!want_fields) {  // every hit has "fields", as API.md shows it, if only {}
      w.Key("fields");
      w.StartObject();
      w.EndObject();
    }
    const bool fetch = ((want_fields && !fields_from_segment) || !highlight.empty()) && req.fetch_document;
    if (fetch) {
      auto json = req.fetch_document(h.id);
      // The whole document goes out as it is stored: the same JSON value,
      // every number exactly as written (API.md), and no parse unless
      // paths or highlights need one.
      const bool whole = json && want_fields && !fields_from_segment && store_all;
      if (whole) {
        w.Key("fields");
        w.RawValue(json->data(), json->size(), rapidjson::kObjectType);
      }
      rapidjson::Document d;
      BigIntegers big;  // the digits of integers beyond 64 bits, for "fields"
      // In place: the values point into *json (which outlives d) instead
      // of being copied; a stored body was validated when written, so it
      // holds no raw NUL before its end.
      const bool parse = json && ((want_fields && !fields_from_segment && !store_all) || !highlight.empty());
      // A document deleted since the index read it (or not an object)
      // still answers with every key asked for: no fields, no fragments.
      const bool parsed = parse && !ParseInsituWithExactNumbers(d, json->data(), &big).IsError() && d.IsObject();
      if (want_fields && !fields_from_segment && !whole) {
        w.Key("fields");
        if (parsed && !store_all) {
          WriteStoredFields(d, *store_paths, *store_split, w, &big);
        } else {
          w.StartObject();
          w.EndObject();
        }
      }
      if (!highlight.empty()) {
        w.Key("highlights");
        w.StartObject();
        for (const auto& f : highlight) {
          const FieldDef* fd = def.Find(f);
          std::vector<std::string> frags;
          auto it = hl_terms.find(fd->slot);
          if (parsed && it != hl_terms.end()) {
            ForEachValue(d, fd->path, 0, [&](const rapidjson::Value& v) {
              if (!v.IsString()) return;
              std::string_view text(v.GetString(), v.GetStringLength());
              HighlightFragments(it->second, *fd->analyzer, text, frags);
            });
          }
          w.Key(f.data(), static_cast<rapidjson::SizeType>(f.size()));
          w.StartArray();
          for (const auto& fr : frags) w.String(fr.data(), static_cast<rapidjson::SizeType>(fr.size()));
          w.EndArray();
        }
        w.EndObject();
      }
    }
    // Written after the rest of the hit, as Elasticsearch places "sort".
    w.Key("sort");
    w.StartArray();
    if (sort.empty()) w.Double(h.score);
    for (size_t si = 0; si < sort.size(); ++si) {
      const FieldDef* fd = sort[si].field;
      if (fd == nullptr) {
        w.Double(h.score);
      } else if (h.missing[si]) {
        w.Null();
      } else if (fd->kind != FieldKind::kText) {
        WriteSortNumber(w, h.num[si]);
      } else {
        w.String(h.str[si].data(), static_cast<rapidjson::SizeType>(h.str[si].size()));
      }
    }
    w.String(h.id.data(), static_cast<rapidjson::SizeType>(h.id.size()));
    w.EndArray();
    w.EndObject();
    if (buf.GetSize() > req.max_response_bytes)
      return Status::TooLarge("the hits would exceed " + std::to_string(req.max_response_bytes) +
                              " bytes; ask for fewer with limit, or for fewer fields");
  }
  w.EndArray();
  out.assign(buf.GetString(), buf.GetSize());
  return Status::Ok();
}

}  // namespace corvid::postings::search

// The index endpoints of API.md: definitions (PUT/GET/DELETE /indexes),
// aggregation results with read-your-writes waits, the admin progress
// listing and controls, and GET /metrics.
#include <charconv>
#include <cmath>
#include <ctime>
#include <optional>

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include "analyzers/analyzer.h"
#include "common/exact_json.h"
#include "common/memory_budget.h"
#include "mapreduce/mapreduce_index.h"
#include "postings/search_index.h"
#include "cluster/cluster_node.h"
#include "server/router_internal.h"

namespace corvid::server {

using namespace detail;

namespace {

// Bounds on a query's text and lists, checked before anything is parsed
// or compiled (docs/http-choices.md); the compiler bounds its terms and
// expansions (postings/searcher.cc).
constexpr size_t kMaxQueryBytes = 32 * 1024;
constexpr size_t kMaxSortKeys = 32;
constexpr size_t kMaxListItems = 256;  // fields, highlight, facets

std::vector<std::string> SplitList(std::string_view s) {
  std::vector<std::string> out;
  while (!s.empty()) {
    size_t comma = s.find(',');
    std::string_view item = s.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (!item.empty()) out.emplace_back(item);
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

std::string IsoTime(std::chrono::system_clock::time_point t) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  std::time_t secs = std::time_t(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[80];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, int(ms % 1000));
  return buf;
}

void WriteProgress(JsonWriter& w, const indexing::IndexProgress& p, const std::string* definition) {
  w.StartObject();
  w.Key("name");
  WriteString(w, p.name);
  w.Key("type");
  WriteString(w, indexing::IndexTypeName(p.type));
  w.Key("collection");
  WriteString(w, p.collection);
  if (definition) {
    w.Key("definition");
    w.RawValue(definition->data(), definition->size(), rapidjson::kObjectType);
  }
  w.Key("state");
  WriteString(w, indexing::IndexStateName(p.state));
  if (!p.state_message.empty()) {
    w.Key("stateMessage");
    WriteString(w, p.state_message);
  }
  w.Key("lastIndexedEtag");
  w.Uint64(p.last_indexed_etag);
  w.Key("backlog");
  w.Uint64(p.backlog);
  w.Key("progress");
  w.Double(p.progress);
  w.Key("stale");
  w.Bool(p.stale);
  w.Key("docsPerSec");
  w.Double(p.docs_per_sec);
  w.Key("etaSeconds");
  if (p.eta_seconds) w.Double(*p.eta_seconds);
  else w.Null();
  w.Key("entries");
  w.Uint64(p.entries);
  w.Key("errors");
  w.StartObject();
  w.Key("count");
  w.Uint64(p.error_count);
  w.Key("recent");
  w.StartArray();
  for (const auto& e : p.recent_errors) {
    w.StartObject();
    w.Key("etag");
    w.Uint64(e.etag);
    w.Key("id");
    WriteString(w, e.id);
    w.Key("message");
    WriteString(w, e.message);
    w.Key("at");
    WriteString(w, IsoTime(e.at));
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  w.Key("lastBatch");
  w.StartObject();
  w.Key("docs");
  w.Uint64(p.last_batch_docs);
  w.Key("ms");
  w.Double(p.last_batch_ms);
  w.EndObject();
  w.Key("memoryBytes");
  w.Uint64(p.memory_bytes);
  w.Key("diskBytes");
  w.Uint64(p.disk_bytes);
  if (p.replacing) {
    // A changed definition building side by side (API.md, Indexes).
    w.Key("replacing");
    WriteProgress(w, *p.replacing, definition ? &p.replacing_definition : nullptr);
  }
  w.EndObject();
}

// The freshness keys every query answer carries (API.md, Queries).
void WriteFreshness(JsonWriter& w, bool stale, uint64_t index_etag, std::chrono::steady_clock::time_point start) {
  w.Key("stale");
  w.Bool(stale);
  w.Key("indexEtag");
  w.Uint64(index_etag);
  w.Key("tookMs");
  w.Double(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
}

Response IndexNotFound(std::string_view name) {
  return ErrorResponse(404, "not_found", "no index named '" + std::string(name) + "'");
}

}  // namespace

// GET /indexes
void Router::State::ListIndexes(Reply& reply) const {
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  w.Key("indexes");
  w.StartArray();
  for (const auto& p : engine->AllProgress()) {
    auto def = engine->Definition(p.name);
    if (def.ok()) WriteProgress(w, p, &*def);
  }
  w.EndArray();
  w.EndObject();
  reply(JsonResponse(200, buf));
}

// GET /indexes/{name}
void Router::State::GetIndex(const std::string& name, Reply& reply) const {
  auto p = engine->Progress(name);
  auto def = engine->Definition(name);
  if (!p.ok() || !def.ok()) return reply(IndexNotFound(name));
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  WriteProgress(w, *p, &*def);
  reply(JsonResponse(200, buf));
}

// PUT /indexes/{name}
void Router::State::PutIndex(Request& req, const std::string& name, Reply& reply) {
  if (!IsJsonContentType(req.content_type, false))
    return reply(ErrorResponse(415, "unsupported_media_type", "Content-Type must be application/json"));
  if (auto problem = ValidateJsonObject(req.body)) return reply(ProblemResponse(*problem));
  auto answer = [reply = std::move(reply), name](Result<indexing::PutOutcome> outcome) {
    if (!outcome.ok()) {
      if (outcome.status().code() == StatusCode::kInvalidArgument)
        return reply(ErrorResponse(400, "invalid_definition", outcome.status().message(), outcome.status().offset()));
      return reply(FromStatus(outcome.status()));
    }
    const char* result = *outcome == indexing::PutOutcome::kCreated    ? "created"
                         : *outcome == indexing::PutOutcome::kReplaced ? "replaced"
                                                                        : "unchanged";
    rapidjson::StringBuffer buf;
    JsonWriter w(buf);
    w.StartObject();
    w.Key("name");
    WriteString(w, name);
    w.Key("result");
    w.String(result);
    w.EndObject();
    reply(JsonResponse(*outcome == indexing::PutOutcome::kCreated ? 201 : 200, buf));
  };
  // In a cluster the definition is a log entry: every node gets it.
  if (options.cluster) return options.cluster->SubmitIndexPut(name, std::move(req.body), std::move(answer));
  answer(engine->PutIndex(name, req.body));
}

// DELETE /indexes/{name}
void Router::State::DeleteIndex(const std::string& name, Reply& reply) {
  auto answer = [reply = std::move(reply), name](Status s) {
    if (!s.ok()) return reply(s.code() == StatusCode::kNotFound ? IndexNotFound(name) : FromStatus(s));
    rapidjson::StringBuffer buf;
    JsonWriter w(buf);
    w.StartObject();
    w.Key("name");
    WriteString(w, name);
    w.Key("deleted");
    w.Bool(true);
    w.EndObject();
    reply(JsonResponse(200, buf));
  };
  if (options.cluster) return options.cluster->SubmitIndexDelete(name, std::move(answer));
  answer(engine->DeleteIndex(name));
}

void Router::State::Results(const Target& t, const std::string& name, Reply& reply) {
  const auto start = std::chrono::steady_clock::now();
  auto reader = engine->Reader(name);
  if (!reader.ok()) return reply(IndexNotFound(name));
  if (reader->type != indexing::IndexType::kMapReduce)
    return reply(ErrorResponse(400, "invalid_argument",
                               "index '" + name + "' is a " + indexing::IndexTypeName(reader->type) + " index; results need a mapreduce index"));
  uint64_t min_etag = 0, wait_ms = 0;
  std::vector<std::pair<std::string, std::string>> params;
  for (const auto& [k, v] : t.query) {
    if (k == "minEtag" || k == "waitMs") {
      uint64_t& out = k == "minEtag" ? min_etag : wait_ms;
      if (!ParseUint(v, out))
        return reply(ErrorResponse(400, "invalid_argument", k + " must be a non-negative integer"));
      continue;
    }
    if (k == "offset") {  // API.md: /results pages by key range; offset stays within the window
      uint64_t offset = 0;
      if (ParseUint(v, offset) && offset > options.max_result_window)
        return reply(ErrorResponse(400, "result_window_too_large",
                                   "offset must be at most " + std::to_string(options.max_result_window) +
                                       " (--max-result-window); page by key range instead (e.g. month.gt=<last key>)"));
    }
    if (k == "sort" && SplitList(v).size() > kMaxSortKeys)
      return reply(ErrorResponse(400, "invalid_argument", "sort lists more than " + std::to_string(kMaxSortKeys) + " keys"));
    params.emplace_back(k, v);
  }
  wait_ms = std::min(wait_ms, kMaxWaitMs);

  auto run = [self = shared_from_this(), name, params = std::move(params), start, min_etag,
              reply = std::move(reply)] {
    auto reader = self->engine->Reader(name);
    if (!reader.ok() || !reader->mapreduce) return reply(IndexNotFound(name));
    auto result = reader->mapreduce->Query(params, self->options.max_response_bytes);
    if (!result.ok() && result.status().code() == StatusCode::kTooLarge)
      return reply(ResponseTooLarge(result.status()));
    if (!result.ok()) return reply(FromStatus(result.status()));
    uint64_t index_etag = self->engine->AnswerEtag(*reader, result->snapshot_etag);
    // Stale: the collection has unprocessed changes, or the minEtag the
    // client asked for was not reached within waitMs.
    bool stale = index_etag < min_etag || self->engine->IsStale(*reader, index_etag);
    rapidjson::StringBuffer buf;
    JsonWriter w(buf);
    w.StartObject();
    w.Key("rows");
    w.RawValue(result->rows_json.data(), result->rows_json.size(), rapidjson::kArrayType);
    w.Key("total");
    w.Uint64(result->total);
    WriteFreshness(w, stale, index_etag, start);
    w.EndObject();
    reply(JsonResponse(200, buf));
  };
  if (min_etag == 0 || wait_ms == 0 || reader->indexed_etag >= min_etag) return run();

  WaitForIndex(name, min_etag, wait_ms, std::move(run));
}

namespace {


// The search parameters, from the query string (GET) or a JSON body (POST).
struct SearchParams {
  postings::SearchRequest request;
  uint64_t min_etag = 0;
  uint64_t wait_ms = 0;
};

std::string ApplyText(std::string& out, std::string_view key, std::string_view v) {
  if (v.size() > kMaxQueryBytes)
    return std::string(key) + " exceeds " + std::to_string(kMaxQueryBytes) + " bytes";
  out = v;
  return "";
}

std::string ApplyList(std::vector<std::string>& out, std::string_view key, std::string_view v, size_t max) {
  out = SplitList(v);
  if (out.size() > max) return std::string(key) + " lists more than " + std::to_string(max) + " items";
  return "";
}

// The JSON types a search parameter accepts in a POST body.
enum class BodyParamType {
  kText,   // a string
  kCount,  // a non-negative integer, as a number or a string of digits
  kList,   // a comma-separated string or an array of strings
  kKey,    // a JSON array (a query string holds its JSON text): searchAfter
};

std::string DescribeJson(const rapidjson::Value& v);

// Reads a searchAfter key (API.md "Deep paging"): an array of numbers,
// strings and nulls, as a hit's "sort" holds them. A number keeps its exact
// value: an integer its digits, any other number the shortest text of its
// correctly rounded double. Whether the key fits the sort is the
// searcher's to say. Returns an error message or "".
std::string ApplySearchAfter(SearchParams& p, const rapidjson::Value& v) {
  if (!v.IsArray()) return "searchAfter must be an array (a hit's \"sort\"), got " + DescribeJson(v);
  if (v.Size() > kMaxSortKeys + 1)
    return "searchAfter holds more than " + std::to_string(kMaxSortKeys + 1) + " values (sort keys, then the id)";
  std::vector<postings::SortValue>& key = p.request.search_after.emplace();
  for (rapidjson::SizeType i = 0; i < v.Size(); ++i) {
    const rapidjson::Value& x = v[i];
    postings::SortValue value;
    if (x.IsNull()) {
      value.type = postings::SortValue::Type::kNull;
    } else if (x.IsString()) {
      value.type = postings::SortValue::Type::kString;
      value.text.assign(x.GetString(), x.GetStringLength());
    } else if (x.IsUint64() || x.IsInt64()) {
      value.type = postings::SortValue::Type::kNumber;
      value.text = x.IsUint64() ? std::to_string(x.GetUint64()) : std::to_string(x.GetInt64());
    } else if (x.IsDouble() && std::isfinite(x.GetDouble())) {
      value.type = postings::SortValue::Type::kNumber;
      char buf[32];
      const auto r = std::to_chars(buf, buf + sizeof buf, x.GetDouble());  // shortest that reads back the same
      value.text.assign(buf, r.ptr);
    } else {
      return "searchAfter[" + std::to_string(i) + "] must be a number, a string or null, got " + DescribeJson(x);
    }
    key.push_back(std::move(value));
  }
  return "";
}

// searchAfter in a query string: the key's JSON text, URL-encoded.
std::string ApplySearchAfterText(SearchParams& p, std::string_view text) {
  rapidjson::Document d;
  // Iterative: nesting costs no stack (the text is bounded by the target's size).
  const rapidjson::ParseResult r = ParseWithExactNumbers<rapidjson::kParseIterativeFlag>(d, text);
  if (r.IsError())
    return "searchAfter must be a JSON array (URL-encoded JSON text in a query string): " +
           std::string(rapidjson::GetParseError_En(r.Code())) + " at byte " + std::to_string(r.Offset());
  return ApplySearchAfter(p, d);
}

// Reads `value` as a count capped at `max`; returns an error message or "".
std::string ParseCount(std::string_view key, std::string_view value, uint64_t max, uint64_t& out) {
  if (!ParseUint(value, out)) return std::string(key) + " must be a non-negative integer";
  out = std::min(out, max);
  return "";
}

// Every search parameter, once: its name, its POST JSON type, and how its
// text (the query string's, or the body value's) applies; `apply` returns
// an error message or "".
struct SearchParamSpec {
  std::string_view key;
  BodyParamType type;
  std::string (*apply)(SearchParams& p, std::string_view key, std::string_view value);
};
const SearchParamSpec kSearchParams[] = {
    {"q", BodyParamType::kText, [](SearchParams& p, std::string_view k, std::string_view v) { return ApplyText(p.request.q, k, v); }},
    {"filter", BodyParamType::kText,
     [](SearchParams& p, std::string_view k, std::string_view v) { return ApplyText(p.request.filter, k, v); }},
    {"sort", BodyParamType::kText,
     [](SearchParams& p, std::string_view k, std::string_view v) {
       std::vector<std::string> keys;
       if (auto e = ApplyList(keys, k, v, kMaxSortKeys); !e.empty()) return e;
       p.request.sort = v;
       return std::string();
     }},
    {"op", BodyParamType::kText,
     [](SearchParams& p, std::string_view, std::string_view v) {
       if (EqualsIgnoringCase(v, "or")) p.request.op = postings::DefaultOperator::kOr;
       else if (EqualsIgnoringCase(v, "and")) p.request.op = postings::DefaultOperator::kAnd;
       else return std::string("op must be \"or\" or \"and\"");
       return std::string();
     }},
    // A bad value fails the whole request, so what it leaves behind is never read.
    // limit and offset are read as given: the result window refuses them (Search).
    {"limit", BodyParamType::kCount,
     [](SearchParams& p, std::string_view k, std::string_view v) { return ParseCount(k, v, UINT64_MAX, p.request.limit); }},
    {"offset", BodyParamType::kCount,
     [](SearchParams& p, std::string_view k, std::string_view v) { return ParseCount(k, v, UINT64_MAX, p.request.offset); }},
    {"minEtag", BodyParamType::kCount,
     [](SearchParams& p, std::string_view k, std::string_view v) { return ParseCount(k, v, UINT64_MAX, p.min_etag); }},
    {"waitMs", BodyParamType::kCount,
     [](SearchParams& p, std::string_view k, std::string_view v) { return ParseCount(k, v, kMaxWaitMs, p.wait_ms); }},
    {"fields", BodyParamType::kList,
     [](SearchParams& p, std::string_view k, std::string_view v) {
       return ApplyList(p.request.fields.emplace(), k, v, kMaxListItems);
     }},
    {"highlight", BodyParamType::kList,
     [](SearchParams& p, std::string_view k, std::string_view v) {
       return ApplyList(p.request.highlight, k, v, kMaxListItems);
     }},
    {"facets", BodyParamType::kList,
     [](SearchParams& p, std::string_view k, std::string_view v) {
       return ApplyList(p.request.facets, k, v, kMaxListItems);
     }},
    {"searchAfter", BodyParamType::kKey,
     [](SearchParams& p, std::string_view, std::string_view v) { return ApplySearchAfterText(p, v); }},
};

const SearchParamSpec* FindSearchParam(std::string_view key) {
  for (const SearchParamSpec& spec : kSearchParams)
    if (spec.key == key) return &spec;
  return nullptr;
}

std::string UnknownSearchParam(std::string_view key) { return "unknown parameter '" + std::string(key) + "'"; }

// Applies one query-string parameter; returns an error message or "".
std::string ApplySearchParam(SearchParams& p, std::string_view key, std::string_view value) {
  const SearchParamSpec* spec = FindSearchParam(key);
  return spec == nullptr ? UnknownSearchParam(key) : spec->apply(p, key, value);
}

// What a JSON value is, for messages: the number itself, else its type.
std::string DescribeJson(const rapidjson::Value& v) {
  if (v.IsUint64()) return std::to_string(v.GetUint64());
  if (v.IsInt64()) return std::to_string(v.GetInt64());
  if (v.IsNumber()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v.GetDouble());
    return buf;
  }
  if (v.IsString()) return "a string";
  if (v.IsBool()) return "a boolean";
  if (v.IsArray()) return "an array";
  if (v.IsObject()) return "an object";
  return "null";
}

// Reads the POST body's keys, each of the JSON type its parameter takes
// (null: absent). Returns the error answer, or nullopt when all applied.
std::optional<Response> ParseSearchBody(const std::string& body, SearchParams& p) {
  auto bad = [](std::string message) { return ErrorResponse(400, "invalid_argument", message); };
  rapidjson::Document d;
  // Numbers correctly rounded: a searchAfter score must read back as the very double the hit carried.
  if (ParseWithExactNumbers(d, body).IsError() || !d.IsObject()) return bad("the body must be a JSON object");
  for (auto it = d.MemberBegin(); it != d.MemberEnd(); ++it) {
    std::string_view key(it->name.GetString(), it->name.GetStringLength());
    const auto& v = it->value;
    // ValidateJsonObject passed: every key and string decodes to UTF-8
    // (no \u escape spells a lone surrogate).
    const SearchParamSpec* spec = FindSearchParam(key);
    if (spec == nullptr) return bad(UnknownSearchParam(key));
    if (v.IsNull()) continue;
    std::string text;
    switch (spec->type) {
      case BodyParamType::kText:
        if (!v.IsString()) return bad(std::string(key) + " must be a string, got " + DescribeJson(v));
        text.assign(v.GetString(), v.GetStringLength());
        break;
      case BodyParamType::kCount:
        if (v.IsUint64()) {
          text = std::to_string(v.GetUint64());
        } else if (v.IsString()) {
          text.assign(v.GetString(), v.GetStringLength());  // apply checks the digits
        } else {
          return bad(std::string(key) + " must be a non-negative integer, got " + DescribeJson(v));
        }
        break;
      case BodyParamType::kList:
        if (v.IsString()) {
          text.assign(v.GetString(), v.GetStringLength());
          break;
        }
        if (!v.IsArray())
          return bad(std::string(key) + " must be a string or an array of strings, got " + DescribeJson(v));
        for (const auto& item : v.GetArray()) {
          if (!item.IsString())
            return bad(std::string(key) + " must be a string or an array of strings, got an array holding " +
                       DescribeJson(item));
          if (!text.empty()) text += ',';
          text.append(item.GetString(), item.GetStringLength());
        }
        break;
      case BodyParamType::kKey:
        if (auto e = ApplySearchAfter(p, v); !e.empty()) return bad(e);
        continue;
    }
    if (auto e = spec->apply(p, key, text); !e.empty()) return bad(e);
  }
  return std::nullopt;
}

}  // namespace

void Router::State::Search(const Request& req, const Target& t, const std::string& name, Reply& reply) {
  const auto start = std::chrono::steady_clock::now();
  auto reader = engine->Reader(name);
  if (!reader.ok()) return reply(IndexNotFound(name));
  if (reader->type != indexing::IndexType::kSearch)
    return reply(ErrorResponse(400, "invalid_argument",
                               "index '" + name + "' is a " + indexing::IndexTypeName(reader->type) + " index; search needs a search index"));
  SearchParams params;
  for (const auto& [k, v] : t.query) {
    if (auto e = ApplySearchParam(params, k, v); !e.empty()) return reply(ErrorResponse(400, "invalid_argument", e));
  }
  if (req.method == "POST" && !IsBlank(req.body)) {
    if (!IsJsonContentType(req.content_type, false))
      return reply(ErrorResponse(415, "unsupported_media_type", "Content-Type must be application/json"));
    if (auto problem = ValidateJsonObject(req.body)) return reply(ProblemResponse(*problem));
    if (auto error = ParseSearchBody(req.body, params)) return reply(std::move(*error));
  }
  // API.md, Deep paging: beyond the window, page with searchAfter, which
  // starts where its key says: it takes no offset (as Elasticsearch's
  // search_after takes no `from`), so only `limit` meets the window.
  if (params.request.search_after && params.request.offset != 0)
    return reply(ErrorResponse(400, "invalid_argument",
                               "offset must be 0 with searchAfter (the key says where the page starts); got " +
                                   std::to_string(params.request.offset)));
  // Refused, never capped: a client asking for more than the window gets
  // told so (as Elasticsearch's index.max_result_window), also for a
  // limit alone. Written so that no sum can wrap.
  const uint64_t window = options.max_result_window;
  if (params.request.limit > window || params.request.offset > window - params.request.limit)
    return reply(ErrorResponse(400, "result_window_too_large",
                               "offset + limit must be at most " + std::to_string(options.max_result_window) +
                                   " (--max-result-window); page further with searchAfter"));
  storage::DocumentStore* st = &store;
  std::string collection = reader->collection;
  params.request.max_response_bytes = options.max_response_bytes;
  params.request.fetch_document = [st, collection](std::string_view id) -> std::optional<std::string> {
    auto doc = st->Get(collection, id);
    if (!doc.ok()) return std::nullopt;
    return std::move(doc->body);
  };
  const uint64_t min_etag = params.min_etag, wait_ms = params.wait_ms;
  auto run = [self = shared_from_this(), name, request = std::move(params.request), start, min_etag,
              reply = std::move(reply)] {
    auto reader = self->engine->Reader(name);
    if (!reader.ok() || !reader->search) return reply(IndexNotFound(name));
    auto result = reader->search->Search(request);
    if (!result.ok()) {
      if (result.status().code() == StatusCode::kTooLarge) return reply(ResponseTooLarge(result.status()));
      // A searchAfter key that does not fit the sort is a bad parameter,
      // as a malformed one is (ApplySearchAfter), not a bad query.
      if (result.status().code() == StatusCode::kInvalidArgument && result.status().parameter() != nullptr)
        return reply(ErrorResponse(400, "invalid_argument", result.status().message()));
      if (result.status().code() == StatusCode::kInvalidArgument)
        return reply(ErrorResponse(400, "invalid_query", result.status().message(),
                                   result.status().offset()));
      return reply(FromStatus(result.status()));
    }
    uint64_t index_etag = self->engine->AnswerEtag(*reader, result->snapshot_etag);
    bool stale = index_etag < min_etag || self->engine->IsStale(*reader, index_etag);
    rapidjson::StringBuffer buf;
    JsonWriter w(buf);
    w.StartObject();
    w.Key("total");
    w.Uint64(result->total);
    w.Key("hits");
    w.RawValue(result->hits_json.data(), result->hits_json.size(), rapidjson::kArrayType);
    if (!result->facets_json.empty()) {
      w.Key("facets");
      w.RawValue(result->facets_json.data(), result->facets_json.size(), rapidjson::kObjectType);
    }
    WriteFreshness(w, stale, index_etag, start);
    w.EndObject();
    reply(JsonResponse(200, buf));
  };
  if (min_etag == 0 || wait_ms == 0 || reader->indexed_etag >= min_etag) return run();
  WaitForIndex(name, min_etag, wait_ms, std::move(run));
}

void Router::State::WaitForIndex(const std::string& name, uint64_t min_etag, uint64_t wait_ms,
                                 std::function<void()> then) {
  indexing::IndexEngine* eng = engine;
  WaitThen(
      std::chrono::milliseconds(wait_ms),
      [eng, name, min_etag] {
        auto e = eng->IndexedEtag(name);
        return !e.ok() || *e >= min_etag;
      },
      [eng](std::function<void()> wake) {
        return eng->AddProgressListener([wake](const std::string&, uint64_t) { wake(); });
      },
      [eng](uint64_t handle) { eng->RemoveProgressListener(handle); }, std::move(then));
}

// POST /admin/analyze {"analyzer": name, "text": "..."}: the terms an index
// with that analyzer stores, with positions and UTF-8 byte offsets.
Response Router::State::Analyze(const Request& req) const {
  if (!IsJsonContentType(req.content_type, false))
    return ErrorResponse(415, "unsupported_media_type", "Content-Type must be application/json");
  if (auto problem = ValidateJsonObject(req.body)) return ProblemResponse(*problem);
  rapidjson::Document doc;
  doc.Parse(req.body.data(), req.body.size());
  if (doc.HasParseError() || !doc.IsObject())  // validated above: cannot happen, never trusted
    return ErrorResponse(400, "invalid_json", "the body is not a JSON object");
  auto name = doc.FindMember("analyzer");
  auto text = doc.FindMember("text");
  if (name == doc.MemberEnd() || !name->value.IsString())
    return ErrorResponse(400, "invalid_argument", "analyzer: required string");
  if (text == doc.MemberEnd() || !text->value.IsString())
    return ErrorResponse(400, "invalid_argument", "text: required string");
  auto analyzer = analyzers::FindAnalyzer(std::string_view(name->value.GetString(), name->value.GetStringLength()));
  if (!analyzer.ok())
    return ErrorResponse(400, "invalid_argument",
                         "analyzer: unknown analyzer '" + std::string(name->value.GetString()) + "'");
  class Sink : public analyzers::TokenSink {
   public:
    explicit Sink(JsonWriter& w) : w_(w) {}
    void OnToken(const analyzers::Token& t) override {
      w_.StartObject();
      w_.Key("term");
      WriteString(w_, t.term);
      w_.Key("position");
      w_.Uint(t.position);
      w_.Key("start");
      w_.Uint(t.start);
      w_.Key("end");
      w_.Uint(t.end);
      w_.EndObject();
    }

   private:
    JsonWriter& w_;
  };
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  w.Key("tokens");
  w.StartArray();
  Sink sink(w);
  Status s = (*analyzer)->Analyze(std::string_view(text->value.GetString(), text->value.GetStringLength()), sink);
  if (!s.ok()) return FromStatus(s);
  w.EndArray();
  w.EndObject();
  return JsonResponse(200, buf);
}

// GET /admin/cluster
Response Router::State::ClusterView() const {
  if (!options.cluster) return ErrorResponse(404, "not_found", "this server is not in a cluster (it runs without --nats)");
  Response r;
  r.body = options.cluster->DescribeJson();
  return r;
}

// GET /admin/indexes
Response Router::State::AdminIndexes() const {
  uint64_t last = store.LastEtag();
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  w.Key("lastEtag");
  w.Uint64(last);
  w.Key("indexes");
  w.StartArray();
  for (const auto& p : engine->AllProgress()) WriteProgress(w, p, nullptr);
  w.EndArray();
  w.EndObject();
  return JsonResponse(200, buf);
}

// POST /admin/indexes/{name}/pause|resume|reset
Response Router::State::IndexControl(const std::string& name, std::string_view action) {
  Status s = action == "pause" ? engine->Pause(name) : action == "resume" ? engine->Resume(name) : engine->Reset(name);
  if (!s.ok()) return s.code() == StatusCode::kNotFound ? IndexNotFound(name) : FromStatus(s);
  auto p = engine->Progress(name);
  if (!p.ok()) return IndexNotFound(name);
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  WriteProgress(w, *p, nullptr);
  return JsonResponse(200, buf);
}

Response Router::State::MetricsText() const {
  std::string out;
  metrics.Render(out);
  char line[512];  // one labelled sample
  auto stats = store.GetStats();
  auto metric = [&out](const char* name, const char* type, const char* help, uint64_t value) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
           std::to_string(value) + "\n";
  };
  metric("corvid_last_etag", "gauge", "The last etag given to a durable write.", store.LastEtag());
  metric("corvid_store_commits_total", "counter", "Durable group-commit transactions.", stats.commits);
  metric("corvid_store_write_requests_total", "counter", "Write requests handled by the transaction merger.",
         stats.requests);
  metric("corvid_store_written_documents_total", "counter", "Document writes (puts and deletes) committed.",
         stats.ops);
  metric("corvid_store_max_batch_requests", "gauge", "Largest number of requests in one group commit.",
         stats.max_batch_requests);
  if (options.cluster) {
    const auto cs = options.cluster->GetStats();
    metric("corvid_cluster_applied_seq", "gauge", "The last log entry this node applied.", cs.applied_seq);
    metric("corvid_cluster_apply_lag_ms", "gauge",
           "Age of the oldest log entry this node has not applied (0 when caught up).", uint64_t(cs.lag_ms));
    out += "# HELP corvid_cluster_log_commit_seconds Publish to JetStream's confirmation of a write's log entry.\n"
           "# TYPE corvid_cluster_log_commit_seconds summary\n";
    out += "corvid_cluster_log_commit_seconds_sum " + std::to_string(cs.commit_seconds_sum) + "\n";
    out += "corvid_cluster_log_commit_seconds_count " + std::to_string(cs.commits) + "\n";
    metric("corvid_cluster_skipped_late_total", "counter", "Log entries stored after their deadline (skipped).",
           cs.skipped_late);
    metric("corvid_cluster_write_timeouts_total", "counter", "Writes answered 503 by their deadline.", cs.timeouts);
    metric("corvid_cluster_leader_asks_total", "counter",
           "Applied log entries no publish acknowledgement confirmed, asked of the stream's leader.", cs.leader_asks);
  }
  out += "# HELP corvid_documents Live documents per collection.\n# TYPE corvid_documents gauge\n";
  for (const auto& c : store.Collections()) {
    std::string escaped;
    for (char ch : c.name) {
      if (ch == '\\' || ch == '"') escaped += '\\';
      if (ch == '\n') { escaped += "\\n"; continue; }
      escaped += ch;
    }
    out += "corvid_documents{collection=\"" + escaped + "\"} " + std::to_string(c.count) + "\n";
  }
  std::vector<indexing::IndexProgress> all;
  if (engine) all = engine->AllProgress();
  {
    // What the process holds beyond the page cache, against --memory-budget.
    uint64_t indexes = 0;
    for (const auto& p : all) indexes += p.memory_bytes;
    metric("corvid_memory_budget_bytes", "gauge", "The memory budget (--memory-budget).", MemoryBudget());
    out += "# HELP corvid_memory_bytes Memory held, by part: anon is the process's anonymous resident memory; "
           "indexes what the indexes hold between batches (builders, deleted-docs bitmaps, merges); "
           "index_batches what batches being applied have taken from the budget.\n"
           "# TYPE corvid_memory_bytes gauge\n";
    out += "corvid_memory_bytes{part=\"anon\"} " + std::to_string(ProcessAnonBytes()) + "\n";
    out += "corvid_memory_bytes{part=\"indexes\"} " + std::to_string(indexes) + "\n";
    out += "corvid_memory_bytes{part=\"index_batches\"} " + std::to_string(IndexingMemory::Instance().taken()) + "\n";
  }
  if (engine) {
    struct Family { const char* name; const char* type; const char* help; };
    const Family families[] = {
        {"corvid_index_backlog", "gauge", "Unprocessed changes of the index's collection."},
        {"corvid_index_last_indexed_etag", "gauge", "Etag the index has processed through."},
        {"corvid_index_indexed_documents_total", "counter", "Documents processed since start-up."},
        {"corvid_index_errors_total", "counter", "Documents that failed to index."},
        {"corvid_index_batches_total", "counter", "Batches applied since start-up."},
        {"corvid_index_batch_duration_seconds_total", "counter", "Time spent applying batches."},
        {"corvid_index_entries", "gauge", "Live documents (search) or reduce rows (mapreduce)."},
    };
    for (const auto& f : families) {
      out += std::string("# HELP ") + f.name + " " + f.help + "\n# TYPE " + f.name + " " + f.type + "\n";
      for (const auto& p : all) {
        double v = 0;
        std::string_view n = f.name;
        if (n == "corvid_index_backlog") v = double(p.backlog);
        else if (n == "corvid_index_last_indexed_etag") v = double(p.last_indexed_etag);
        else if (n == "corvid_index_indexed_documents_total") v = double(p.indexed_docs_total);
        else if (n == "corvid_index_errors_total") v = double(p.error_count);
        else if (n == "corvid_index_batches_total") v = double(p.batches_total);
        else if (n == "corvid_index_batch_duration_seconds_total") v = p.batch_ms_total / 1000.0;
        else v = double(p.entries);
        std::snprintf(line, sizeof line, "%s{index=\"%s\"} %.17g\n", f.name, p.name.c_str(), v);
        out += line;
      }
    }
  }
  Response r;
  r.body = std::move(out);
  r.content_type = "text/plain; version=0.0.4";
  return r;
}

}  // namespace corvid::server

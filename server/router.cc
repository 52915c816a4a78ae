// Routing and the document endpoints of API.md. Each handler validates its
// input completely before touching the store, so bad input is always a 4xx
// and never reaches an assert or the write path.
#include "server/router.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <atomic>
#include <charconv>
#include <mutex>
#include <set>

#include "server/json_input.h"
#include "storage/document_store.h"

namespace corvid::server {

namespace {

using storage::DocumentStore;
using storage::WriteKind;
using storage::WriteOp;
using storage::WriteRequest;
using storage::WriteResult;
using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

constexpr uint64_t kDefaultChangesLimit = 1000;
constexpr uint64_t kMaxChangesLimit = 10000;
constexpr uint64_t kMaxWaitMs = 60000;

void WriteString(JsonWriter& w, std::string_view s) { w.String(s.data(), rapidjson::SizeType(s.size())); }

Response JsonResponse(int status, const rapidjson::StringBuffer& buffer) {
  Response r;
  r.status = status;
  r.body.assign(buffer.GetString(), buffer.GetSize());
  return r;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes `in`; `plus_is_space` for query strings. False if a
// %-escape is malformed.
bool PercentDecode(std::string_view in, bool plus_is_space, std::string& out) {
  out.clear();
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) return false;
      int hi = HexValue(in[i + 1]), lo = HexValue(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out.push_back(char(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return true;
}

struct Target {
  std::vector<std::string> segments;  // decoded path segments
  std::vector<std::pair<std::string, std::string>> query;

  const std::string* Param(std::string_view name) const {
    for (const auto& [k, v] : query)
      if (k == name) return &v;
    return nullptr;
  }
};

std::optional<Target> ParseTarget(std::string_view target) {
  Target t;
  size_t q = target.find('?');
  std::string_view path = target.substr(0, q);
  std::string_view query = q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
  if (path.empty() || path[0] != '/') return std::nullopt;
  path.remove_prefix(1);
  while (true) {
    size_t slash = path.find('/');
    std::string seg;
    if (!PercentDecode(path.substr(0, slash), false, seg)) return std::nullopt;
    t.segments.push_back(std::move(seg));
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  if (t.segments.size() == 1 && t.segments[0].empty()) t.segments.clear();  // "/"
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    size_t eq = pair.find('=');
    std::string k, v;
    if (!PercentDecode(pair.substr(0, eq), true, k)) return std::nullopt;
    if (eq != std::string_view::npos && !PercentDecode(pair.substr(eq + 1), true, v)) return std::nullopt;
    if (!k.empty()) t.query.emplace_back(std::move(k), std::move(v));
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return t;
}

// Parses a non-negative decimal integer parameter; false if malformed.
bool ParseUint(std::string_view s, uint64_t& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

// An etag from a header value: "N", W/"N" or N. nullopt if malformed.
std::optional<uint64_t> ParseEtagHeader(std::string_view v) {
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  while (!v.empty() && v.back() == ' ') v.remove_suffix(1);
  if (v.substr(0, 2) == "W/") v.remove_prefix(2);
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
  uint64_t etag;
  if (!ParseUint(v, etag)) return std::nullopt;
  return etag;
}

bool IsJsonContentType(std::string_view ct, bool allow_ndjson) {
  if (ct.empty()) return true;  // a missing Content-Type is accepted
  std::string_view base = ct.substr(0, ct.find(';'));
  while (!base.empty() && base.back() == ' ') base.remove_suffix(1);
  std::string lower(base);
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "application/json") return true;
  return allow_ndjson && (lower == "application/x-ndjson" || lower == "application/ndjson");
}

// Constant-time comparison: the time taken does not depend on where the
// strings differ (only on the length of `expected`).
bool ConstantTimeEquals(std::string_view given, std::string_view expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= g ^ static_cast<unsigned char>(expected[i]);
  }
  return diff == 0;
}

Response FromStatus(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return Response{};
    case StatusCode::kNotFound: return ErrorResponse(404, "not_found", s.message());
    case StatusCode::kInvalidArgument: return ErrorResponse(400, "invalid_argument", s.message());
    case StatusCode::kPreconditionFailed: return ErrorResponse(412, "precondition_failed", s.message());
    case StatusCode::kBusy: return ErrorResponse(409, "conflict", s.message());
    case StatusCode::kTooLarge: return ErrorResponse(413, "body_too_large", s.message());
    case StatusCode::kShuttingDown: return ErrorResponse(503, "shutting_down", s.message());
    default: return ErrorResponse(500, "internal", s.message());
  }
}

Response MethodNotAllowed(std::string_view allow) {
  Response r = ErrorResponse(405, "method_not_allowed", "method not allowed here; allowed: " + std::string(allow));
  r.allow = std::string(allow);
  return r;
}

Response ProblemResponse(const JsonProblem& p, std::optional<size_t> line = std::nullopt) {
  std::string message = p.message;
  if (line) message = "line " + std::to_string(*line) + ": " + message;
  return ErrorResponse(400, p.code, message, p.offset, line);
}

}  // namespace

Response ErrorResponse(int status, std::string_view code, std::string_view message, std::optional<size_t> offset,
                       std::optional<size_t> line) {
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  w.Key("error");
  w.StartObject();
  w.Key("code");
  WriteString(w, code);
  w.Key("message");
  WriteString(w, message);
  if (offset) {
    w.Key("offset");
    w.Uint64(*offset);
  }
  if (line) {
    w.Key("line");
    w.Uint64(*line);
  }
  w.EndObject();
  w.EndObject();
  Response r = JsonResponse(status, buf);
  return r;
}

// A /changes long poll waiting for a commit or its deadline.
struct LongPoll {
  std::atomic<bool> done{false};
  uint64_t listener = 0;
  Reply reply;
  std::function<Response()> answer;
};

struct Router::State : std::enable_shared_from_this<Router::State> {
  DocumentStore& store;
  Timers& timers;
  RouterOptions options;

  std::mutex waiters_mu;
  std::set<std::shared_ptr<LongPoll>> waiters;  // guarded by waiters_mu

  State(DocumentStore& s, Timers& t, RouterOptions o) : store(s), timers(t), options(std::move(o)) {}

  void Finish(const std::shared_ptr<LongPoll>& poll) {
    if (poll->done.exchange(true)) return;
    store.RemoveCommitListener(poll->listener);
    {
      std::lock_guard lock(waiters_mu);
      waiters.erase(poll);
    }
    poll->reply(poll->answer());
  }

  void Dispatch(Request& req, const Target& t, Reply& reply);
  Response Health() const;
  Response Collections() const;
  void Changes(const Target& t, Reply& reply);
  Response GetDoc(const Request& req, const std::string& coll, const std::string& id) const;
  void PutDoc(Request& req, const std::string& coll, const std::string& id, Reply& reply);
  void DeleteDoc(const Request& req, const std::string& coll, const std::string& id, Reply& reply);
  void Bulk(Request& req, const std::string& coll, Reply& reply);
};

Router::Router(DocumentStore& store, Timers& timers, RouterOptions options)
    : state_(std::make_shared<State>(store, timers, std::move(options))) {}

Router::~Router() { CompleteWaiters(); }

size_t Router::BodyLimit(std::string_view method, std::string_view target) const {
  std::string_view path = target.substr(0, target.find('?'));
  if (method == "POST" && path.size() >= 6 && path.substr(path.size() - 6) == "/_bulk")
    return state_->options.max_bulk_bytes;
  return state_->options.max_doc_bytes;
}

void Router::CompleteWaiters() {
  std::set<std::shared_ptr<LongPoll>> waiters;
  {
    std::lock_guard lock(state_->waiters_mu);
    waiters = state_->waiters;
  }
  for (const auto& w : waiters) state_->Finish(w);
}

void Router::Handle(Request request, Reply reply) {
  std::optional<Target> target = ParseTarget(request.target);
  if (!target) {
    reply(ErrorResponse(400, "invalid_argument", "malformed request target (bad percent-encoding)"));
    return;
  }
  const bool is_health = target->segments.size() == 1 && target->segments[0] == "health";
  if (!state_->options.api_key.empty() && !is_health) {
    if (!request.has_authorization) {
      reply(ErrorResponse(401, "unauthorized", "missing Authorization: Bearer <key>"));
      return;
    }
    std::string_view auth = request.authorization;
    constexpr std::string_view kBearer = "Bearer ";
    if (auth.size() < kBearer.size() || auth.substr(0, kBearer.size()) != kBearer) {
      reply(ErrorResponse(401, "unauthorized", "expected Authorization: Bearer <key>"));
      return;
    }
    if (!ConstantTimeEquals(auth.substr(kBearer.size()), state_->options.api_key)) {
      reply(ErrorResponse(403, "forbidden", "wrong API key"));
      return;
    }
  }
  state_->Dispatch(request, *target, reply);
}

void Router::State::Dispatch(Request& req, const Target& t, Reply& reply) {
  const auto& seg = t.segments;
  const std::string& m = req.method;
  if (seg.size() == 1 && seg[0] == "health") {
    if (m != "GET") return reply(MethodNotAllowed("GET"));
    return reply(Health());
  }
  if (seg.size() == 1 && seg[0] == "collections") {
    if (m != "GET") return reply(MethodNotAllowed("GET"));
    return reply(Collections());
  }
  if (seg.size() == 1 && seg[0] == "changes") {
    if (m != "GET") return reply(MethodNotAllowed("GET"));
    return Changes(t, reply);
  }
  if (seg.size() == 3 && seg[0] == "docs") {
    const std::string& coll = seg[1];
    const std::string& id = seg[2];
    if (Status s = storage::ValidateName(coll, "collection name"); !s.ok())
      return reply(ErrorResponse(400, "invalid_id", s.message()));
    if (id == "_bulk" && m == "POST") return Bulk(req, coll, reply);
    if (Status s = storage::ValidateName(id, "document id"); !s.ok())
      return reply(ErrorResponse(400, "invalid_id", s.message()));
    if (m == "GET") return reply(GetDoc(req, coll, id));
    if (m == "PUT") return PutDoc(req, coll, id, reply);
    if (m == "DELETE") return DeleteDoc(req, coll, id, reply);
    return reply(MethodNotAllowed(id == "_bulk" ? "GET, PUT, DELETE, POST" : "GET, PUT, DELETE"));
  }
  reply(ErrorResponse(404, "not_found", "no route for " + req.method + " " + req.target.substr(0, 200)));
}

Response Router::State::Health() const {
  Response r;
  r.body = R"({"status":"ok"})";
  return r;
}

Response Router::State::Collections() const {
  // Read the etag first: counts reflect at least every write up to it.
  uint64_t last = store.LastEtag();
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  w.Key("collections");
  w.StartArray();
  for (const auto& c : store.Collections()) {
    w.StartObject();
    w.Key("name");
    WriteString(w, c.name);
    w.Key("count");
    w.Uint64(c.count);
    w.EndObject();
  }
  w.EndArray();
  w.Key("lastEtag");
  w.Uint64(last);
  w.EndObject();
  return JsonResponse(200, buf);
}

void Router::State::Changes(const Target& t, Reply& reply) {
  uint64_t since = 0, limit = kDefaultChangesLimit, wait_ms = 0;
  struct P { const char* name; uint64_t* out; uint64_t max; } params[] = {
      {"since", &since, UINT64_MAX}, {"limit", &limit, kMaxChangesLimit}, {"waitMs", &wait_ms, kMaxWaitMs}};
  for (auto& p : params) {
    const std::string* v = t.Param(p.name);
    if (!v) continue;
    if (!ParseUint(*v, *p.out))
      return reply(ErrorResponse(400, "invalid_argument",
                                 std::string(p.name) + " must be a non-negative integer, got '" + v->substr(0, 64) + "'"));
    *p.out = std::min(*p.out, p.max);
  }
  auto answer = [&store = store, since, limit]() -> Response {
    uint64_t last = store.LastEtag();
    auto changes = store.ChangesSince(since, limit);
    if (!changes.ok()) return FromStatus(changes.status());
    rapidjson::StringBuffer buf;
    JsonWriter w(buf);
    w.StartObject();
    w.Key("results");
    w.StartArray();
    for (const auto& c : *changes) {
      last = std::max(last, c.etag);
      w.StartObject();
      w.Key("etag");
      w.Uint64(c.etag);
      w.Key("collection");
      WriteString(w, c.collection);
      w.Key("id");
      WriteString(w, c.id);
      w.Key("deleted");
      w.Bool(c.deleted);
      w.EndObject();
    }
    w.EndArray();
    w.Key("lastEtag");
    w.Uint64(last);
    w.EndObject();
    return JsonResponse(200, buf);
  };
  if (wait_ms == 0 || limit == 0 || store.LastEtag() > since) return reply(answer());

  // Long poll: register for the commit signal first, then re-check, so a
  // commit between the check and the registration is never missed.
  auto poll = std::make_shared<LongPoll>();
  poll->reply = std::move(reply);
  poll->answer = answer;
  std::weak_ptr<LongPoll> weak = poll;
  {
    std::lock_guard lock(waiters_mu);
    waiters.insert(poll);
  }
  std::weak_ptr<State> weak_self = weak_from_this();
  poll->listener = store.AddCommitListener([weak_self, weak, since](uint64_t etag) {
    if (etag <= since) return;
    auto self = weak_self.lock();
    auto p = weak.lock();
    // Answer on an I/O thread, not on the merger thread.
    if (self && p) self->timers.RunAfter(std::chrono::milliseconds(0), [self, p] { self->Finish(p); });
  });
  timers.RunAfter(std::chrono::milliseconds(wait_ms), [self = shared_from_this(), poll] { self->Finish(poll); });
  if (store.LastEtag() > since) Finish(poll);
}

Response Router::State::GetDoc(const Request& req, const std::string& coll, const std::string& id) const {
  auto doc = store.Get(coll, id);
  if (!doc.ok()) return FromStatus(doc.status());
  if (!req.if_none_match.empty()) {
    std::string_view inm = req.if_none_match;
    bool match = inm == "*";
    // A comma-separated list of etags, as HTTP allows.
    while (!match && !inm.empty()) {
      size_t comma = inm.find(',');
      auto e = ParseEtagHeader(inm.substr(0, comma));
      if (e && *e == doc->etag) match = true;
      if (comma == std::string_view::npos) break;
      inm.remove_prefix(comma + 1);
    }
    if (match) {
      Response r;
      r.status = 304;
      r.etag = doc->etag;
      r.content_type.clear();
      return r;
    }
  }
  Response r;
  r.body = std::move(doc->body);
  r.etag = doc->etag;
  return r;
}

void Router::State::PutDoc(Request& req, const std::string& coll, const std::string& id, Reply& reply) {
  if (!IsJsonContentType(req.content_type, false))
    return reply(ErrorResponse(415, "unsupported_media_type",
                               "Content-Type must be application/json, got '" + req.content_type.substr(0, 100) + "'"));
  if (auto problem = ValidateJsonObject(req.body)) return reply(ProblemResponse(*problem));
  WriteOp op;
  op.kind = WriteKind::kPut;
  if (!req.if_match.empty()) {
    if (req.if_match == "*") {
      op.if_match_any = true;
    } else {
      op.if_match = ParseEtagHeader(req.if_match);
      if (!op.if_match) return reply(ErrorResponse(400, "invalid_argument", "If-Match must be an etag such as \"42\""));
    }
  }
  if (!req.if_none_match.empty()) {
    if (req.if_none_match != "*")
      return reply(ErrorResponse(400, "invalid_argument", "If-None-Match on PUT supports only *"));
    op.if_none_match_any = true;
  }
  op.collection = coll;
  op.id = id;
  op.body = std::move(req.body);
  WriteRequest wr;
  wr.ops.push_back(std::move(op));
  store.Submit(std::move(wr), [reply = std::move(reply), coll, id](WriteResult r) {
    if (!r.status.ok()) return reply(FromStatus(r.status));
    rapidjson::StringBuffer buf;
    JsonWriter w(buf);
    w.StartObject();
    w.Key("collection");
    WriteString(w, coll);
    w.Key("id");
    WriteString(w, id);
    w.Key("etag");
    w.Uint64(r.last_etag);
    w.EndObject();
    Response resp = JsonResponse(r.created ? 201 : 200, buf);
    resp.etag = r.last_etag;
    reply(std::move(resp));
  });
}

void Router::State::DeleteDoc(const Request& req, const std::string& coll, const std::string& id, Reply& reply) {
  WriteOp op;
  op.kind = WriteKind::kDelete;
  if (!req.if_match.empty()) {
    if (req.if_match == "*") {
      op.if_match_any = true;
    } else {
      op.if_match = ParseEtagHeader(req.if_match);
      if (!op.if_match) return reply(ErrorResponse(400, "invalid_argument", "If-Match must be an etag such as \"42\""));
    }
  }
  op.collection = coll;
  op.id = id;
  WriteRequest wr;
  wr.ops.push_back(std::move(op));
  store.Submit(std::move(wr), [reply = std::move(reply)](WriteResult r) {
    if (!r.status.ok()) return reply(FromStatus(r.status));
    Response resp;
    resp.body = "{\"etag\":" + std::to_string(r.last_etag) + "}";
    resp.etag = r.last_etag;
    reply(std::move(resp));
  });
}

void Router::State::Bulk(Request& req, const std::string& coll, Reply& reply) {
  if (!IsJsonContentType(req.content_type, true))
    return reply(ErrorResponse(415, "unsupported_media_type",
                               "Content-Type must be application/x-ndjson or application/json, got '" +
                                   req.content_type.substr(0, 100) + "'"));
  std::string_view body = req.body;
  WriteRequest wr;
  wr.single = false;
  size_t line_no = 0;
  ObjectFields fields;
  while (!body.empty()) {
    ++line_no;
    size_t nl = body.find('\n');
    std::string_view line = body.substr(0, nl);
    body.remove_prefix(nl == std::string_view::npos ? body.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (IsBlank(line)) continue;
    if (line.size() > options.max_doc_bytes) {
      return reply(ErrorResponse(413, "body_too_large",
                                 "line " + std::to_string(line_no) + ": document exceeds the limit of " +
                                     std::to_string(options.max_doc_bytes) + " bytes",
                                 std::nullopt, line_no));
    }
    if (auto problem = ValidateJsonObject(line, &fields)) return reply(ProblemResponse(*problem, line_no));
    if (!fields.id) {
      return reply(ErrorResponse(400, "invalid_bulk_line",
                                 "line " + std::to_string(line_no) +
                                     (fields.id_present ? ": \"id\" must be a string" : ": missing string field \"id\""),
                                 std::nullopt, line_no));
    }
    if (Status s = storage::ValidateName(*fields.id, "document id"); !s.ok())
      return reply(ErrorResponse(400, "invalid_id", "line " + std::to_string(line_no) + ": " + s.message(),
                                 std::nullopt, line_no));
    WriteOp op;
    op.kind = fields.deleted ? WriteKind::kDelete : WriteKind::kPut;
    op.collection = coll;
    op.id = std::move(*fields.id);
    if (!fields.deleted) op.body.assign(line);
    wr.ops.push_back(std::move(op));
  }
  if (wr.ops.empty()) return reply(ErrorResponse(400, "empty_body", "the bulk body holds no documents"));
  const size_t count = wr.ops.size();
  req.body.clear();
  req.body.shrink_to_fit();
  store.Submit(std::move(wr), [reply = std::move(reply), count](WriteResult r) {
    if (!r.status.ok()) return reply(FromStatus(r.status));
    rapidjson::StringBuffer buf;
    JsonWriter w(buf);
    w.StartObject();
    w.Key("count");
    w.Uint64(count);
    w.Key("firstEtag");
    w.Uint64(r.first_etag);
    w.Key("lastEtag");
    w.Uint64(r.last_etag);
    w.EndObject();
    reply(JsonResponse(200, buf));
  });
}

}  // namespace corvid::server

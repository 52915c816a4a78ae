// Routing and the document endpoints of API.md. Each handler validates its
// input completely before touching the store, so bad input is always a 4xx
// and never reaches an assert or the write path.
#include "server/router.h"

#include "common/log.h"

#include "cluster/cluster_node.h"

#include "server/console_assets.h"
#include "server/router_internal.h"

#include <exception>
#include <system_error>

namespace corvid::server {

using namespace detail;
using storage::DocumentStore;
using storage::WriteKind;
using storage::WriteOp;
using storage::WriteRequest;
using storage::WriteResult;

namespace {

// {"error": {"code", "message", <numeric details>...}}
Response ErrorWithDetails(int status, std::string_view code, std::string_view message,
                          std::initializer_list<std::pair<std::string_view, std::optional<uint64_t>>> details) {
  // Messages echo request text (a percent-decoded name, a header), which
  // may be anything: the body must stay valid JSON, so valid UTF-8.
  std::string repaired;
  if (!IsValidUtf8(message)) message = repaired = ReplaceInvalidUtf8(message);
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  w.Key("error");
  w.StartObject();
  w.Key("code");
  WriteString(w, code);
  w.Key("message");
  WriteString(w, message);
  for (const auto& [key, value] : details) {
    if (!value) continue;
    w.Key(key.data(), rapidjson::SizeType(key.size()));
    w.Uint64(*value);
  }
  w.EndObject();
  w.EndObject();
  return JsonResponse(status, buf);
}

}  // namespace

Response ErrorResponse(int status, std::string_view code, std::string_view message, std::optional<size_t> offset,
                       std::optional<size_t> line) {
  return ErrorWithDetails(status, code, message, {{"offset", offset}, {"line", line}});
}

Response ErrorResponse(int status, std::string_view code, std::string_view message, std::string_view detail,
                       uint64_t value) {
  return ErrorWithDetails(status, code, message, {{detail, value}});
}

Router::Router(DocumentStore& store, indexing::IndexEngine* engine, Timers& timers, RouterOptions options)
    : state_(std::make_shared<State>(store, engine, timers, std::move(options))) {}

Router::~Router() {
  CompleteWaiters();
  state_->JoinJobs();
}

size_t Router::BodyLimit(std::string_view method, std::string_view target, std::string_view* what) const {
  auto named = [what](size_t limit, std::string_view name) {
    if (what != nullptr) *what = name;
    return limit;
  };
  // Decoded as Handle will decode it, so that /docs/c/%5Fbulk, which
  // Dispatch sends to Bulk, gets the bulk limit too. A target that does not
  // parse is refused by Handle before its body matters.
  const RouterOptions& o = state_->options;
  if (method == "POST") {
    std::optional<Target> t = ParseTarget(target);
    if (t && IsBulkPath(*t)) return named(o.max_bulk_bytes, "a bulk body (--max-bulk-bytes)");
  }
  // Documents are written under /docs/; every other body (a definition, a
  // search, an analyze text) is small. The raw prefix decides in the common
  // case without parsing the target.
  bool documents = target.starts_with("/docs/");
  if (!documents && (target.find('%') != std::string_view::npos || !target.starts_with('/'))) {  // or absolute form
    std::optional<Target> t = ParseTarget(target);
    documents = t && !t->segments.empty() && t->segments[0] == "docs";
  }
  if (documents) return named(o.max_doc_bytes, "a document (--max-doc-bytes)");
  if (o.max_doc_bytes < o.max_control_body_bytes)
    return named(o.max_doc_bytes, "a body that is not a document's (--max-doc-bytes)");
  return named(o.max_control_body_bytes, "a body that is not a document's (an index definition, a search, an analyze text)");
}

void Router::CompleteWaiters() {
  std::set<std::shared_ptr<Waiter>> waiters;
  {
    std::lock_guard lock(state_->waiters_mu);
    waiters = state_->waiters;
  }
  for (const auto& w : waiters) state_->Finish(w);
  state_->CancelJobs();
}

void Router::JoinBackgroundWork() { state_->JoinJobs(); }

namespace {

// ---- The route table: every endpoint of API.md, once ----
//
// An endpoint is a path (literal segments, "{}" for a name) with a guard
// checked before its method (a name's validity, the index engine's
// presence) and the methods it answers. Each method carries the label that
// metrics and logs give it, whether a --read-key may call it or no key is
// needed, and its handler. Classify, Dispatch and Authorize all read this
// table; the handlers are in this file, index_handlers.cc and backup.cc.

using Handler = void (*)(Router::State&, Request&, const Target&, Reply&);
using Guard = std::optional<Response> (*)(const Router::State&, const Target&);

struct Method {
  std::string_view name;
  Route route;
  Handler handle;
  bool read = false;  // a read key may call it
  bool open = false;  // no key needed (GET /health, the console's files)
};

struct Endpoint {
  std::vector<std::string_view> path;
  std::vector<Method> methods;
  Guard guard = nullptr;
  std::string_view where = "here";  // how a 405 names the endpoint

  bool Matches(const Target& t) const {
    if (t.segments.size() != path.size()) return false;
    for (size_t i = 0; i < path.size(); ++i)
      if (path[i] != "{}" && path[i] != t.segments[i]) return false;
    return true;
  }
  const Method* Find(std::string_view method) const {
    for (const Method& m : methods)
      if (m.name == method) return &m;
    return nullptr;
  }
  std::string Allow() const {
    std::string out;
    for (const Method& m : methods) out.append(out.empty() ? "" : ", ").append(m.name);
    return out;
  }
};

std::optional<Response> ValidCollection(const Router::State&, const Target& t) {
  if (Status s = storage::ValidateName(t.segments[1], "collection name"); !s.ok())
    return ErrorResponse(400, "invalid_id", s.message());
  return std::nullopt;
}

std::optional<Response> ValidDocument(const Router::State& st, const Target& t) {
  if (auto bad = ValidCollection(st, t)) return bad;
  if (Status s = storage::ValidateName(t.segments[2], "document id"); !s.ok())
    return ErrorResponse(400, "invalid_id", s.message());
  return std::nullopt;
}

std::optional<Response> EngineOn(const Router::State& st, const Target&) {
  if (!st.engine) return ErrorResponse(404, "not_found", "indexing is not enabled");
  return std::nullopt;
}

Response ConsoleFile(std::string_view name);

const std::vector<Endpoint>& Endpoints() {
  using S = Router::State;
  static const std::vector<Endpoint> table = {
      // The web console: GET / and GET /ui/<file>.
      {{}, {{"GET", Route::kOther, [](S&, Request&, const Target&, Reply& r) { r(ConsoleFile("index.html")); }, false, true}}},
      {{"ui", "{}"},
       {{"GET", Route::kOther, [](S&, Request&, const Target& t, Reply& r) { r(ConsoleFile(t.segments[1])); }, false, true}}},
      {{"health"}, {{"GET", Route::kHealth, [](S& s, Request&, const Target&, Reply& r) { r(s.Health()); }, false, true}}},
      {{"collections"}, {{"GET", Route::kCollections, [](S& s, Request&, const Target&, Reply& r) { r(s.Collections()); }, true}}},
      {{"changes"}, {{"GET", Route::kChanges, [](S& s, Request&, const Target& t, Reply& r) { s.Changes(t, r); }, true}}},
      {{"metrics"}, {{"GET", Route::kMetrics, [](S& s, Request&, const Target&, Reply& r) { r(s.MetricsText()); }, true}}},
      // Documents.
      {{"docs", "{}"},
       {{"GET", Route::kDocList, [](S& s, Request&, const Target& t, Reply& r) { r(s.ListDocs(t, t.segments[1])); }, true}},
       ValidCollection},
      {{"docs", "{}", kBulkId},
       {{"POST", Route::kDocBulk, [](S& s, Request& q, const Target& t, Reply& r) { s.Bulk(q, t.segments[1], r); }}},
       ValidCollection,
       "on /docs/{collection}/_bulk, the bulk endpoint (\"_bulk\" is reserved, never a document id)"},
      {{"docs", "{}", "{}"},
       {{"GET", Route::kDocGet, [](S& s, Request& q, const Target& t, Reply& r) { r(s.GetDoc(q, t.segments[1], t.segments[2])); }, true},
        {"PUT", Route::kDocPut, [](S& s, Request& q, const Target& t, Reply& r) { s.PutDoc(q, t.segments[1], t.segments[2], r); }},
        {"DELETE", Route::kDocDelete,
         [](S& s, Request& q, const Target& t, Reply& r) { s.DeleteDoc(q, t.segments[1], t.segments[2], r); }}},
       ValidDocument},
      // Indexes.
      {{"indexes"}, {{"GET", Route::kIndexes, [](S& s, Request&, const Target&, Reply& r) { s.ListIndexes(r); }, true}}, EngineOn},
      {{"indexes", "{}"},
       {{"GET", Route::kIndexes, [](S& s, Request&, const Target& t, Reply& r) { s.GetIndex(t.segments[1], r); }, true},
        {"PUT", Route::kIndexes, [](S& s, Request& q, const Target& t, Reply& r) { s.PutIndex(q, t.segments[1], r); }},
        {"DELETE", Route::kIndexes, [](S& s, Request&, const Target& t, Reply& r) { s.DeleteIndex(t.segments[1], r); }}},
       EngineOn},
      {{"indexes", "{}", "results"},
       {{"GET", Route::kIndexResults, [](S& s, Request&, const Target& t, Reply& r) { s.Results(t, t.segments[1], r); }, true}},
       EngineOn},
      {{"indexes", "{}", "search"},
       {{"GET", Route::kIndexSearch, [](S& s, Request& q, const Target& t, Reply& r) { s.Search(q, t, t.segments[1], r); }, true},
        {"POST", Route::kIndexSearch, [](S& s, Request& q, const Target& t, Reply& r) { s.Search(q, t, t.segments[1], r); }, true}},
       EngineOn},
      // Administration.
      {{"admin", "backup"}, {{"GET", Route::kAdmin, [](S& s, Request&, const Target&, Reply& r) { s.Backup(r); }}}},
      {{"admin", "analyze"}, {{"POST", Route::kAdmin, [](S& s, Request& q, const Target&, Reply& r) { r(s.Analyze(q)); }}}},
      {{"admin", "cluster"}, {{"GET", Route::kAdmin, [](S& s, Request&, const Target&, Reply& r) { r(s.ClusterView()); }, true}}},
      {{"admin", "indexes"}, {{"GET", Route::kAdmin, [](S& s, Request&, const Target&, Reply& r) { r(s.AdminIndexes()); }, true}}, EngineOn},
      {{"admin", "indexes", "{}", "pause"},
       {{"POST", Route::kAdmin, [](S& s, Request&, const Target& t, Reply& r) { r(s.IndexControl(t.segments[2], "pause")); }}},
       EngineOn},
      {{"admin", "indexes", "{}", "resume"},
       {{"POST", Route::kAdmin, [](S& s, Request&, const Target& t, Reply& r) { r(s.IndexControl(t.segments[2], "resume")); }}},
       EngineOn},
      {{"admin", "indexes", "{}", "reset"},
       {{"POST", Route::kAdmin, [](S& s, Request&, const Target& t, Reply& r) { r(s.IndexControl(t.segments[2], "reset")); }}},
       EngineOn},
  };
  return table;
}

// The endpoint `t` names (the first that matches: /docs/{c}/_bulk before
// /docs/{c}/{id}), or nullptr.
const Endpoint* FindEndpoint(const Target& t) {
  for (const Endpoint& e : Endpoints())
    if (e.Matches(t)) return &e;
  return nullptr;
}

// A request's row of the table, looked up once per request: its endpoint
// (null off the table) and method (null when the endpoint does not answer
// it).
struct Routed {
  const Endpoint* endpoint = nullptr;
  const Method* method = nullptr;
};
Routed Lookup(const Target& t, std::string_view method) {
  Routed r;
  r.endpoint = FindEndpoint(t);
  if (r.endpoint) r.method = r.endpoint->Find(method);
  return r;
}

// How metrics and logs name a request: its method's label, the first
// method's for one the endpoint does not answer (a 405), kOther off the
// table.
Route Classify(const Routed& r) {
  if (!r.endpoint) return Route::kOther;
  return r.method ? r.method->route : r.endpoint->methods.front().route;
}

// The token of an `Authorization: Bearer <token>` header value, or nullopt
// when the scheme is another or the token is missing. The scheme is
// case-insensitive and followed by one or more spaces (RFC 9110 §11.4).
std::optional<std::string_view> BearerToken(std::string_view auth) {
  const size_t space = auth.find(' ');
  if (space == std::string_view::npos || !EqualsIgnoringCase(auth.substr(0, space), "bearer")) return std::nullopt;
  std::string_view token = auth.substr(space);
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  if (token.empty()) return std::nullopt;
  return token;
}

// A 401 challenges the client with the scheme to use (RFC 9110 §11.6.1).
Response Unauthorized(std::string_view message) {
  Response r = ErrorResponse(401, "unauthorized", message);
  r.www_authenticate = "Bearer";
  return r;
}

// GET /health and the console's files: the routes that need no key
// (API.md, Server; HEAD is handled as GET). The console's files hold no
// data; every call it makes sends the key.
bool IsOpenRoute(const Routed& r) { return r.method && r.method->open; }

// GET / and GET /ui/<file>: the web console (console_assets.h).
Response ConsoleFile(std::string_view name) {
  for (const ConsoleAsset& a : ConsoleAssets()) {
    if (a.name != name) continue;
    Response r;
    r.body.assign(a.data);
    r.content_type = std::string(a.content_type);
    // Revalidated on each load (the files change with the binary); the
    // page may load only its own files and may not be framed.
    r.headers = {{"Cache-Control", "no-cache"},
                 {"X-Content-Type-Options", "nosniff"},
                 {"X-Frame-Options", "DENY"},
                 {"Content-Security-Policy",
                  "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
                  "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"}};
    return r;
  }
  return ErrorResponse(404, "not_found", "no console file named '" + std::string(name) + "'");
}

// What a --read-key may do (API.md, Server): the methods the table marks
// `read` (GET of documents, collections, changes, indexes, search and
// results, POST search, GET /admin/indexes, /admin/cluster and /metrics).
// A GET of a path off the table, or of one that does not answer GET, goes
// on to its 404 or 405.
bool ReadKeyMay(const Routed& r, std::string_view method) {
  if (r.method) return r.method->read;
  return method == "GET" || method == "HEAD";
}

// Nothing when the request may go on: no key is set, it is GET /health,
// `authorization` (the header's value; nullptr: absent) carries the API
// key, or a read key and the request only reads (`r` null: the target is
// not known yet, refused). Else the 401 or 403 that refuses it. Every key
// is compared, in constant time.
std::optional<Response> Authorize(const RouterOptions& o, const std::string* authorization, const Routed* r,
                                  std::string_view method) {
  if (o.api_key.empty() || (r && IsOpenRoute(*r))) return std::nullopt;
  if (!authorization) return Unauthorized("missing Authorization: Bearer <key>");
  std::optional<std::string_view> token = BearerToken(*authorization);
  if (!token) return Unauthorized("expected Authorization: Bearer <key>");
  if (ConstantTimeEquals(*token, o.api_key)) return std::nullopt;
  bool read_key = false;
  for (const auto& k : o.read_keys) read_key |= ConstantTimeEquals(*token, k);
  if (!read_key) return ErrorResponse(403, "forbidden", "wrong API key");
  if (r && ReadKeyMay(*r, method)) return std::nullopt;
  return ErrorResponse(403, "forbidden",
                       "a read key may only read: GET documents, collections, changes, indexes, search and results, "
                       "POST search, GET /admin/indexes, /admin/cluster and /metrics");
}

void Dispatch(Router::State& state, Request& req, const Target& t, const Routed& routed, Reply& reply);

}  // namespace

std::optional<Response> Router::Admit(std::string_view method, std::string_view target,
                                      const std::string* authorization) const {
  if (state_->options.api_key.empty()) return std::nullopt;
  std::optional<Response> refusal = Authorize(state_->options, authorization, nullptr, method);
  if (!refusal) return std::nullopt;
  // Only a request the admin key does not admit pays for parsing its
  // target. One that does not parse is refused too: Handle would answer it
  // 400 without its body. (HEAD is a GET here, as in Handle.)
  std::optional<Target> t = ParseTarget(target);
  const std::string_view as = method == "HEAD" ? std::string_view("GET") : method;
  if (t) {
    const Routed r = Lookup(*t, as);
    refusal = Authorize(state_->options, authorization, &r, as);
  }
  if (!refusal) return std::nullopt;
  state_->metrics.RecordRejected(RejectReason::kUnauthenticated);
  return refusal;
}

void Router::CountRejected(RejectReason reason) { state_->metrics.RecordRejected(reason); }

void Router::Handle(Request request, Reply reply) {
  // HEAD is GET without the body, wherever GET is allowed (RFC 9110 §9.3.2).
  if (request.method == "HEAD") {
    request.method = "GET";
    reply = [reply = std::move(reply)](Response r) {
      r.omit_body = true;
      reply(std::move(r));
    };
  }
  std::optional<Target> target = ParseTarget(request.target);
  if (!target) {
    state_->metrics.Record(Route::kOther, 400, 0);
    reply(ErrorResponse(400, "invalid_argument", "malformed request target (not /path?query or http://host/path?query, or bad percent-encoding)"));
    return;
  }
  // Every copy of the handler's reply shares one Answer: it records the
  // metrics, and answers 500 if the last copy is dropped uncalled (an
  // exception unwound past it, on this thread or a later one), so that no
  // request waits forever for an answer.
  struct Answer {
    std::shared_ptr<State> state;
    Route route;
    std::chrono::steady_clock::time_point start;
    Reply reply;
    std::string method, path;  // for the log lines; path without the query
    bool waits = false;        // waitMs given: slow on purpose
    bool sent = false;
    Answer(std::shared_ptr<State> st, Route rt, Reply rp)
        : state(std::move(st)), route(rt), start(std::chrono::steady_clock::now()), reply(std::move(rp)) {}
    Answer(const Answer&) = delete;
    Answer& operator=(const Answer&) = delete;
    void Send(Response r) {
      if (std::exchange(sent, true)) return;
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      state->metrics.Record(route, r.status, secs);
      const uint64_t ms = uint64_t(secs * 1000);
      const uint64_t slow = state->options.slow_ms;
      if (state->options.access_log)
        logging::Info("http.request", "request answered",
                      {{"method", method}, {"path", path}, {"route", RouteName(route)}, {"status", r.status}, {"ms", ms}});
      if (slow > 0 && ms >= slow && !waits)
        logging::Warn("http.slow_request", "request slower than --slow-ms",
                      {{"method", method}, {"path", path}, {"route", RouteName(route)}, {"status", r.status}, {"ms", ms}});
      reply(std::move(r));
    }
    ~Answer() {
      if (sent) return;
      try {
        Send(ErrorResponse(500, "internal", "internal error (logged by the server)"));
      } catch (...) {
      }
    }
  };
  const Routed routed = Lookup(*target, request.method);
  auto answer = std::make_shared<Answer>(state_, Classify(routed), std::move(reply));
  if (state_->options.access_log || state_->options.slow_ms > 0) {
    answer->method = request.method;
    answer->path = request.target.substr(0, request.target.find('?'));
    answer->waits = target->Param("waitMs") != nullptr;
  }
  reply = [answer = std::move(answer)](Response r) { answer->Send(std::move(r)); };
  // API.md: every request but GET /health needs the key, and a read key
  // only reads (a HEAD is a GET here).
  if (!state_->options.api_key.empty()) {
    std::optional<Response> refusal = Authorize(
        state_->options, request.has_authorization ? &request.authorization : nullptr, &routed, request.method);
    if (refusal) return reply(std::move(*refusal));
  }
  Dispatch(*state_, request, *target, routed, reply);
}

namespace {

// Answers the request through its row of the table.
void Dispatch(Router::State& state, Request& req, const Target& t, const Routed& routed, Reply& reply) {
  // Every query parameter is text (a query, a filter value, a number), so
  // bytes that are not UTF-8 are bad input on any route, never a search for
  // something no document holds.
  for (const auto& [k, v] : t.query) {
    if (!IsValidUtf8(k)) return reply(ErrorResponse(400, "invalid_utf8", "a query parameter name is not valid UTF-8"));
    if (size_t bad = FindInvalidUtf8(v); bad != std::string::npos)
      return reply(ErrorResponse(400, "invalid_utf8",
                                 "query parameter '" + k + "' is not valid UTF-8 (byte " + std::to_string(bad) +
                                     " of its percent-decoded value)"));
  }
  const Endpoint* e = routed.endpoint;
  if (!e)
    return reply(ErrorResponse(404, "not_found", "no route for " + req.method + " " + std::string(Utf8Prefix(req.target, 200))));
  if (e->guard)
    if (std::optional<Response> refusal = e->guard(state, t)) return reply(std::move(*refusal));
  if (!routed.method) return reply(MethodNotAllowed(e->Allow(), e->where));
  routed.method->handle(state, req, t, reply);
}

}  // namespace

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
    w.Key("tombstones");
    w.Uint64(c.tombstones);
    w.EndObject();
  }
  w.EndArray();
  w.Key("lastEtag");
  w.Uint64(last);
  w.EndObject();
  return JsonResponse(200, buf);
}

// GET /docs/{collection}?after=<id>&limit=<n>: the collection's documents
// in id order, as CouchDB's _all_docs, paged by key (API.md).
Response Router::State::ListDocs(const Target& t, const std::string& coll) const {
  uint64_t limit = kDefaultListLimit;
  if (auto bad = ReadCountParam(t, "limit", kMaxListLimit, limit)) return std::move(*bad);
  const std::string* after = t.Param("after");
  auto page = store.ListDocuments(coll, after ? std::string_view(*after) : std::string_view(), limit);
  if (!page.ok()) return FromStatus(page.status());
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  w.Key("results");
  w.StartArray();
  for (const auto& d : page->docs) {
    w.StartObject();
    w.Key("id");
    WriteString(w, d.id);
    w.Key("etag");
    w.Uint64(d.etag);
    w.Key("doc");
    w.RawValue(d.body.data(), d.body.size(), rapidjson::kObjectType);  // as stored
    w.EndObject();
    if (buf.GetSize() > options.max_response_bytes)
      return ResponseTooLarge(Status::TooLarge("the page would exceed " + std::to_string(options.max_response_bytes) +
                                               " bytes (--max-response-bytes); ask for fewer with limit"));
  }
  w.EndArray();
  if (page->more && !page->docs.empty()) {
    w.Key("next");
    WriteString(w, page->docs.back().id);
  }
  w.EndObject();
  return JsonResponse(200, buf);
}

void Router::State::Changes(const Target& t, Reply& reply) {
  uint64_t since = 0, limit = kDefaultChangesLimit, wait_ms = 0;
  if (auto bad = ReadCountParam(t, "since", UINT64_MAX, since)) return reply(std::move(*bad));
  if (auto bad = ReadCountParam(t, "limit", kMaxChangesLimit, limit)) return reply(std::move(*bad));
  if (auto bad = ReadCountParam(t, "waitMs", kMaxWaitMs, wait_ms)) return reply(std::move(*bad));
  std::optional<std::string> collection;
  if (const std::string* c = t.Param("collection")) collection = *c;
  auto answer = [&store = store, since, limit, collection]() -> Response {
    uint64_t last = store.LastEtag();
    auto changes = collection ? store.ChangesSince(since, limit, std::string_view(*collection))
                              : store.ChangesSince(since, limit);
    if (!changes.ok()) return FromStatus(changes.status());
    // Read after the feed: a purge that the read missed is seen here.
    if (const uint64_t purged = store.PurgedMax(); since > 0 && since < purged) {
      // oldestEtag inside `error`, as API.md puts an error's details.
      return ErrorResponse(410, "changes_purged",
                           "tombstones up to etag " + std::to_string(purged) +
                               " were purged (--tombstone-retention): this reader may have missed deletes; start "
                               "again from since=0",
                           "oldestEtag", purged);
    }
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
  if (wait_ms == 0 || limit == 0) return reply(answer());
  auto& st = store;
  auto subscribe = [&st](std::function<void()> wake) {
    return st.AddCommitListener([wake](uint64_t) { wake(); });
  };
  auto unsubscribe = [&st](uint64_t handle) { st.RemoveCommitListener(handle); };
  if (!collection) {
    if (st.LastEtag() > since) return reply(answer());
    // Long poll: answered by the first commit after `since`, or at waitMs.
    return WaitThen(
        std::chrono::milliseconds(wait_ms), [&st, since] { return st.LastEtag() > since; }, subscribe, unsubscribe,
        [reply = std::move(reply), answer] { reply(answer()); });
  }
  // With collection=C, only a change of C newer than `since` ends the wait
  // (as CouchDB's filtered longpoll): a write elsewhere, or a `since` below
  // the server's last etag with nothing newer in C, keeps it waiting until
  // waitMs. Whether C has one is a read, done on an I/O thread after a
  // commit newer than `checked`, the last etag through which C was found
  // to have none: one read per commit at most, none between commits.
  auto checked = std::make_shared<std::atomic<uint64_t>>(0);
  auto news = [&st, since, c = *collection, checked] {
    const uint64_t last = st.LastEtag();  // first: the read below sees every commit through it
    if (since > 0 && since < st.PurgedMax()) return true;  // 410 now
    auto changes = st.ChangesSince(since, 1, std::string_view(c));
    if (!changes.ok() || !changes->empty()) return true;  // an error is answered, not waited on
    uint64_t seen = checked->load();
    while (seen < last && !checked->compare_exchange_weak(seen, last)) {
    }
    return false;
  };
  if (news()) return reply(answer());
  WaitThen(
      std::chrono::milliseconds(wait_ms), [&st, checked] { return st.LastEtag() > checked->load(); }, subscribe,
      unsubscribe, [reply = std::move(reply), answer] { reply(answer()); }, news);
}

void Router::State::WaitThen(std::chrono::milliseconds wait, std::function<bool()> ready,
                             const std::function<uint64_t(std::function<void()>)>& subscribe,
                             std::function<void(uint64_t)> unsubscribe, std::function<void()> then,
                             std::function<bool()> confirm) {
  auto w = std::make_shared<Waiter>();
  w->finish = std::move(then);
  {
    std::lock_guard lock(waiters_mu);
    waiters.insert(w);
  }
  std::weak_ptr<State> weak_self = weak_from_this();
  std::weak_ptr<Waiter> weak_w = w;
  // Subscribe first, then check: a wake-up between the two is never lost.
  uint64_t handle = subscribe([weak_self, weak_w, ready, confirm] {
    auto self = weak_self.lock();
    auto w = weak_w.lock();
    if (!self || !w || w->done || !ready()) return;
    // Finish on an I/O thread, not on the notifying (merger/worker) thread;
    // the confirming read runs there too.
    self->timers.RunAfter(std::chrono::milliseconds(0), [self, w, confirm] {
      if (!w->done && (!confirm || confirm())) self->Finish(w);
    });
  });
  {
    std::lock_guard lock(w->mu);
    w->unsubscribe = [unsubscribe = std::move(unsubscribe), handle] { unsubscribe(handle); };
  }
  timers.RunAfter(wait, [self = shared_from_this(), w] { self->Finish(w); });
  if (ready() && (!confirm || confirm())) Finish(w);
}

void Router::State::Finish(const std::shared_ptr<Waiter>& w) {
  if (w->done.exchange(true)) return;
  std::function<void()> unsubscribe;
  {
    std::lock_guard lock(w->mu);
    unsubscribe = std::move(w->unsubscribe);
  }
  if (unsubscribe) unsubscribe();
  {
    std::lock_guard lock(waiters_mu);
    waiters.erase(w);
  }
  w->finish();
}

namespace {

// A PUT's or DELETE's If-Match / If-None-Match headers as the store's
// preconditions, or the response that refuses them. If-Match compares
// strongly (RFC 9110 13.1.1): a weak etag (W/"4") never matches, so the
// write fails its precondition whether or not the document exists.
std::optional<Response> ReadWriteConditions(const Request& req, WriteOp& op) {
  if (req.if_match == "*") {
    op.if_match_any = true;
  } else if (!req.if_match.empty()) {
    auto e = ParseEtagHeader(req.if_match);
    if (!e) return ErrorResponse(400, "invalid_argument", "If-Match must be one etag such as \"42\", or *");
    if (e->weak) return ErrorResponse(412, "precondition_failed", "If-Match compares strongly: a weak etag never matches");
    op.if_match = e->etag;
  }
  if (!req.if_none_match.empty()) {
    if (req.if_none_match != "*")
      return ErrorResponse(400, "invalid_argument", "If-None-Match on a write supports only *");
    op.if_none_match_any = true;
  }
  return std::nullopt;
}

}  // namespace

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
      if (e && e->etag == doc->etag) match = true;  // weak comparison: W/"N" matches too
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

void Router::State::SubmitWrite(WriteRequest request, DocumentStore::WriteCallback done) {
  if (options.cluster) return options.cluster->Submit(std::move(request), std::move(done));
  store.Submit(std::move(request), std::move(done));
}

void Router::State::PutDoc(Request& req, const std::string& coll, const std::string& id, Reply& reply) {
  if (!IsJsonContentType(req.content_type, false))
    return reply(ErrorResponse(
        415, "unsupported_media_type",
        "Content-Type must be application/json, got '" + std::string(Utf8Prefix(req.content_type, 100)) + "'"));
  if (auto problem = ValidateJsonObject(req.body, nullptr, DuplicateKeys::kReject))
    return reply(ProblemResponse(*problem));
  WriteOp op;
  op.kind = WriteKind::kPut;
  if (auto bad = ReadWriteConditions(req, op)) return reply(std::move(*bad));
  op.collection = coll;
  op.id = id;
  op.body = std::move(req.body);
  WriteRequest wr;
  wr.ops.push_back(std::move(op));
  SubmitWrite(std::move(wr), [reply = std::move(reply), coll, id](WriteResult r) {
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
  if (auto bad = ReadWriteConditions(req, op)) return reply(std::move(*bad));
  op.collection = coll;
  op.id = id;
  WriteRequest wr;
  wr.ops.push_back(std::move(op));
  SubmitWrite(std::move(wr), [reply = std::move(reply)](WriteResult r) {
    if (!r.status.ok()) return reply(FromStatus(r.status));
    Response resp;
    resp.body = "{\"etag\":" + std::to_string(r.last_etag) + "}";
    resp.etag = r.last_etag;
    reply(std::move(resp));
  });
}

namespace {

constexpr size_t kParallelBulkBytes = size_t{4} << 20;

struct BulkPart {
  std::vector<WriteOp> ops;
  std::optional<Response> error;  // the first bad line of this part
};

// Validates the NDJSON lines of `part` (whose first line is line
// first_line + 1 of the body) and turns them into write ops.
BulkPart ParseBulkPart(std::string_view part, size_t first_line, const std::string& coll,
                       const RouterOptions& options) {
  BulkPart out;
  size_t line_no = first_line;
  ObjectFields fields;
  while (!part.empty()) {
    ++line_no;
    size_t nl = part.find('\n');
    std::string_view line = part.substr(0, nl);
    part.remove_prefix(nl == std::string_view::npos ? part.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (IsBlank(line)) continue;
    if (line.size() > options.max_doc_bytes) {
      out.error = ErrorResponse(413, "body_too_large",
                                "line " + std::to_string(line_no) + ": document exceeds the limit of " +
                                    std::to_string(options.max_doc_bytes) + " bytes",
                                std::nullopt, line_no);
      return out;
    }
    if (auto problem = ValidateJsonObject(line, &fields, DuplicateKeys::kReject)) {
      out.error = ProblemResponse(*problem, line_no);
      return out;
    }
    if (!fields.id) {
      out.error = ErrorResponse(400, "invalid_bulk_line",
                                "line " + std::to_string(line_no) +
                                    (fields.id_present ? ": \"id\" must be a string" : ": missing string field \"id\""),
                                std::nullopt, line_no);
      return out;
    }
    if (Status s = storage::ValidateName(*fields.id, "document id"); !s.ok()) {
      out.error = ErrorResponse(400, "invalid_id", "line " + std::to_string(line_no) + ": " + s.message(),
                                std::nullopt, line_no);
      return out;
    }
    // No GET could read it. A delete line may still remove one stored
    // before this check existed.
    if (*fields.id == kBulkId && !fields.deleted) {
      out.error =
          ErrorResponse(400, "invalid_id",
                        "line " + std::to_string(line_no) +
                            ": document id \"_bulk\" is reserved (/docs/{collection}/_bulk is the bulk endpoint)",
                        std::nullopt, line_no);
      return out;
    }
    WriteOp op;
    op.kind = fields.deleted ? WriteKind::kDelete : WriteKind::kPut;
    op.collection = coll;
    op.id = std::move(*fields.id);
    if (!fields.deleted) op.body.assign(line);
    out.ops.push_back(std::move(op));
  }
  return out;
}

}  // namespace

void Router::State::Bulk(Request& req, const std::string& coll, Reply& reply) {
  if (!IsJsonContentType(req.content_type, true))
    return reply(ErrorResponse(415, "unsupported_media_type",
                               "Content-Type must be application/x-ndjson or application/json, got '" +
                                   std::string(Utf8Prefix(req.content_type, 100)) + "'"));
  // Large bodies are parsed in two halves on two threads (the merger is
  // idle meanwhile); the first error in line order wins, as if sequential.
  std::string_view body = req.body;
  size_t split = body.size();
  if (body.size() >= kParallelBulkBytes) {
    split = body.find('\n', body.size() / 2);
    split = split == std::string_view::npos ? body.size() : split + 1;
  }
  std::string_view second = body.substr(split);
  size_t first_lines = 0;
  for (char c : body.substr(0, split))  // lines before the split (memchr-speed loop)
    first_lines += c == '\n';
  BulkPart tail;
  std::thread helper;
  std::exception_ptr helper_error;  // rethrown here, where the request's boundary catches it
  if (!second.empty()) {
    try {
      helper = std::thread([&] {
        try {
          tail = ParseBulkPart(second, first_lines, coll, options);
        } catch (...) {
          helper_error = std::current_exception();
        }
      });
    } catch (const std::system_error&) {
      // No thread to be had (a resource limit): this thread parses both.
    }
  }
  BulkPart head;
  try {
    head = ParseBulkPart(body.substr(0, split), 0, coll, options);
  } catch (...) {
    if (helper.joinable()) helper.join();  // it reads `body`: never unwind past it
    throw;
  }
  if (helper.joinable()) helper.join();
  else if (!second.empty()) tail = ParseBulkPart(second, first_lines, coll, options);
  if (helper_error) std::rethrow_exception(helper_error);
  if (head.error) return reply(std::move(*head.error));
  if (tail.error) return reply(std::move(*tail.error));
  WriteRequest wr;
  wr.single = false;
  wr.ops = std::move(head.ops);
  wr.ops.reserve(wr.ops.size() + tail.ops.size());
  for (auto& op : tail.ops) wr.ops.push_back(std::move(op));
  if (wr.ops.empty()) return reply(ErrorResponse(400, "empty_body", "the bulk body holds no documents"));
  const size_t count = wr.ops.size();
  req.body.clear();
  req.body.shrink_to_fit();
  SubmitWrite(std::move(wr), [reply = std::move(reply), count](WriteResult r) {
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

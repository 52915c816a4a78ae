// Unit tests of the transport-free server pieces: JSON body validation and
// the router's endpoints (driven directly, without sockets).
#include "server/router.h"

#include <rapidjson/document.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <future>
#include <random>
#include <set>

#include "common/utf8.h"
#include "server/json_input.h"
#include "storage/document_store.h"

using namespace corvid;
using namespace corvid::server;

TEST_CASE("JSON validation accepts objects and names every problem", "[server]") {
  CHECK_FALSE(ValidateJsonObject(R"({"a":[1,2,{"b":null}],"n":1.5e308,"big":18446744073709551616123})"));
  // Numbers beyond the double range are refused (documented limit),
  // also those whose exponent RapidJSON lets through (10e308 read as
  // infinity was stored, and a search answer then held `"score":}`).
  CHECK(ValidateJsonObject(R"({"n":1e400})")->code == "invalid_json");
  for (const char* big : {"10e308", "9e308", "1.8e308", "-1.8e308", "1E+309", "1.7976931348623159e308", "0.2e309",
                          "1000000000000000000000e300"}) {
    INFO(big);
    auto p = ValidateJsonObject(std::string(R"({"a":[1,)") + big + "]}");
    REQUIRE(p);
    CHECK(p->code == "invalid_json");
    CHECK(p->message == "Number too big to be stored in double. at offset 8");
    CHECK(p->offset == size_t{8});
  }
  // The largest double and numbers that round to it, or to zero, are numbers.
  for (const char* fine : {"1e308", "1.7976931348623157e308", "1.7976931348623158e308", "-1.7976931348623157e308",
                           "1e-400", "0.1e-330", "123456789012345678901234567890", "1.5E+3", "0e0"})
    CHECK_FALSE(ValidateJsonObject(std::string(R"({"a":[1,)") + fine + "]}"));
  // Hundreds of digits: below the smallest double (0) is a number, above the largest is not.
  CHECK_FALSE(ValidateJsonObject(R"({"a":0.)" + std::string(700, '0') + "1}"));
  CHECK_FALSE(ValidateJsonObject(R"({"a":-0.)" + std::string(400, '0') + "1e10}"));
  CHECK_FALSE(ValidateJsonObject(R"({"a":1)" + std::string(300, '0') + "}"));
  CHECK(ValidateJsonObject(R"({"a":1)" + std::string(400, '0') + "}")->code == "invalid_json");
  CHECK(ValidateJsonObject(R"({"a":1)" + std::string(300, '0') + ".5e10}")->code == "invalid_json");
  CHECK_FALSE(ValidateJsonObject("  {}\n"));
  // A raw NUL byte ends RapidJSON's input, so "{}\0..." once passed as "{}"
  // and was stored with the rest: invalid JSON for every reader after.
  for (std::string_view nul : {std::string_view("{\"a\":1}\0xyz", 11), std::string_view("{}\0", 3),
                               std::string_view("{} \0", 4), std::string_view("\0{}", 3)}) {
    auto p = ValidateJsonObject(nul);
    REQUIRE(p);
    CHECK(p->code == "invalid_json");
  }
  CHECK(ValidateJsonObject(std::string_view("{\"a\":1}\0", 8))->offset == size_t{7});
  CHECK(ValidateJsonObject("")->code == "empty_body");
  CHECK(ValidateJsonObject(" \r\n")->code == "empty_body");
  CHECK(ValidateJsonObject("[1]")->code == "not_an_object");
  CHECK(ValidateJsonObject("\"s\"")->code == "not_an_object");
  CHECK(ValidateJsonObject("12")->code == "not_an_object");
  auto bad = ValidateJsonObject(R"({"a":1,})");
  REQUIRE(bad);
  CHECK(bad->code == "invalid_json");
  CHECK(bad->offset == size_t{7});
  CHECK(ValidateJsonObject("{} {}")->code == "invalid_json");
  CHECK(ValidateJsonObject("{\"a\":\"\xff\"}")->code == "invalid_utf8");
  CHECK(ValidateJsonObject("{\"a\":\"\xed\xa0\x80\"}")->code == "invalid_utf8");  // surrogate
  CHECK(ValidateJsonObject("{\"a\":NaN}")->code == "invalid_json");

  auto nest = [](int depth) {
    std::string s;
    for (int i = 0; i < depth - 1; ++i) s += "{\"a\":";
    s += "{}";
    for (int i = 0; i < depth - 1; ++i) s += "}";
    return s;
  };
  CHECK_FALSE(ValidateJsonObject(nest(256)));
  CHECK(ValidateJsonObject(nest(257))->code == "too_deep");
  CHECK(ValidateJsonObject("{\"a\":" + std::string(100000, '[') )->code == "too_deep");
}

TEST_CASE("JSON validation refuses \\u escapes that spell a lone surrogate", "[server]") {
  // The bytes are ASCII, but RapidJSON would decode these escapes into
  // strings that are not UTF-8. The offset is the escape's backslash; the
  // message names where the string is.
  struct Case {
    std::string body;
    size_t offset;
    std::string where;
  };
  const Case cases[] = {
      {R"({"a":"\udc00"})", 6, "(in 'a')"},               // lone low
      {R"({"a":"x\ud800"})", 7, "(in 'a')"},              // lone high, at the end
      {R"({"a":"\ud800\u0041"})", 6, "(in 'a')"},         // high, then not a low
      {R"({"a":"\udc00\ud800"})", 6, "(in 'a')"},         // the wrong order
      {R"({"a":"\ud83d\ude00\udfff"})", 18, "(in 'a')"},  // a pair, then a lone low
      {R"({"a":"\\udc00 \"\\\udfff"})", 18, "(in 'a')"},  // escaped \ and ", then a lone low
      {R"({"a":"\\udc00 \"\\\udbff"})", 18, "(in 'a')"},  // ... then a lone high
      {R"({"ok":"\u00e9","\udc00":1})", 16, "(in a top-level key)"},
      {R"({"a":{"k\uDC00":1}})", 8, "(in a key of 'a')"},
      {R"({"a":{"\ud800":1}})", 7, "(in a key of 'a')"},
      {R"({"a":[0,{"b":"\udfff"}]})", 14, "(in 'a[1].b')"},
      {R"({"b":[["\ud800"]]})", 8, "(in 'b[0][0]')"},
  };
  for (const Case& c : cases) {
    INFO(c.body);
    auto problem = ValidateJsonObject(c.body);
    REQUIRE(problem);
    CHECK(problem->code == "invalid_utf8");
    CHECK(problem->offset == c.offset);
    CHECK(problem->message.find("at offset " + std::to_string(c.offset)) != std::string::npos);
    CHECK(problem->message.find(c.where) != std::string::npos);
  }
  // A pair is one character, decoded to its 4-byte UTF-8; escaped text
  // that only looks like an escape, and raw 0xED-led characters (Hangul), are fine.
  ObjectFields f;
  CHECK_FALSE(ValidateJsonObject(R"({"id":"\ud83d\ude00","\uD83D\uDE00":["\\udc00"]})", &f));
  CHECK(f.id == std::optional<std::string>("\xf0\x9f\x98\x80"));
  CHECK_FALSE(ValidateJsonObject("{\"\xed\x95\x9c\":\"\xed\x9f\xbb \\ud55c \\ud7ff \\ue000\"}"));
}

TEST_CASE("JSON validation extracts the bulk fields", "[server]") {
  ObjectFields f;
  CHECK_FALSE(ValidateJsonObject(R"({"x":{"id":"inner"},"id":"outer","_deleted":true})", &f));
  CHECK(f.id == std::optional<std::string>("outer"));
  CHECK(f.deleted);
  CHECK_FALSE(ValidateJsonObject(R"({"id":7})", &f));
  CHECK_FALSE(f.id);
  CHECK(f.id_present);
  CHECK_FALSE(ValidateJsonObject(R"({"id":{"id":"x"}})", &f));
  CHECK_FALSE(f.id);
  CHECK(f.id_present);
  CHECK_FALSE(ValidateJsonObject(R"({"name":"x","_deleted":false})", &f));
  CHECK_FALSE(f.id_present);
  CHECK_FALSE(f.deleted);
  CHECK_FALSE(ValidateJsonObject(R"({"id":"a\"b\u00e9"})", &f));
  CHECK(f.id == std::optional<std::string>("a\"b\xc3\xa9"));  // unescaped
}

namespace {

std::optional<JsonProblem> ValidateDocument(std::string_view body) {
  return ValidateJsonObject(body, nullptr, DuplicateKeys::kReject);
}

// `{"<prefix>0":0,"<prefix>1":1,...}`: `n` distinct keys in one object, and
// after them the keys in `extra` (each with the value 0).
std::string ManyKeys(size_t n, std::string_view prefix, std::initializer_list<std::string_view> extra = {}) {
  std::string s = "{";
  for (size_t i = 0; i < n; ++i) {
    if (i) s += ',';
    s.append("\"").append(prefix).append(std::to_string(i)).append("\":").append(std::to_string(i));
  }
  for (std::string_view k : extra) s.append(s.size() > 1 ? ",\"" : "\"").append(k).append("\":0");
  return s + "}";
}

}  // namespace

TEST_CASE("JSON validation of a document refuses a key twice in one object", "[server]") {
  struct Case {
    std::string body;
    size_t offset;  // the repeated key's opening quote
    std::string message;
  };
  const Case refused[] = {
      {R"({"a":1,"b":2,"a":3})", 13, R"(duplicate key "a" at offset 13 in the top-level object)"},
      {R"({"x":{"b":1,"b":2}})", 12, R"(duplicate key "b" at offset 12 in the object at 'x')"},
      {R"({"a":[1,{"k":1},{"k":2,"k":3}]})", 23, R"(duplicate key "k" at offset 23 in the object at 'a[2]')"},
      {R"({"a":{"b":[[{"c":{"d":0,"d":1}}]]}})", 24,
       R"(duplicate key "d" at offset 24 in the object at 'a.b[0][0].c')"},
      // Keys compare decoded: an escape is the character it spells.
      {R"({"a":1,"\u0061":2})", 7, R"(duplicate key "a" at offset 7 in the top-level object)"},
      {"{\"\\u00e9t\\u00E9\":1,\"\xc3\xa9t\xc3\xa9\":2}", 19,
       "duplicate key \"\xc3\xa9t\xc3\xa9\" at offset 19 in the top-level object"},
      {R"({"\ud83d\ude00":1,"😀":2})", 18, R"(duplicate key "😀" at offset 18 in the top-level object)"},
      {R"({"a\/b":1,"a/b":2})", 10, R"(duplicate key "a/b" at offset 10 in the top-level object)"},
      // A key the parent had before a child object opened and closed.
      {R"({"a":{"b":1},"a":2})", 13, R"(duplicate key "a" at offset 13 in the top-level object)"},
      // The message escapes what the key holds, as JSON spells it.
      {R"({"":1,"":2})", 6, R"(duplicate key "" at offset 6 in the top-level object)"},
      {R"({"q\"b\\s\n\u0000\u007f":1,"q\"b\\s\n\u0000\u007f":2})", 27,
       R"(duplicate key "q\"b\\s\n\u0000\u007f" at offset 27 in the top-level object)"},
      {"{\"k\":{ \"id\" : 1 ,\n \"id\" : 2 }}", 19, R"(duplicate key "id" at offset 19 in the object at 'k')"},
  };
  for (const Case& c : refused) {
    INFO(c.body);
    auto p = ValidateDocument(c.body);
    REQUIRE(p);
    CHECK(p->code == "duplicate_key");
    CHECK(p->offset == c.offset);
    CHECK(p->message == c.message);
    CHECK(c.body.substr(c.offset, 1) == "\"");
    // Other bodies (index definitions, searches) leave duplicates to their own parsers.
    CHECK_FALSE(ValidateJsonObject(c.body));
  }

  // Keys of different objects, and a key at different levels, are fine.
  for (std::string_view body : {
           R"({"x":{"k":1},"y":{"k":2},"z":[{"k":1},{"k":1},{"k":[{"k":1}]}]})",
           R"({"k":{"k":{"k":1}},"j":[{"k":[{"k":{"k":1}}]}]})",
           R"({"a":{"b":1,"c":2},"b":3,"c":{"a":1}})",  // a child's keys go when it closes
           R"({"a":1,"A":2,"a ":3,"\u0061\u0062":4,"a\u0000":5,"aa":6})",
           R"({"id":"x","_deleted":false,"v":[{"id":"y"},{"id":"z"}]})",
       }) {
    INFO(body);
    CHECK_FALSE(ValidateDocument(body));
  }

  // A long key is cut in the message, at a character boundary.
  std::string long_key;
  for (int i = 0; i < 120; ++i) long_key += "\xc3\xa9";  // 240 bytes
  auto p = ValidateDocument("{\"" + long_key + "\":1,\"" + long_key + "\":2}");
  REQUIRE(p);
  CHECK(p->code == "duplicate_key");
  CHECK(p->message ==
        "duplicate key \"" + long_key.substr(0, 100) + "\"... (240 bytes) at offset 246 in the top-level object");
  CHECK(IsValidUtf8(p->message));

  // Still reported first: a problem before the duplicate; the bulk fields are still read.
  CHECK(ValidateDocument(R"({"a":"\udc00","a":1})")->code == "invalid_utf8");
  CHECK(ValidateDocument(R"({"a":1,"a":2,})")->code == "duplicate_key");
  CHECK(ValidateDocument(R"({"a":1,,"a":2})")->code == "invalid_json");
  ObjectFields f;
  CHECK_FALSE(ValidateJsonObject(R"({"id":"x","v":{"id":1},"_deleted":true})", &f, DuplicateKeys::kReject));
  CHECK(f.id == std::optional<std::string>("x"));
  CHECK(f.deleted);
  CHECK(ValidateJsonObject(R"({"id":"x","id":"y"})", &f, DuplicateKeys::kReject)->code == "duplicate_key");
}

TEST_CASE("JSON validation finds duplicate keys in large objects in linear time", "[server]") {
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); };
  // Past 16 keys an object's keys are in a hash table: 200k keys take
  // milliseconds (compared pairwise they would take minutes).
  const std::string distinct = ManyKeys(200000, "key");
  auto start = Clock::now();
  CHECK_FALSE(ValidateDocument(distinct));
  CHECK(seconds(start) < 2.0);

  const std::string last_repeats_first = ManyKeys(200000, "key", {"key0"});
  start = Clock::now();
  auto p = ValidateDocument(last_repeats_first);
  CHECK(seconds(start) < 2.0);
  REQUIRE(p);
  CHECK(p->code == "duplicate_key");
  CHECK(p->offset == last_repeats_first.size() - 9);  // ... ,"key0":0}
  CHECK(p->message.starts_with(R"(duplicate key "key0" at offset )"));
  auto middle = ValidateDocument(ManyKeys(200000, "key", {"new", "key123456"}));
  REQUIRE(middle);
  CHECK(middle->message.starts_with(R"(duplicate key "key123456" at offset )"));

  // Keys long enough to be hashed in 16-byte steps, alike but for a few bytes.
  const std::string pad(40, 'p');
  std::string long_keys = ManyKeys(50000, pad);
  CHECK_FALSE(ValidateDocument(long_keys));
  CHECK(ValidateDocument(ManyKeys(50000, pad, {pad + "49999"}))->code == "duplicate_key");

  // Every size around the switch to a hash table, with the duplicate first or last.
  for (size_t n = 1; n <= 40; ++n) {
    INFO(n);
    CHECK_FALSE(ValidateDocument(ManyKeys(n, "k")));
    CHECK(ValidateDocument(ManyKeys(n, "k", {"k0"}))->code == "duplicate_key");
    std::string last = "k";
    last += std::to_string(n - 1);
    CHECK(ValidateDocument(ManyKeys(n, "k", {last}))->code == "duplicate_key");
  }

  // Large objects nested in large objects: each has a table of its own, and
  // a parent's table outlives its children.
  std::string nested = "{";
  for (int i = 0; i < 40; ++i) {
    nested += "\"p" + std::to_string(i) + "\":";
    nested += i % 10 == 0 ? ManyKeys(30, "c", {"p1", "p2"}) : "0";
    nested += ",";
  }
  CHECK_FALSE(ValidateDocument(nested + "\"last\":1}"));
  CHECK(ValidateDocument(nested + "\"p39\":1}")->code == "duplicate_key");
  CHECK(ValidateDocument(nested + "\"q\":" + ManyKeys(30, "c", {"c29"}) + "}")->code == "duplicate_key");
  // After a huge body, small ones still work (the buffers were given back).
  CHECK_FALSE(ValidateDocument(R"({"a":{"a":1},"b":2})"));
  CHECK(ValidateDocument(R"({"a":{"a":1},"a":2})")->code == "duplicate_key");
}

TEST_CASE("JSON validation agrees with a brute-force oracle on duplicate keys", "[server]") {
  // Random documents whose keys come from a small alphabet (so duplicates
  // are common), each key spelt with random escapes; the oracle decodes
  // nothing: it knows each key's text before it was spelt.
  std::mt19937_64 rng(20261204);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  auto spell = [&](std::string_view key) {
    std::string out = "\"";
    for (char c : key) {
      if (pick(3) == 0) {
        char buf[8];
        std::snprintf(buf, sizeof buf, pick(2) ? "\\u%04x" : "\\u%04X", static_cast<unsigned char>(c));
        out += buf;
      } else {
        out += c;
      }
    }
    return out + "\"";
  };
  struct Expect {
    std::optional<std::string> first_duplicate;
  };
  // Writes a random value of depth at most `depth` to `out`, noting in `e`
  // the first key (in text order) repeated in its object.
  std::function<void(std::string&, int, Expect&)> value = [&](std::string& out, int depth, Expect& e) {
    const size_t kind = depth > 0 ? pick(4) : 3;
    if (kind <= 1) {
      const size_t n = pick(kind == 0 ? 4 : 24);  // some objects past the linear limit
      std::set<std::string> seen;
      out += '{';
      for (size_t i = 0; i < n; ++i) {
        std::string key;
        for (size_t len = pick(kind == 0 ? 2 : 3) + 1; len > 0; --len) key += "ab"[pick(2)];
        if (i) out += ',';
        out += spell(key) + ":";
        if (!seen.insert(key).second && !e.first_duplicate) e.first_duplicate = key;
        value(out, depth - 1, e);
      }
      out += '}';
    } else if (kind == 2) {
      out += '[';
      for (size_t i = 0, n = pick(3); i < n; ++i) {
        if (i) out += ',';
        value(out, depth - 1, e);
      }
      out += ']';
    } else {
      out += std::to_string(pick(10));
    }
  };
  int refused = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string body = "{";
    Expect e;
    std::set<std::string> top;
    for (size_t i = 0, n = pick(6); i < n; ++i) {
      std::string key = "t";
      key += std::to_string(pick(8));
      if (i) body += ',';
      body += spell(key) + ":";
      if (!top.insert(key).second && !e.first_duplicate) e.first_duplicate = key;
      value(body, 3, e);
    }
    body += '}';
    INFO(body);
    auto p = ValidateDocument(body);
    REQUIRE(p.has_value() == e.first_duplicate.has_value());
    if (!p) continue;
    ++refused;
    CHECK(p->code == "duplicate_key");
    CHECK(p->message.starts_with("duplicate key \"" + *e.first_duplicate + "\" at offset "));
    CHECK(body[*p->offset] == '"');
  }
  CHECK(refused > 100);
  CHECK(refused < 2900);
}

namespace {

// Timers that run work when the test says so.
class ManualTimers : public Timers {
 public:
  void RunAfter(std::chrono::milliseconds delay, std::function<void()> fn) override {
    std::lock_guard lock(mu_);
    (delay.count() == 0 ? now_ : later_).push_back(std::move(fn));
  }
  void RunDue(bool include_delayed) {
    std::vector<std::function<void()>> run;
    {
      std::lock_guard lock(mu_);
      run.swap(now_);
      if (include_delayed) {
        for (auto& f : later_) run.push_back(std::move(f));
        later_.clear();
      }
    }
    for (auto& f : run) f();
  }
  // Work queued to run now (a parked request's check after a wake-up).
  size_t Due() {
    std::lock_guard lock(mu_);
    return now_.size();
  }

 private:
  std::mutex mu_;
  std::vector<std::function<void()>> now_, later_;
};

struct Fixture {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("corvid-router-test-" + std::to_string(::getpid()));
  std::unique_ptr<storage::DocumentStore> store;
  ManualTimers timers;
  std::unique_ptr<Router> router;

  explicit Fixture(RouterOptions options = {}) {
    std::filesystem::remove_all(dir);
    storage::StoreOptions so;
    so.map_size = size_t{1} << 30;
    store = std::move(storage::DocumentStore::Open(dir.string(), so)).value();
    router = std::make_unique<Router>(*store, nullptr, timers, options);
  }
  ~Fixture() {
    router.reset();
    store.reset();
    std::filesystem::remove_all(dir);
  }

  Response Call(std::string method, std::string target, std::string body = "",
                std::string content_type = "application/json") {
    Request r;
    r.method = std::move(method);
    r.target = std::move(target);
    r.body = std::move(body);
    r.content_type = std::move(content_type);
    return Call(std::move(r));
  }
  Response Call(Request r) {
    std::promise<Response> p;
    auto f = p.get_future();
    router->Handle(std::move(r), [&p](Response resp) { p.set_value(std::move(resp)); });
    return f.get();
  }
};

rapidjson::Document Parse(const std::string& body) {
  rapidjson::Document d;
  d.Parse(body.c_str());
  REQUIRE_FALSE(d.HasParseError());
  return d;
}

std::string ErrorCode(const Response& r) {
  auto d = Parse(r.body);
  REQUIRE(d.HasMember("error"));
  return d["error"]["code"].GetString();
}

}  // namespace

TEST_CASE("router: documents, percent-decoding, methods and errors", "[server]") {
  Fixture fx;
  Response put = fx.Call("PUT", "/docs/users/a%2Fb%20c", R"({"v":1})");
  CHECK(put.status == 201);
  CHECK(put.etag == uint64_t{1});
  auto d = Parse(put.body);
  CHECK(std::string(d["id"].GetString()) == "a/b c");
  CHECK(std::string(d["collection"].GetString()) == "users");

  Response get = fx.Call("GET", "/docs/users/a%2Fb%20c");
  CHECK(get.status == 200);
  CHECK(get.body == R"({"v":1})");

  Request cond;
  cond.method = "GET";
  cond.target = "/docs/users/a%2Fb%20c";
  cond.if_none_match = "\"1\"";
  CHECK(fx.Call(cond).status == 304);
  cond.if_none_match = "\"2\"";
  CHECK(fx.Call(cond).status == 200);

  // The absolute form of a target (RFC 9112 §3.2.2): its path and query.
  CHECK(fx.Call("GET", "http://127.0.0.1:8080/docs/users/a%2Fb%20c").body == R"({"v":1})");
  CHECK(fx.Call("GET", "HTTPS://example.com/docs/users/a%2Fb%20c").body == R"({"v":1})");
  CHECK(fx.Call("GET", "http://example.com/collections?x=1").status == 200);
  CHECK(fx.Call("GET", "http://example.com").status == fx.Call("GET", "/").status);
  CHECK(fx.Call("GET", "http://example.com?a=b").status == fx.Call("GET", "/?a=b").status);
  CHECK(ErrorCode(fx.Call("GET", "http:///docs/users/x")) == "invalid_argument");  // no authority
  CHECK(ErrorCode(fx.Call("GET", "http://user:pw@example.com/health")) == "invalid_argument");  // userinfo
  CHECK(ErrorCode(fx.Call("GET", "ftp://example.com/health")) == "invalid_argument");
  CHECK(ErrorCode(fx.Call("GET", "docs/users/x")) == "invalid_argument");

  CHECK(fx.Call("PUT", "/docs/users/a%2Fb%20c", R"({"v":2})").status == 200);
  CHECK(fx.Call("GET", "/docs/users/zzz").status == 404);
  CHECK(fx.Call("GET", "/docs/users/a/b").status == 404);  // raw '/' is a path separator
  CHECK(ErrorCode(fx.Call("GET", "/docs/users/%zz")) == "invalid_argument");
  CHECK(ErrorCode(fx.Call("GET", "/docs/users/" + std::string(513, 'x'))) == "invalid_id");
  CHECK(ErrorCode(fx.Call("GET", "/docs/users/%00")) == "invalid_id");
  Response patch = fx.Call("PATCH", "/docs/users/x");
  CHECK(patch.status == 405);
  CHECK(patch.allow == "GET, HEAD, PUT, DELETE");
  CHECK(fx.Call("DELETE", "/collections").status == 405);
  CHECK(fx.Call("GET", "/nothing/here").status == 404);
  CHECK(fx.Call("PUT", "/docs/users/x", "{}", "text/plain").status == 415);
  CHECK(fx.Call("PUT", "/docs/users/x", "{}", "application/json; charset=utf-8").status == 201);
  // Media types are case-insensitive (RFC 9110 §8.3.1).
  CHECK(fx.Call("PUT", "/docs/users/x", "{}", "Application/JSON").status == 200);
  CHECK(fx.Call("PUT", "/docs/users/x", "{}", "application/jsonx").status == 415);
  CHECK(ErrorCode(fx.Call("PUT", "/docs/users/y", "[]")) == "not_an_object");

  Request im;
  im.method = "PUT";
  im.target = "/docs/users/x";
  im.body = "{}";
  im.if_match = "nonsense";
  CHECK(ErrorCode(fx.Call(im)) == "invalid_argument");
  im.if_match = "\"999\"";
  CHECK(fx.Call(im).status == 412);

  Response del = fx.Call("DELETE", "/docs/users/x");
  CHECK(del.status == 200);
  CHECK(Parse(del.body)["etag"].GetUint64() == del.etag.value());
  CHECK(fx.Call("DELETE", "/docs/users/x").status == 404);
}

TEST_CASE("router: HEAD answers as GET, marked to go without its body", "[server]") {
  Fixture fx;
  REQUIRE(fx.Call("PUT", "/docs/users/h", R"({"v":1})").status == 201);
  for (const char* target : {"/docs/users/h", "/docs/users/absent", "/health", "/collections", "/changes?since=0"}) {
    INFO(target);
    Response get = fx.Call("GET", target);
    Response head = fx.Call("HEAD", target);
    CHECK(head.status == get.status);
    CHECK(head.etag == get.etag);
    CHECK(head.content_type == get.content_type);
    CHECK(head.body == get.body);  // kept: the transport sends its length, not its bytes
    CHECK(head.omit_body);
    CHECK_FALSE(get.omit_body);
  }
  Request cond;
  cond.method = "HEAD";
  cond.target = "/docs/users/h";
  cond.if_none_match = "\"1\"";
  CHECK(fx.Call(cond).status == 304);
  // Only where GET is allowed.
  Response analyze = fx.Call("HEAD", "/admin/analyze");
  CHECK(analyze.status == 405);
  CHECK(analyze.allow == "POST");
  CHECK(analyze.omit_body);
  CHECK(fx.Call("HEAD", "/nothing/here").status == 404);
}

TEST_CASE("router: bulk is atomic and names the bad line", "[server]") {
  Fixture fx;
  Response ok = fx.Call("POST", "/docs/c/_bulk", "{\"id\":\"1\"}\r\n\n{\"id\":\"2\",\"v\":[1]}\n{\"id\":\"1\",\"_deleted\":true}\n",
                        "application/x-ndjson");
  REQUIRE(ok.status == 200);
  auto d = Parse(ok.body);
  CHECK(d["count"].GetUint64() == 3);
  CHECK(d["firstEtag"].GetUint64() == 1);
  CHECK(d["lastEtag"].GetUint64() == 3);
  CHECK(fx.Call("GET", "/docs/c/2").body == R"({"id":"2","v":[1]})");
  CHECK(fx.Call("GET", "/docs/c/1").status == 404);

  Response bad = fx.Call("POST", "/docs/c/_bulk", "{\"id\":\"3\"}\n{\"id\":\"4\"}\n{\"id\":5}\n{\"id\":\"6\"}\n");
  CHECK(bad.status == 400);
  auto b = Parse(bad.body);
  CHECK(std::string(b["error"]["code"].GetString()) == "invalid_bulk_line");
  CHECK(b["error"]["line"].GetUint64() == 3);
  CHECK(fx.Call("GET", "/docs/c/3").status == 404);
  CHECK(fx.store->LastEtag() == 3);

  Response syntax = fx.Call("POST", "/docs/c/_bulk", "{\"id\":\"3\"}\n\n{\"id\":\"4\",}\n");
  auto s = Parse(syntax.body);
  CHECK(std::string(s["error"]["code"].GetString()) == "invalid_json");
  CHECK(s["error"]["line"].GetUint64() == 3);
  CHECK(ErrorCode(fx.Call("POST", "/docs/c/_bulk", "\n\n")) == "empty_body");

  // Bodies over 4 MiB are parsed in two halves on two threads: line
  // numbers and "first bad line wins" must not change.
  std::string big;
  const int kLines = 40000;
  for (int i = 1; i <= kLines; ++i) big += "{\"id\":\"b" + std::to_string(i) + "\",\"pad\":\"" + std::string(100, 'x') + "\"}\n";
  REQUIRE(big.size() > (size_t{4} << 20));
  std::string bad_late = big, bad_both = big;
  auto break_line = [](std::string& text, int line) {
    size_t pos = 0;
    for (int i = 1; i < line; ++i) pos = text.find('\n', pos) + 1;
    text[pos] = '[';  // not an object any more... and not valid JSON
  };
  break_line(bad_late, 39000);
  break_line(bad_both, 39000);
  break_line(bad_both, 1234);
  auto late = Parse(fx.Call("POST", "/docs/big/_bulk", bad_late).body);
  CHECK(late["error"]["line"].GetUint64() == 39000);
  auto both = Parse(fx.Call("POST", "/docs/big/_bulk", bad_both).body);
  CHECK(both["error"]["line"].GetUint64() == 1234);
  CHECK(fx.Call("GET", "/docs/big/b1").status == 404);
  Response whole = fx.Call("POST", "/docs/big/_bulk", big);
  REQUIRE(whole.status == 200);
  auto w = Parse(whole.body);
  CHECK(w["count"].GetUint64() == kLines);
  CHECK(w["lastEtag"].GetUint64() - w["firstEtag"].GetUint64() + 1 == kLines);
  CHECK(fx.Call("GET", "/docs/big/b" + std::to_string(kLines)).status == 200);
  auto changes = Parse(fx.Call("GET", "/changes?since=" + std::to_string(w["lastEtag"].GetUint64() - 1)).body);
  CHECK(std::string(changes["results"][0]["id"].GetString()) == "b" + std::to_string(kLines));  // line order = etag order
  CHECK(fx.Call("POST", "/docs/c/_bulk", "{\"id\":\"1\"}", "text/csv").status == 415);

  // _bulk is a path, POST only: never a document id.
  for (const char* method : {"GET", "HEAD", "PUT", "DELETE", "PATCH"}) {
    INFO(method);
    Response r = fx.Call(method, "/docs/c/_bulk", "{}");
    CHECK(r.status == 405);
    CHECK(r.allow == "POST");
    CHECK(fx.Call(method, "/docs/c/%5Fbulk", "{}").status == 405);
  }
  Response reserved = fx.Call("POST", "/docs/r/_bulk", "{\"id\":\"a\"}\n{\"id\":\"_bulk\"}\n");
  CHECK(ErrorCode(reserved) == "invalid_id");
  CHECK(Parse(reserved.body)["error"]["line"].GetUint64() == 2);
  CHECK(fx.Call("POST", "/docs/r/_bulk", "{\"id\":\"_bulk\",\"_deleted\":true}\n").status == 200);
  CHECK(fx.Call("PUT", "/docs/r/_bulk2", "{}").status == 201);
}

TEST_CASE("router: a lone surrogate escape is never stored", "[server]") {
  Fixture fx;
  Response put = fx.Call("PUT", "/docs/c/x", R"({"a":"\udc00"})");
  CHECK(put.status == 400);
  auto p = Parse(put.body);
  CHECK(std::string(p["error"]["code"].GetString()) == "invalid_utf8");
  CHECK(p["error"]["offset"].GetUint64() == 6);
  CHECK(ErrorCode(fx.Call("PUT", "/docs/c/x", R"({"\udc00":1})")) == "invalid_utf8");
  CHECK(ErrorCode(fx.Call("PUT", "/docs/c/x", R"({"a":"\ud800"})")) == "invalid_utf8");
  CHECK(fx.Call("GET", "/docs/c/x").status == 404);

  Response bulk = fx.Call("POST", "/docs/c/_bulk", "{\"id\":\"a\"}\n\n{\"id\":\"b\",\"v\":[\"\\udfff\"]}\n",
                          "application/x-ndjson");
  CHECK(bulk.status == 400);
  auto b = Parse(bulk.body);
  CHECK(std::string(b["error"]["code"].GetString()) == "invalid_utf8");
  CHECK(b["error"]["line"].GetUint64() == 3);
  CHECK(b["error"]["offset"].GetUint64() == 16);  // within the line
  CHECK(std::string(b["error"]["message"].GetString()).starts_with("line 3: "));
  CHECK(fx.Call("GET", "/docs/c/a").status == 404);
  CHECK(fx.store->LastEtag() == 0);

  // A pair is a character: stored as sent.
  const std::string emoji = R"({"a":"\ud83d\ude00"})";
  CHECK(fx.Call("PUT", "/docs/c/y", emoji).status == 201);
  CHECK(fx.Call("GET", "/docs/c/y").body == emoji);
}

TEST_CASE("error bodies are valid UTF-8 whatever the message holds", "[server]") {
  // Each maximal ill-formed subpart becomes one U+FFFD (Unicode §3.9, as
  // ICU and browsers decode); well-formed text is kept as is.
  const std::string r = "\xef\xbf\xbd";
  const std::pair<std::string, std::string> cases[] = {
      {"a\xff"
       "b",
       "a" + r + "b"},
      {"\x80\xbf", r + r},                            // stray continuation bytes
      {"\xc0\xaf", r + r},                            // overlong lead
      {"\xe0\x80\xaf", r + r + r},                    // overlong
      {"\xed\xa0\x80", r + r + r},                    // a surrogate
      {"\xf4\x90\x80\x80", r + r + r + r},            // above U+10FFFF
      {"\xf8\x88\x80\x80\x80", r + r + r + r + r},    // 5-byte form
      {"a\xe2\x82", "a" + r},                         // truncated at the end
      {"\xe2\x82x\xf0\x9f\x98!", r + "x" + r + "!"},  // truncated before more text
      {"caf\xc3\xa9 \xf0\x9f\x98\x80 \xed\x95\x9c", "caf\xc3\xa9 \xf0\x9f\x98\x80 \xed\x95\x9c"},
  };
  for (const auto& [message, expected] : cases) {
    INFO(message);
    Response e = ErrorResponse(404, "not_found", message, size_t{3});
    CHECK(IsValidUtf8(e.body));
    auto d = Parse(e.body);
    CHECK(std::string(d["error"]["message"].GetString()) == expected);
    CHECK(d["error"]["offset"].GetUint64() == 3);
  }

  Fixture fx;
  // Echoed request text is cut at a character boundary, not inside one.
  std::string e_acute;
  for (int i = 0; i < 40; ++i) e_acute += "%C3%A9";
  Response since = fx.Call("GET", "/changes?since=x" + e_acute);
  CHECK(IsValidUtf8(since.body));
  std::string want = "x";
  for (int i = 0; i < 31; ++i) want += "\xc3\xa9";  // 63 bytes: a 32nd would make 65
  CHECK(std::string(Parse(since.body)["error"]["message"].GetString()) ==
        "since must be a non-negative integer, got '" + want + "'");
  std::string long_type = "a";
  for (int i = 0; i < 60; ++i) long_type += "\xc3\xa9";
  std::string cut = "a";
  for (int i = 0; i < 49; ++i) cut += "\xc3\xa9";  // 99 bytes: a 50th would make 101
  for (const auto& [type, echoed] : {std::pair{long_type, cut}, std::pair{std::string("text/\xff"), std::string("text/\xef\xbf\xbd")}}) {
    Response put = fx.Call("PUT", "/docs/c/x", "{}", type);
    CHECK(put.status == 415);
    REQUIRE(IsValidUtf8(put.body));
    // Cut whole at a character boundary; an invalid byte shown as U+FFFD.
    CHECK(std::string(Parse(put.body)["error"]["message"].GetString()) ==
          "Content-Type must be application/json, got '" + echoed + "'");
  }
}

TEST_CASE("router: the body limit follows the decoded route", "[server]") {
  RouterOptions options;
  options.max_doc_bytes = 1000;
  options.max_bulk_bytes = 100000;
  Fixture fx(options);
  // What Dispatch routes to Bulk gets the bulk limit, however it is spelt.
  for (const char* target :
       {"/docs/c/_bulk", "/docs/c/%5Fbulk", "/docs/c/%5fbulk", "/docs/c/_bulk?x=1", "/docs/%63%2Fd/%5F%62ulk"}) {
    INFO(target);
    CHECK(fx.router->BodyLimit("POST", target) == 100000);
  }
  // Everything else gets the document limit, even when its raw path ends in /_bulk.
  for (auto [method, target] :
       std::initializer_list<std::pair<const char*, const char*>>{{"PUT", "/docs/c/_bulk"},
                                                                  {"PUT", "/docs/c/%5Fbulk"},
                                                                  {"POST", "/docs/c/_bulkx"},
                                                                  {"POST", "/docs/c/x/_bulk"},
                                                                  {"POST", "/x/_bulk"},
                                                                  {"POST", "/docs/c/%5Fbulk%"},
                                                                  {"POST", "/indexes/i/search"}}) {
    INFO(method << " " << target);
    CHECK(fx.router->BodyLimit(method, target) == 1000);
  }
}

TEST_CASE("router: collections, changes and long polls", "[server]") {
  Fixture fx;
  REQUIRE(fx.Call("PUT", "/docs/b/1", "{}").status == 201);
  REQUIRE(fx.Call("PUT", "/docs/a/1", "{}").status == 201);
  REQUIRE(fx.Call("DELETE", "/docs/a/1").status == 200);

  auto c = Parse(fx.Call("GET", "/collections").body);
  REQUIRE(c["collections"].Size() == 2);
  CHECK(std::string(c["collections"][0]["name"].GetString()) == "a");
  CHECK(c["collections"][0]["count"].GetUint64() == 0);
  CHECK(c["collections"][1]["count"].GetUint64() == 1);
  CHECK(c["lastEtag"].GetUint64() == 3);

  auto ch = Parse(fx.Call("GET", "/changes?since=1&limit=5").body);
  REQUIRE(ch["results"].Size() == 1);
  CHECK(ch["results"][0]["etag"].GetUint64() == 3);
  CHECK(ch["results"][0]["deleted"].GetBool());
  CHECK(ch["lastEtag"].GetUint64() == 3);
  CHECK(ErrorCode(fx.Call("GET", "/changes?since=abc")) == "invalid_argument");
  CHECK(ErrorCode(fx.Call("GET", "/changes?limit=-1")) == "invalid_argument");
  // Query parameters are text: bytes that are not UTF-8 are refused on any route.
  CHECK(ErrorCode(fx.Call("GET", "/changes?since=%FF")) == "invalid_utf8");
  CHECK(ErrorCode(fx.Call("GET", "/collections?x=caf%C3")) == "invalid_utf8");
  CHECK(ErrorCode(fx.Call("GET", "/collections?%ED%A0%80=1")) == "invalid_utf8");
  CHECK(fx.Call("GET", "/collections?x=caf%C3%A9").status == 200);

  // A long poll is answered by the next commit, not before.
  std::promise<Response> p;
  auto f = p.get_future();
  Request lp;
  lp.method = "GET";
  lp.target = "/changes?since=3&waitMs=60000";
  fx.router->Handle(lp, [&p](Response r) { p.set_value(std::move(r)); });
  fx.timers.RunDue(false);
  CHECK(f.wait_for(std::chrono::milliseconds(50)) == std::future_status::timeout);
  REQUIRE(fx.Call("PUT", "/docs/b/2", "{}").status == 201);
  fx.timers.RunDue(false);
  REQUIRE(f.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
  auto got = Parse(f.get().body);
  REQUIRE(got["results"].Size() == 1);
  CHECK(std::string(got["results"][0]["id"].GetString()) == "2");

  // ... or by its deadline, with no results.
  std::promise<Response> p2;
  auto f2 = p2.get_future();
  lp.target = "/changes?since=4&waitMs=10";
  fx.router->Handle(lp, [&p2](Response r) { p2.set_value(std::move(r)); });
  fx.timers.RunDue(true);
  REQUIRE(f2.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
  CHECK(Parse(f2.get().body)["results"].Size() == 0);
}

TEST_CASE("router: a long poll with collection=C waits for a change of C", "[server]") {
  // API.md: with waitMs, /changes long-polls until something newer than
  // `since` exists; collection=C keeps one collection's changes. It once
  // answered at once, empty, on a write elsewhere, or whenever the
  // server's last etag was above `since`.
  Fixture fx;
  REQUIRE(fx.Call("PUT", "/docs/a/1", "{}").status == 201);  // etag 1
  REQUIRE(fx.Call("PUT", "/docs/b/1", "{}").status == 201);  // etag 2
  auto poll = [&fx](const std::string& target) {
    auto p = std::make_shared<std::promise<Response>>();
    Request lp;
    lp.method = "GET";
    lp.target = target;
    fx.router->Handle(lp, [p](Response r) { p->set_value(std::move(r)); });
    return p->get_future();
  };
  auto pending = [](std::future<Response>& f) {
    return f.wait_for(std::chrono::milliseconds(50)) == std::future_status::timeout;
  };
  // `since` is below the server's last etag, but a has nothing newer: it waits.
  auto f = poll("/changes?since=1&collection=a&waitMs=60000");
  fx.timers.RunDue(false);
  CHECK(pending(f));
  CHECK(fx.timers.Due() == 0);  // nothing runs between commits
  // Writes elsewhere wake it for one read each, and it waits on.
  for (int i = 2; i < 5; ++i) {
    REQUIRE(fx.Call("PUT", "/docs/b/" + std::to_string(i), "{}").status == 201);
    CHECK(fx.timers.Due() == 1);
    fx.timers.RunDue(false);
    CHECK(pending(f));
  }
  CHECK(fx.timers.Due() == 0);
  // A change of a answers it, with that change.
  REQUIRE(fx.Call("PUT", "/docs/a/2", "{}").status == 201);  // etag 6
  fx.timers.RunDue(false);
  REQUIRE(f.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
  auto got = Parse(f.get().body);
  REQUIRE(got["results"].Size() == 1);
  CHECK(std::string(got["results"][0]["collection"].GetString()) == "a");
  CHECK(std::string(got["results"][0]["id"].GetString()) == "2");
  CHECK(got["results"][0]["etag"].GetUint64() == 6);
  CHECK(got["lastEtag"].GetUint64() == 6);
  // A deletion in a counts too; one already there answers at once.
  auto d = poll("/changes?since=6&collection=a&waitMs=60000");
  fx.timers.RunDue(false);
  CHECK(pending(d));
  REQUIRE(fx.Call("DELETE", "/docs/a/1").status == 200);  // etag 7
  fx.timers.RunDue(false);
  REQUIRE(d.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
  got = Parse(d.get().body);
  REQUIRE(got["results"].Size() == 1);
  CHECK(got["results"][0]["deleted"].GetBool());
  auto now = poll("/changes?since=5&collection=a&waitMs=60000");
  REQUIRE(now.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
  CHECK(Parse(now.get().body)["results"].Size() == 2);
  // At its deadline: no results, and the server's last etag.
  auto late = poll("/changes?since=7&collection=a&waitMs=10");
  REQUIRE(fx.Call("PUT", "/docs/b/9", "{}").status == 201);  // etag 8
  fx.timers.RunDue(false);
  CHECK(pending(late));
  fx.timers.RunDue(true);
  REQUIRE(late.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
  got = Parse(late.get().body);
  CHECK(got["results"].Size() == 0);
  CHECK(got["lastEtag"].GetUint64() == 8);
  // Shutdown answers a parked one the same way.
  auto parked = poll("/changes?since=8&collection=a&waitMs=60000");
  fx.timers.RunDue(false);
  CHECK(pending(parked));
  fx.router->CompleteWaiters();
  REQUIRE(parked.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
  got = Parse(parked.get().body);
  CHECK(got["results"].Size() == 0);
  CHECK(got["lastEtag"].GetUint64() == 8);
}

TEST_CASE("router: API key", "[server]") {
  RouterOptions options;
  options.api_key = "s3cret";
  Fixture fx(options);
  CHECK(fx.Call("GET", "/health").status == 200);
  CHECK(fx.Call("HEAD", "/health").status == 200);
  CHECK(ErrorCode(fx.Call("POST", "/health")) == "unauthorized");  // only GET /health is open
  // ... and the web console's files (API.md, Web console): they hold no data.
  CHECK(fx.Call("GET", "/").status == 200);
  CHECK(fx.Call("GET", "/ui/console.js").status == 200);
  CHECK(ErrorCode(fx.Call("GET", "/ui/absent.js")) == "not_found");
  CHECK(ErrorCode(fx.Call("POST", "/")) == "unauthorized");
  CHECK(ErrorCode(fx.Call("GET", "/ui")) == "unauthorized");
  CHECK(ErrorCode(fx.Call("GET", "/ui/a/b")) == "unauthorized");
  Response missing = fx.Call("GET", "/collections");
  CHECK(ErrorCode(missing) == "unauthorized");
  CHECK(missing.www_authenticate == "Bearer");
  Request r;
  r.method = "GET";
  r.target = "/collections";
  r.has_authorization = true;
  r.authorization = "Bearer wrong";
  CHECK(ErrorCode(fx.Call(r)) == "forbidden");
  r.authorization = "Bearer s3cre";
  CHECK(fx.Call(r).status == 403);
  r.authorization = "Basic czNjcmV0";  // another scheme is no bearer key
  CHECK(ErrorCode(fx.Call(r)) == "unauthorized");
  CHECK(fx.Call(r).www_authenticate == "Bearer");
  for (const char* none : {"Bearer", "Bearer ", "Bearers3cret", "Bear s3cret", ""}) {
    r.authorization = none;
    INFO(none);
    CHECK(ErrorCode(fx.Call(r)) == "unauthorized");
  }
  r.authorization = "Bearer s3cret";
  CHECK(fx.Call(r).status == 200);
  // The scheme is case-insensitive (RFC 9110 §11.1), the key is not.
  for (const char* ok : {"bearer s3cret", "BEARER s3cret", "bEaReR  s3cret"}) {
    r.authorization = ok;
    INFO(ok);
    CHECK(fx.Call(r).status == 200);
  }
  r.authorization = "bearer S3CRET";
  CHECK(ErrorCode(fx.Call(r)) == "forbidden");
  CHECK(fx.Call(r).www_authenticate.empty());
}

TEST_CASE("router: Admit decides from the header alone, before any body", "[server]") {
  {
    Fixture open;  // no key: everything is admitted, for free
    CHECK_FALSE(open.router->Admit("PUT", "/docs/c/1", nullptr));
  }
  RouterOptions options;
  options.api_key = "s3cret";
  Fixture fx(options);
  const std::string right = "Bearer s3cret", wrong = "Bearer nope", basic = "Basic czNjcmV0";
  CHECK_FALSE(fx.router->Admit("POST", "/docs/c/_bulk", &right));
  auto missing = fx.router->Admit("POST", "/docs/c/_bulk", nullptr);
  REQUIRE(missing);
  CHECK(missing->status == 401);
  CHECK(missing->www_authenticate == "Bearer");
  auto bad = fx.router->Admit("PUT", "/docs/c/1", &wrong);
  REQUIRE(bad);
  CHECK(bad->status == 403);
  REQUIRE(fx.router->Admit("PUT", "/docs/c/1", &basic));
  CHECK(fx.router->Admit("PUT", "/docs/c/1", &basic)->status == 401);
  // GET /health needs no key, however it is spelt, and nor do the
  // console's files; nothing else is open.
  CHECK_FALSE(fx.router->Admit("GET", "/health", nullptr));
  CHECK_FALSE(fx.router->Admit("GET", "/", nullptr));
  CHECK_FALSE(fx.router->Admit("GET", "/ui/console.css", nullptr));
  CHECK(fx.router->Admit("PUT", "/ui/console.css", nullptr));
  CHECK_FALSE(fx.router->Admit("GET", "/%68ealth", nullptr));
  CHECK_FALSE(fx.router->Admit("HEAD", "/health", nullptr));
  CHECK(fx.router->Admit("POST", "/health", nullptr));
  CHECK(fx.router->Admit("GET", "/health%", nullptr));  // a target that does not parse is refused too
  // Refusals are counted for /metrics.
  Request m;
  m.method = "GET";
  m.target = "/metrics";
  m.has_authorization = true;
  m.authorization = right;
  const std::string text = fx.Call(m).body;
  CHECK(text.find("corvid_requests_rejected_total{reason=\"unauthenticated\"} 7") != std::string::npos);
  CHECK(text.find("corvid_internal_errors_total{where=\"handler\"}") != std::string::npos);
}

TEST_CASE("router: bodies other than documents get the control-body limit", "[server]") {
  RouterOptions options;
  options.max_doc_bytes = 100000;
  options.max_bulk_bytes = 1000000;
  options.max_control_body_bytes = 5000;
  Fixture fx(options);
  CHECK(fx.router->BodyLimit("PUT", "/docs/c/1") == 100000);
  CHECK(fx.router->BodyLimit("PUT", "/%64ocs/c/1") == 100000);  // routed as /docs/ after decoding
  CHECK(fx.router->BodyLimit("POST", "/docs/c/_bulk") == 1000000);
  // The absolute form of a target is routed by its path too.
  CHECK(fx.router->BodyLimit("PUT", "http://h:8080/docs/c/1") == 100000);
  CHECK(fx.router->BodyLimit("POST", "HTTP://h/docs/c/_bulk") == 1000000);
  for (auto [method, target] : std::initializer_list<std::pair<const char*, const char*>>{
           {"PUT", "/indexes/i"}, {"POST", "/indexes/i/search"}, {"POST", "/admin/analyze"}, {"PUT", "/docsx/c/1"},
           {"PUT", "/%69ndexes/i"}, {"PUT", "http://h/indexes/i"}, {"PUT", "http://h"}}) {
    INFO(method << " " << target);
    CHECK(fx.router->BodyLimit(method, target) == 5000);
  }
  // Each limit says what it is, for the 413's message.
  std::string_view what;
  CHECK(fx.router->BodyLimit("POST", "/docs/c/%5Fbulk", &what) == 1000000);
  CHECK(what == "a bulk body (--max-bulk-bytes)");
  CHECK(fx.router->BodyLimit("PUT", "/%64ocs/c/1", &what) == 100000);
  CHECK(what == "a document (--max-doc-bytes)");
  CHECK(fx.router->BodyLimit("POST", "/indexes/i/search", &what) == 5000);
  CHECK(what.starts_with("a body that is not a document's (an index definition"));
}

TEST_CASE("router: a control body under a smaller document limit names that limit", "[server]") {
  RouterOptions options;
  options.max_doc_bytes = 100;
  options.max_control_body_bytes = 5000;
  Fixture fx(options);
  std::string_view what;
  CHECK(fx.router->BodyLimit("PUT", "/indexes/i", &what) == 100);
  CHECK(what == "a body that is not a document's (--max-doc-bytes)");
}

TEST_CASE("router: GET /docs/{collection} lists documents in id order, paged by key", "[server]") {
  Fixture fx;
  CHECK(ErrorCode(fx.Call("GET", "/docs/none")) == "not_found");
  // Ids in bytewise order, long ones (keyed by prefix and hash) included:
  // three (501 bytes) share their first 499 bytes and differ after them.
  const std::string p(500, 'p');
  std::vector<std::string> ids = {"a", "b", "b0", "c", "z", p + "b", p + "a", p + "c", "q" + std::string(505, 'x')};
  for (const auto& id : ids) {
    std::string path = "/docs/c/";
    for (char ch : id) path += ch;
    REQUIRE(fx.Call("PUT", path, R"({"v":1.0, "id":")" + id.substr(0, 3) + "\"}").status == 201);
  }
  REQUIRE(fx.Call("DELETE", "/docs/c/c").status == 200);  // tombstones are not listed
  REQUIRE(fx.Call("PUT", "/docs/other/a0", "{}").status == 201);
  std::vector<std::string> expected;
  for (const auto& id : ids)
    if (id != "c") expected.push_back(id);
  std::sort(expected.begin(), expected.end());
  // Whole, then in pages of 2 following "next".
  auto whole = Parse(fx.Call("GET", "/docs/c?limit=1000").body);
  REQUIRE(whole["results"].Size() == expected.size());
  CHECK_FALSE(whole.HasMember("next"));
  for (rapidjson::SizeType i = 0; i < whole["results"].Size(); ++i) {
    const auto& r = whole["results"][i];
    CHECK(std::string(r["id"].GetString(), r["id"].GetStringLength()) == expected[i]);
    CHECK(r["etag"].IsUint64());
    CHECK(r["doc"]["v"].IsDouble());
  }
  CHECK(fx.Call("GET", "/docs/c?limit=1").body.find(R"("doc":{"v":1.0, "id":"a"})") != std::string::npos);
  std::vector<std::string> walked;
  std::string after;
  for (int pages = 0; pages < 20; ++pages) {
    std::string target = "/docs/c?limit=2";
    if (!after.empty()) {
      target += "&after=";
      for (unsigned char ch : after) {
        char hex[4];
        std::snprintf(hex, sizeof hex, "%%%02X", ch);
        target += hex;
      }
    }
    auto page = Parse(fx.Call("GET", target).body);
    for (const auto& r : page["results"].GetArray()) walked.emplace_back(r["id"].GetString(), r["id"].GetStringLength());
    if (!page.HasMember("next")) break;
    after.assign(page["next"].GetString(), page["next"].GetStringLength());
    CHECK(after == walked.back());
  }
  CHECK(walked == expected);
  // limit: default 100, at most 1000, 0 gives an empty page; bad values are 400.
  CHECK(Parse(fx.Call("GET", "/docs/c?limit=0").body)["results"].Size() == 0);
  CHECK(Parse(fx.Call("GET", "/docs/c?limit=99999").body)["results"].Size() == expected.size());
  CHECK(ErrorCode(fx.Call("GET", "/docs/c?limit=x")) == "invalid_argument");
  CHECK(fx.Call("PUT", "/docs/c", "{}").status == 405);
  // /collections counts tombstones too.
  auto colls = Parse(fx.Call("GET", "/collections").body);
  CHECK(std::string(colls["collections"][0]["name"].GetString()) == "c");
  CHECK(colls["collections"][0]["count"].GetUint64() == expected.size());
  CHECK(colls["collections"][0]["tombstones"].GetUint64() == 1);
}

TEST_CASE("router: a listing larger than --max-response-bytes is refused, not built", "[server]") {
  RouterOptions options;
  options.max_response_bytes = 1000;
  Fixture fx(options);
  for (int i = 0; i < 20; ++i)
    REQUIRE(fx.Call("PUT", "/docs/c/d" + std::to_string(i), R"({"pad":")" + std::string(100, 'x') + "\"}").status == 201);
  CHECK(ErrorCode(fx.Call("GET", "/docs/c?limit=20")) == "response_too_large");
  CHECK(fx.Call("GET", "/docs/c?limit=5").status == 200);
}

// The oracle: random workloads (inserts, updates that move documents between
// keys, deletes of the current min and max of a key, unwinds, replays,
// random batch sizes), checked after each phase against SQLite GROUP BY over
// the same final documents — every reducer, groupLevel, filters, sorting,
// paging — then again after reopening the index from disk, and after Clear.
#include <catch2/catch.hpp>
#include <rapidjson/document.h>
#include <sqlite3.h>

#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/json_string.h"
#include "mapreduce/expression.h"
#include "mapreduce/mapreduce_index.h"
#include "tests/mapreduce/test_util.h"

using namespace corvid;
using namespace corvid::mapreduce;

namespace {

// A scalar JSON value of the model (kind: 0 missing, 1 null, 2 bool, 3 int,
// 4 double, 5 string).
struct JVal {
  int kind = 0;
  bool b = false;
  int64_t i = 0;
  double d = 0;
  std::string s;
  void Json(std::string* out) const {
    switch (kind) {
      case 1: *out += "null"; break;
      case 2: *out += b ? "true" : "false"; break;
      case 3: *out += std::to_string(i); break;
      case 4: {
        Value v = Value::Double(d);
        AppendJson(v, out);
        break;
      }
      case 5: AppendJsonString(s, *out); break;
      default: break;
    }
  }
};

struct Doc {
  JVal c, s, v;
  int tags_kind = 0;  // 0 missing, 1 null, 2 array, 3 scalar
  std::vector<JVal> tags;
  std::string Json() const {
    std::string j = "{";
    bool first = true;
    auto field = [&](const char* name, const JVal& v) {
      if (v.kind == 0) return;
      if (!first) j += ",";
      first = false;
      j += "\"";
      j += name;
      j += "\":";
      v.Json(&j);
    };
    field("c", c);
    field("s", s);
    field("v", v);
    if (tags_kind) {
      if (!first) j += ",";
      first = false;
      j += "\"tags\":";
      if (tags_kind == 1) j += "null";
      else if (tags_kind == 3) tags[0].Json(&j);
      else {
        j += "[";
        for (size_t k = 0; k < tags.size(); ++k) {
          if (k) j += ",";
          tags[k].Json(&j);
        }
        j += "]";
      }
    }
    j += "}";
    return j;
  }
};

class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed) {}
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  JVal Str(std::string s) {
    JVal v;
    v.kind = 5;
    v.s = std::move(s);
    return v;
  }
  JVal Num(int64_t i) {
    JVal v;
    v.kind = 3;
    v.i = i;
    return v;
  }
  JVal Dbl(double d) {
    JVal v;
    v.kind = 4;
    v.d = d;
    return v;
  }
  JVal C() {
    static const char* kStr[] = {"alpha", "beta", "gamma", "\xce\x94" "elta", "", "b", "zz"};
    int r = Int(0, 19);
    if (r < 9) return Str(kStr[Int(0, 6)]);
    if (r < 12) return Num(Int(-2, 3));
    if (r == 12) return Dbl(1.5);
    if (r == 13) return Dbl(3.0);  // same group as the integer 3
    if (r == 14) { JVal v; v.kind = 2; v.b = Int(0, 1); return v; }
    if (r == 15) { JVal v; v.kind = 1; return v; }
    if (r == 16) return JVal();
    return Str(kStr[Int(0, 2)]);
  }
  JVal S() {
    int r = Int(0, 9);
    if (r < 5) return Str(std::string(1, char('x' + Int(0, 2))));
    if (r < 7) return Num(Int(1, 2));
    if (r == 7) { JVal v; v.kind = 2; v.b = true; return v; }
    if (r == 8) { JVal v; v.kind = 1; return v; }
    return Str("x");
  }
  JVal V() {
    int r = Int(0, 19);
    if (r < 11) return Num(Int(-1000, 1000));
    if (r < 15) return Dbl(Int(-4000, 4000) * 0.25);
    if (r == 15) return Num(int64_t(Int(-1000, 1000)) * 1000000000000LL);
    if (r == 16) return Str("oops");
    if (r == 17) { JVal v; v.kind = 1; return v; }
    return JVal();
  }
  Doc MakeDoc() {
    Doc d;
    d.c = C();
    d.s = S();
    d.v = V();
    int r = Int(0, 9);
    if (r == 0) d.tags_kind = 0;
    else if (r == 1) d.tags_kind = 1;
    else if (r == 2) d.tags_kind = 3;
    else d.tags_kind = 2;
    static const char* kTags[] = {"red", "green", "blue"};
    int n = d.tags_kind == 3 ? 1 : (d.tags_kind == 2 ? Int(0, 3) : 0);
    for (int k = 0; k < n; ++k) {
      int t = Int(0, 5);
      if (t < 3) d.tags.push_back(Str(kTags[t]));
      else if (t == 3) d.tags.push_back(Num(7));
      else if (t == 4) { JVal v; v.kind = 1; d.tags.push_back(v); }
      else d.tags.push_back(Str(kTags[0]));
    }
    return d;
  }
  std::mt19937_64& rng() { return rng_; }

 private:
  std::mt19937_64 rng_;
};

// --------------------------------------------------------------- SQLite side

class Sql {
 public:
  Sql() {
    REQUIRE(sqlite3_open(":memory:", &db_) == SQLITE_OK);
    Exec("CREATE TABLE e(doc TEXT, k1t INT, k1, k2t INT, k2, v)");
  }
  ~Sql() { sqlite3_close(db_); }
  void Exec(const std::string& sql) {
    char* err = nullptr;
    int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
    INFO(sql << " -> " << (err ? err : ""));
    sqlite3_free(err);
    REQUIRE(rc == SQLITE_OK);
  }
  // Rebuilds the entry table from the model: unwind = entries per tag.
  void Load(const std::map<std::string, Doc>& docs, bool unwind) {
    Exec("DELETE FROM e");
    Exec("BEGIN");
    sqlite3_stmt* st;
    REQUIRE(sqlite3_prepare_v2(db_, "INSERT INTO e VALUES(?,?,?,?,?,?)", -1, &st, nullptr) == SQLITE_OK);
    for (const auto& [id, d] : docs) {
      std::vector<const JVal*> k2s;
      if (!unwind) {
        k2s.push_back(&d.s);
      } else if (d.tags_kind >= 2) {
        for (const auto& t : d.tags) k2s.push_back(&t);
      }
      for (const JVal* k2 : k2s) {
        if (d.c.kind <= 1 || k2->kind <= 1) continue;
        sqlite3_reset(st);
        sqlite3_bind_text(st, 1, id.c_str(), -1, SQLITE_TRANSIENT);
        BindKey(st, 2, d.c);
        BindKey(st, 4, *k2);
        BindVal(st, 6, d.v);
        REQUIRE(sqlite3_step(st) == SQLITE_DONE);
      }
    }
    sqlite3_finalize(st);
    Exec("COMMIT");
  }

  struct Row {
    std::vector<Value> keys;  // strings view into `texts`
    int64_t count = 0;
    Value sum, lo, hi, mean;
  };
  // group_cols: 0..2; where: SQL condition; order: SQL ORDER BY terms
  // (before the key tie-break).
  std::vector<Row> Query(int level, const std::string& where, const std::string& order) {
    std::string keys;
    const char* kKeys[] = {"k1t, k1", "k2t, k2"};
    for (int g = 0; g < level; ++g) keys += std::string(g ? ", " : "") + kKeys[g];
    std::string sql = "SELECT " + (keys.empty() ? std::string("0, 0, 0, 0") : (level == 1 ? keys + ", 0, 0" : keys)) +
                      ", count(*) AS n, coalesce(sum(nv), 0) AS total, min(nv) AS lo, max(nv) AS hi, avg(nv) AS mean "
                      "FROM (SELECT *, CASE WHEN typeof(v) IN ('integer','real') THEN v END AS nv FROM e" +
                      (where.empty() ? "" : " WHERE " + where) + ")";
    if (!keys.empty()) sql += " GROUP BY " + keys;
    else sql += " HAVING count(*) > 0";
    std::string ord = order;
    if (!keys.empty()) ord += (ord.empty() ? "" : ", ") + keys;
    if (!ord.empty()) sql += " ORDER BY " + ord;
    sqlite3_stmt* st;
    INFO(sql);
    REQUIRE(sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) == SQLITE_OK);
    std::vector<Row> rows;
    while (sqlite3_step(st) == SQLITE_ROW) {
      Row r;
      for (int g = 0; g < level; ++g) {
        int kind = sqlite3_column_int(st, g * 2);
        r.keys.push_back(ColumnValue(st, g * 2 + 1, kind));
      }
      r.count = sqlite3_column_int64(st, 4);
      r.sum = ColumnValue(st, 5, -1);
      r.lo = ColumnValue(st, 6, -1);
      r.hi = ColumnValue(st, 7, -1);
      r.mean = ColumnValue(st, 8, -1);
      rows.push_back(r);
    }
    sqlite3_finalize(st);
    return rows;
  }

 private:
  // Key kinds collate as CouchDB: 1 bool < 2 number < 3 string.
  static void BindKey(sqlite3_stmt* st, int col, const JVal& v) {
    switch (v.kind) {
      case 2: sqlite3_bind_int(st, col, 1); sqlite3_bind_int(st, col + 1, v.b); break;
      case 3: sqlite3_bind_int(st, col, 2); sqlite3_bind_int64(st, col + 1, v.i); break;
      case 4: sqlite3_bind_int(st, col, 2); sqlite3_bind_double(st, col + 1, v.d); break;
      default: sqlite3_bind_int(st, col, 3); sqlite3_bind_text(st, col + 1, v.s.data(), int(v.s.size()), SQLITE_TRANSIENT);
    }
  }
  static void BindVal(sqlite3_stmt* st, int col, const JVal& v) {
    switch (v.kind) {
      case 3: sqlite3_bind_int64(st, col, v.i); break;
      case 4: sqlite3_bind_double(st, col, v.d); break;
      case 5: sqlite3_bind_text(st, col, v.s.data(), int(v.s.size()), SQLITE_TRANSIENT); break;
      default: sqlite3_bind_null(st, col);
    }
  }
  Value ColumnValue(sqlite3_stmt* st, int col, int kind) {
    switch (sqlite3_column_type(st, col)) {
      case SQLITE_NULL: return Value::Null();
      case SQLITE_INTEGER:
        if (kind == 1) return Value::Bool(sqlite3_column_int(st, col) != 0);
        return Value::Int(sqlite3_column_int64(st, col));
      case SQLITE_FLOAT: return Value::Double(sqlite3_column_double(st, col));
      default: {
        texts_.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(st, col)),
                            size_t(sqlite3_column_bytes(st, col)));
        return Value::String(texts_.back());
      }
    }
  }
  sqlite3* db_ = nullptr;
  std::deque<std::string> texts_;
};

// --------------------------------------------------------------- comparison

std::string Show(const Value& v) {
  std::string s;
  AppendJson(v, &s);
  return s + (v.type == ValueType::kInt ? "(i)" : v.type == ValueType::kDouble ? "(d)" : "");
}

bool SameNumber(const Value& a, const Value& b, bool check_type, bool approx) {
  if (a.IsNullish() || b.IsNullish()) return a.IsNullish() && b.IsNullish();
  if (!a.IsNumber() || !b.IsNumber()) return false;
  if (check_type && a.type != b.type) return false;
  if (approx) return std::fabs(a.AsDouble() - b.AsDouble()) <= 1e-12 * std::max(1.0, std::fabs(b.AsDouble()));
  if (a.type == ValueType::kInt && b.type == ValueType::kInt) return a.i == b.i;
  return (long double)(a.type == ValueType::kInt ? (long double)a.i : a.d) ==
         (long double)(b.type == ValueType::kInt ? (long double)b.i : b.d);
}

bool SameKey(const Value& a, const Value& b) {
  if (a.IsNumber() || b.IsNumber()) return SameNumber(a, b, false, false);
  if (a.type != b.type) return false;
  return a.type == ValueType::kBool ? a.b == b.b : a.s == b.s;
}

Value FromJson(const rapidjson::Value& j) { return Value::FromJson(j); }

// Runs `params` against the index and `expected` rows; reports the first
// difference.
void Compare(const MapReduceIndex& idx, const std::vector<std::pair<std::string, std::string>>& params, int level,
             const std::vector<Sql::Row>& expected, size_t offset = 0, size_t limit = SIZE_MAX) {
  std::string desc;
  for (const auto& [k, v] : params) desc += k + "=" + v + "&";
  INFO("query: " << desc);
  auto r = idx.Query(params);
  REQUIRE(r.ok());
  CHECK(r->total == expected.size());
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseFullPrecisionFlag>(r->rows_json.c_str());
  REQUIRE(!doc.HasParseError());
  REQUIRE(doc.IsArray());
  size_t end = std::min(expected.size(), offset > expected.size() ? expected.size() : offset + std::min(limit, expected.size()));
  size_t want = offset >= expected.size() ? 0 : end - offset;
  REQUIRE(doc.Size() == want);
  static const char* kGroups[] = {"c", "k2"};
  for (size_t i = 0; i < want; ++i) {
    const Sql::Row& e = expected[offset + i];
    const rapidjson::Value& row = doc[rapidjson::SizeType(i)];
    INFO("row " << i << ": " << [&] {
      std::string s;
      for (auto& k : e.keys) s += Show(k) + " ";
      return s + "n=" + std::to_string(e.count) + " sum=" + Show(e.sum) + " lo=" + Show(e.lo) + " hi=" + Show(e.hi) +
             " mean=" + Show(e.mean);
    }());
    INFO("got: " << [&] {
      std::string s;
      for (auto m = row.MemberBegin(); m != row.MemberEnd(); ++m) s += std::string(m->name.GetString()) + "=" + Show(FromJson(m->value)) + " ";
      return s;
    }());
    REQUIRE(row.MemberCount() == size_t(level) + 5);
    for (int g = 0; g < level; ++g) {
      auto m = row.FindMember(kGroups[g]);
      REQUIRE(m != row.MemberEnd());
      CHECK(SameKey(FromJson(m->value), e.keys[size_t(g)]));
    }
    CHECK(row["n"].GetInt64() == e.count);
    CHECK(SameNumber(FromJson(row["total"]), e.sum, true, e.sum.type == ValueType::kDouble));
    CHECK(SameNumber(FromJson(row["lo"]), e.lo, false, false));
    CHECK(SameNumber(FromJson(row["hi"]), e.hi, false, false));
    CHECK(SameNumber(FromJson(row["mean"]), e.mean, false, true));
  }
}

std::string SqlText(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "''";
    else out += c;
  }
  return out + "'";
}

// The SQL condition equal to the index's filter semantics: the value is
// read as the row's type (string, number, bool); no match if it cannot be.
std::string SqlFilter(int g, const std::string& op, const std::string& v) {
  std::string t = g == 0 ? "k1t" : "k2t", k = g == 0 ? "k1" : "k2";
  std::string cond = "(" + t + " = 3 AND " + k + " " + op + " " + SqlText(v) + ")";
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (!v.empty() && end == v.c_str() + v.size() && v.find_first_of(" +xXnN") == std::string::npos) {
    (void)d;
    cond += " OR (" + t + " = 2 AND " + k + " " + op + " " + v + ")";
  }
  if (v == "true" || v == "false") cond += " OR (" + t + " = 1 AND " + k + " " + op + " " + (v == "true" ? "1" : "0") + ")";
  return "(" + cond + ")";
}

struct IndexUnderTest {
  bool unwind;
  std::string k2_map;
  std::unique_ptr<MapReduceIndex> idx;
  std::string dir;
};

std::string DefinitionJson(bool unwind) {
  return std::string(R"J({"type":"mapreduce","collection":"c","map":{"c":"c","k2":")J") +
         (unwind ? "unwind(tags)" : "s") + R"J(","v":"v","unused":"unwind(nothing)"},"groupBy":["c","k2"],
    "reduce":{"n":"count()","total":"sum(v)","lo":"min(v)","hi":"max(v)","mean":"avg(v)"}})J";
}

void CheckAll(const MapReduceIndex& idx, Sql& sql, const std::map<std::string, Doc>& docs, bool unwind,
              std::mt19937_64& rng) {
  sql.Load(docs, unwind);
  Compare(idx, {}, 2, sql.Query(2, "", ""));
  Compare(idx, {{"groupLevel", "1"}}, 1, sql.Query(1, "", ""));
  Compare(idx, {{"groupLevel", "0"}}, 0, sql.Query(0, "", ""));
  Compare(idx, {{"groupLevel", "5"}}, 2, sql.Query(2, "", ""));
  Compare(idx, {{"c", "beta"}}, 2, sql.Query(2, SqlFilter(0, "=", "beta"), ""));
  Compare(idx, {{"c", "3"}, {"groupLevel", "1"}}, 1, sql.Query(1, SqlFilter(0, "=", "3"), ""));
  Compare(idx, {{"c.gte", "b"}, {"c.lt", "h"}}, 2, sql.Query(2, SqlFilter(0, ">=", "b") + " AND " + SqlFilter(0, "<", "h"), ""));
  Compare(idx, {{"c.gt", "-1"}, {"c.lte", "1.5"}}, 2, sql.Query(2, SqlFilter(0, ">", "-1") + " AND " + SqlFilter(0, "<=", "1.5"), ""));
  // A filter given twice takes its last value, as every parameter does.
  Compare(idx, {{"c", "beta"}, {"c", "3"}}, 2, sql.Query(2, SqlFilter(0, "=", "3"), ""));
  Compare(idx, {{"c.gte", "h"}, {"c.lt", "z"}, {"c.gte", "b"}}, 2,
          sql.Query(2, SqlFilter(0, ">=", "b") + " AND " + SqlFilter(0, "<", "z"), ""));
  Compare(idx, {{"k2", unwind ? "red" : "true"}, {"groupLevel", "1"}}, 1,
          sql.Query(1, SqlFilter(1, "=", unwind ? "red" : "true"), ""));
  Compare(idx, {{"k2.lt", "y"}, {"groupLevel", "0"}}, 0, sql.Query(0, SqlFilter(1, "<", "y"), ""));
  Compare(idx, {{"sort", "-total,c"}, {"groupLevel", "1"}}, 1, sql.Query(1, "", "total DESC, k1t, k1"));
  Compare(idx, {{"sort", "mean"}}, 2, sql.Query(2, "", "mean"));
  Compare(idx, {{"sort", "-n,-hi,k2"}}, 2, sql.Query(2, "", "n DESC, hi DESC, k2t, k2"));
  Compare(idx, {{"sort", "lo"}, {"groupLevel", "1"}}, 1, sql.Query(1, "", "lo"));
  size_t nrows = sql.Query(2, "", "").size();
  size_t off = std::uniform_int_distribution<size_t>(0, nrows + 1)(rng);
  size_t lim = std::uniform_int_distribution<size_t>(0, 20)(rng);
  Compare(idx, {{"sort", "-n,c"}, {"offset", std::to_string(off)}, {"limit", std::to_string(lim)}}, 2,
          sql.Query(2, "", "n DESC, k1t, k1"), off, lim);
}

void RunOracle(uint64_t seed, int ndocs) {
  INFO("seed " << seed);
  Gen gen(seed);
  auto& rng = gen.rng();
  std::map<std::string, Doc> docs;  // the final documents
  std::vector<IndexUnderTest> idxs(2);
  TempDir tmp;
  for (int u = 0; u < 2; ++u) {
    idxs[u].unwind = u == 1;
    idxs[u].dir = tmp.path() + "/idx" + std::to_string(u);
    auto def = Definition::Compile(DefinitionJson(u == 1));
    REQUIRE(def.ok());
    auto idx = MapReduceIndex::Open(idxs[u].dir, *def);
    REQUIRE(idx.ok());
    idxs[u].idx = std::move(idx).value();
  }
  Sql sql;
  uint64_t etag = 0;
  Batch last;
  // Applies `changes` (built by `fill`) to both indexes in random batch sizes.
  auto apply = [&](std::vector<std::pair<std::string, std::optional<Doc>>> changes) {
    size_t i = 0;
    while (i < changes.size()) {
      size_t n = std::min(changes.size() - i, size_t(std::uniform_int_distribution<int>(1, 300)(rng)));
      last.Clear();
      for (size_t k = i; k < i + n; ++k) {
        auto& [id, d] = changes[k];
        if (d) {
          last.Put(++etag, id, d->Json());
          docs[id] = *d;
        } else {
          last.Del(++etag, id);
          docs.erase(id);
        }
      }
      for (auto& t : idxs) {
        std::vector<IndexError> errors;
        REQUIRE(t.idx->ApplyBatch(last.changes(), etag, errors).ok());
        for (const auto& e : errors) CHECK(e.message.find("sum needs a number, got string") != std::string::npos);
        CHECK(t.idx->LastAppliedEtag() == etag);
      }
      i += n;
    }
  };
  auto check = [&](const char* phase) {
    INFO("phase " << phase);
    for (auto& t : idxs) {
      INFO("unwind " << t.unwind);
      CheckAll(*t.idx, sql, docs, t.unwind, rng);
    }
  };

  // 1. Inserts.
  std::vector<std::pair<std::string, std::optional<Doc>>> ch;
  for (int k = 0; k < ndocs; ++k) ch.emplace_back("d" + std::to_string(k), gen.MakeDoc());
  apply(ch);
  check("insert");

  // 2. Updates that move documents between keys (some twice in one batch).
  ch.clear();
  for (const auto& [id, d] : docs) {
    if (gen.Int(0, 9) < 4) ch.emplace_back(id, gen.MakeDoc());
    if (gen.Int(0, 49) == 0) ch.emplace_back(id, gen.MakeDoc());
  }
  apply(ch);
  check("update");

  // 3. Deletes of the current min and max of keys, plus random deletes.
  ch.clear();
  {
    std::map<std::string, std::pair<std::string, std::string>> extremes;  // key -> (min id, max id)
    std::map<std::string, std::pair<double, double>> vals;
    for (const auto& [id, d] : docs) {
      if (d.v.kind != 3 && d.v.kind != 4) continue;
      double x = d.v.kind == 3 ? double(d.v.i) : d.v.d;
      std::string kj;
      d.c.Json(&kj);
      kj += "|";
      d.s.Json(&kj);
      auto it = vals.find(kj);
      if (it == vals.end()) {
        vals[kj] = {x, x};
        extremes[kj] = {id, id};
      } else {
        if (x < it->second.first) { it->second.first = x; extremes[kj].first = id; }
        if (x > it->second.second) { it->second.second = x; extremes[kj].second = id; }
      }
    }
    std::map<std::string, bool> del;
    for (const auto& [k, e] : extremes) {
      del[e.first] = true;
      del[e.second] = true;
    }
    for (const auto& [id, d] : docs)
      if (gen.Int(0, 9) == 0) del[id] = true;
    del["never-existed"] = true;
    for (const auto& [id, b] : del) ch.emplace_back(id, std::nullopt);
    std::shuffle(ch.begin(), ch.end(), rng);
  }
  apply(ch);
  check("delete");

  // 4. Replay the last batch: harmless.
  for (auto& t : idxs) {
    std::vector<IndexError> errors;
    REQUIRE(t.idx->ApplyBatch(last.changes(), etag, errors).ok());
  }
  check("replay");

  // 5. Mixed: inserts of new ids, re-inserts of deleted ones, updates, deletes.
  ch.clear();
  for (int k = 0; k < ndocs / 4; ++k) {
    std::string id = "d" + std::to_string(gen.Int(0, ndocs + ndocs / 2));
    if (gen.Int(0, 3) == 0) ch.emplace_back(id, std::nullopt);
    else ch.emplace_back(id, gen.MakeDoc());
  }
  apply(ch);
  check("mixed");

  // 6. Reopen from disk.
  for (int u = 0; u < 2; ++u) {
    idxs[u].idx.reset();
    auto def = Definition::Compile(DefinitionJson(u == 1));
    auto idx = MapReduceIndex::Open(idxs[u].dir, *def);
    REQUIRE(idx.ok());
    idxs[u].idx = std::move(idx).value();
    CHECK(idxs[u].idx->LastAppliedEtag() == etag);
  }
  check("reopen");

  // 7. Clear, then rebuild from the final documents in one batch.
  for (auto& t : idxs) {
    REQUIRE(t.idx->Clear().ok());
    CHECK(t.idx->LastAppliedEtag() == 0);
    CHECK(t.idx->RowCount() == 0);
    auto r = t.idx->Query({});
    REQUIRE(r.ok());
    CHECK(r->rows_json == "[]");
    CHECK(r->total == 0);
  }
  Batch all;
  for (const auto& [id, d] : docs) all.Put(++etag, id, d.Json());
  for (auto& t : idxs) {
    std::vector<IndexError> errors;
    REQUIRE(t.idx->ApplyBatch(all.changes(), etag, errors).ok());
  }
  check("rebuild");
}

}  // namespace

TEST_CASE("oracle: random workloads vs SQLite GROUP BY", "[mapreduce]") {
  for (uint64_t seed : {1, 2, 3, 4, 5, 6, 7, 8}) RunOracle(seed, 800);
}

TEST_CASE("oracle: larger workloads", "[mapreduce][.slow]") {
  for (uint64_t seed : {11, 12, 13}) RunOracle(seed, 5000);
}

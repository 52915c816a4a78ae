// Query: reads the rows of one LMDB snapshot in key order, filters them on
// group fields, rolls them up to `groupLevel` (adjacent in key order, so one
// streaming pass), sorts, pages and renders the JSON rows. Cost: one pass
// over the rows (no seek by filter yet), then O(r log r) when sorting.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <deque>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "mapreduce/format.h"
#include "mapreduce/index_impl.h"

namespace corvid::mapreduce {
namespace {

// A row's value as JSON: integers exact, strings escaped, doubles as the
// frozen printer writes them (AppendJsonDouble: the shortest text that
// reads back the same, all digits of a large integral one, ".0" when
// integral, null when not finite) into `scratch`.
void WriteValue(rapidjson::Writer<rapidjson::StringBuffer>& w, const Value& v, std::string& scratch) {
  switch (v.type) {
    case ValueType::kMissing: case ValueType::kNull: w.Null(); return;
    case ValueType::kBool: w.Bool(v.b); return;
    case ValueType::kInt: w.Int64(v.i); return;
    case ValueType::kDouble:
      if (!std::isfinite(v.d)) {
        w.Null();
        return;
      }
      scratch.clear();
      AppendJsonDouble(v.d, &scratch);
      w.RawValue(scratch.data(), scratch.size(), rapidjson::kNumberType);
      return;
    case ValueType::kString: w.String(v.s.data(), rapidjson::SizeType(v.s.size())); return;
    case ValueType::kArray: w.StartArray(); w.EndArray(); return;  // never a row value: a map value is a scalar
    case ValueType::kObject: w.StartObject(); w.EndObject(); return;
  }
}

constexpr uint64_t kDefaultLimit = 10000;

enum class FilterOp : uint8_t { kEq, kGt, kGte, kLt, kLte };

struct Filter {
  size_t field = 0;
  FilterOp op = FilterOp::kEq;
  std::string text;
  bool has_num = false;
  Value num;
  int boolean = -1;  // 0/1 when the text is false/true
};

struct SortKey {
  bool desc = false;
  bool is_group = false;
  size_t index = 0;  // group field or reducer
};

struct MinMaxState {
  bool present = false;
  char enc[format::kOrderedNumberBytes];
};

struct OutRow {
  std::string_view key;  // encoded key (valid for the read txn)
  size_t prefix_len = 0;  // bytes of the first groupLevel components
  uint64_t count = 0;
  size_t agg = 0;  // index into sums/minmax (x reducers)
};

Status Bad(std::string msg) { return Status::InvalidArgument(std::move(msg)); }

bool ParseUint(std::string_view s, uint64_t* v) {
  if (s.empty()) return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

bool ParseNumber(std::string_view s, Value* out) {
  if (s.empty()) return false;
  int64_t i;
  auto r = std::from_chars(s.data(), s.data() + s.size(), i);
  if (r.ec == std::errc() && r.ptr == s.data() + s.size()) {
    *out = Value::Int(i);
    return true;
  }
  double d;
  auto rd = std::from_chars(s.data(), s.data() + s.size(), d);
  if (rd.ec == std::errc() && rd.ptr == s.data() + s.size() && std::isfinite(d)) {
    *out = Value::Double(d);
    return true;
  }
  return false;
}

int Rank(const Value& v) {
  switch (v.type) {
    case ValueType::kMissing: case ValueType::kNull: return 0;
    case ValueType::kBool: return 1;
    case ValueType::kInt: case ValueType::kDouble: return 2;
    default: return 3;
  }
}

// CouchDB collation: null < bool < number < string.
int Collate(const Value& a, const Value& b) {
  int ra = Rank(a), rb = Rank(b);
  if (ra != rb) return ra < rb ? -1 : 1;
  switch (ra) {
    case 1: return int(a.b) - int(b.b);
    case 2: return CompareNumbers(a, b);
    case 3: {
      int c = a.s.compare(b.s);
      return c < 0 ? -1 : (c > 0 ? 1 : 0);
    }
    default: return 0;
  }
}

// Decodes the component at key[*pos], advancing *pos. Strings with escaped
// zero bytes are unescaped into `store`.
bool DecodeComponent(std::string_view key, size_t* pos, std::deque<std::string>& store, Value* out) {
  if (*pos >= key.size()) return false;
  uint8_t tag = uint8_t(key[*pos]);
  size_t p = *pos + 1;
  switch (tag) {
    case format::kTagFalse: case format::kTagTrue:
      *out = Value::Bool(tag == format::kTagTrue);
      *pos = p;
      return true;
    case format::kTagNumber: {
      if (p + 16 > key.size()) return false;
      bool is_int;
      int64_t i = 0;
      double d;
      format::GetNumberBody(key.data() + p, true, &is_int, &i, &d);
      *out = is_int ? Value::Int(i) : Value::Double(d);
      *pos = p + 16;
      return true;
    }
    case format::kTagString: {
      size_t start = p;
      bool escaped = false;
      while (true) {
        size_t z = key.find('\0', p);
        if (z == std::string_view::npos || z + 1 >= key.size()) return false;
        if (key[z + 1] == '\x01') {
          p = z;
          break;
        }
        escaped = true;
        p = z + 2;
      }
      std::string_view raw = key.substr(start, p - start);
      if (!escaped) {
        *out = Value::String(raw);
      } else {
        std::string& s = store.emplace_back();
        for (size_t k = 0; k < raw.size(); ++k) {
          s.push_back(raw[k]);
          if (raw[k] == '\0') ++k;  // skip the 0xFF
        }
        *out = Value::String(s);
      }
      *pos = p + 2;
      return true;
    }
    default:
      return false;
  }
}

bool Matches(const Value& c, const Filter& f) {
  int cmp;
  switch (c.type) {
    case ValueType::kString: {
      int r = c.s.compare(f.text);
      cmp = r < 0 ? -1 : (r > 0 ? 1 : 0);
      break;
    }
    case ValueType::kInt: case ValueType::kDouble:
      if (!f.has_num) return false;
      cmp = CompareNumbers(c, f.num);
      break;
    case ValueType::kBool:
      if (f.boolean < 0) return false;
      cmp = int(c.b) - f.boolean;
      break;
    default:
      return false;
  }
  switch (f.op) {
    case FilterOp::kEq: return cmp == 0;
    case FilterOp::kGt: return cmp > 0;
    case FilterOp::kGte: return cmp >= 0;
    case FilterOp::kLt: return cmp < 0;
    case FilterOp::kLte: return cmp <= 0;
  }
  return false;
}

Value DecodeOrdered(const char* enc) {
  bool is_int;
  int64_t i = 0;
  double d;
  format::GetNumberBody(enc, false, &is_int, &i, &d);
  if (enc[16] == 0) {
    // An int64: (d, residual) always reconstructs it.
    format::GetNumberBody(enc, true, &is_int, &i, &d);
    return Value::Int(i);
  }
  return Value::Double(d);
}

// The sum as a double: the integer part, then the compensated double part.
double Total(const SumState& s) { return double(s.isum) + (s.dsum + s.dcomp); }

Value SumValue(const SumState& s) {
  if (s.nd == 0 && s.isum >= INT64_MIN && s.isum <= INT64_MAX) return Value::Int(int64_t(s.isum));
  return Value::Double(Total(s));
}

Value AvgValue(const SumState& s) {
  if (s.n <= 0) return Value::Null();
  return Value::Double(Total(s) / double(s.n));
}

}  // namespace

Result<QueryResult> MapReduceIndexImpl::Query(const std::vector<std::pair<std::string, std::string>>& params,
                                              size_t max_response_bytes) const {
  const auto& groups = def_->group_names();
  const auto& reducers = def_->reducers();
  size_t ng = groups.size(), nr = reducers.size();
  auto group_index = [&](std::string_view name) -> int {
    for (size_t g = 0; g < ng; ++g)
      if (groups[g] == name) return int(g);
    return -1;
  };
  auto reducer_index = [&](std::string_view name) -> int {
    for (size_t r = 0; r < nr; ++r)
      if (reducers[r].name == name) return int(r);
    return -1;
  };

  std::vector<Filter> filters;
  std::vector<SortKey> sort;
  std::vector<std::string> sort_names;
  uint64_t limit = kDefaultLimit, offset = 0, level = ng;
  for (const auto& [name, value] : params) {
    if (name == "minEtag" || name == "waitMs") continue;
    if (name == "limit") {
      if (!ParseUint(value, &limit)) return Bad("limit: must be a non-negative integer");
      continue;
    }
    if (name == "offset") {
      if (!ParseUint(value, &offset)) return Bad("offset: must be a non-negative integer");
      continue;
    }
    if (name == "groupLevel") {
      if (!ParseUint(value, &level)) return Bad("groupLevel: must be a non-negative integer");
      level = std::min<uint64_t>(level, ng);
      continue;
    }
    if (name == "sort") {
      sort.clear();
      sort_names.clear();
      size_t b = 0;
      while (b <= value.size()) {
        size_t e = value.find(',', b);
        if (e == std::string::npos) e = value.size();
        std::string_view item = std::string_view(value).substr(b, e - b);
        SortKey k;
        if (!item.empty() && (item[0] == '-' || item[0] == '+')) {
          k.desc = item[0] == '-';
          item.remove_prefix(1);
        }
        if (item.empty()) return Bad("sort: empty field name");
        int gi = group_index(item), ri = reducer_index(item);
        if (gi >= 0) {
          k.is_group = true;
          k.index = size_t(gi);
        } else if (ri >= 0) {
          k.index = size_t(ri);
        } else {
          return Bad("sort: unknown field '" + std::string(item) + "'");
        }
        sort.push_back(k);
        sort_names.emplace_back(item);
        b = e + 1;
      }
      continue;
    }
    Filter f;
    std::string_view field = name;
    size_t dot = name.rfind('.');
    if (dot != std::string::npos) {
      std::string_view suffix = std::string_view(name).substr(dot + 1);
      if (suffix == "gt") f.op = FilterOp::kGt;
      else if (suffix == "gte") f.op = FilterOp::kGte;
      else if (suffix == "lt") f.op = FilterOp::kLt;
      else if (suffix == "lte") f.op = FilterOp::kLte;
      else return Bad("unknown parameter '" + name + "'");
      field = std::string_view(name).substr(0, dot);
    }
    int gi = group_index(field);
    if (gi < 0) {
      if (reducer_index(field) >= 0) return Bad("'" + name + "': filters apply to group fields only");
      return Bad("unknown parameter '" + name + "'");
    }
    f.field = size_t(gi);
    f.text = value;
    f.has_num = ParseNumber(value, &f.num);
    if (value == "true") f.boolean = 1;
    if (value == "false") f.boolean = 0;
    // A filter given twice (c=a&c=b, c.gte=b&c.gte=a) takes its last value,
    // as every parameter does (docs/http-choices.md).
    auto same = std::find_if(filters.begin(), filters.end(),
                             [&](const Filter& o) { return o.field == f.field && o.op == f.op; });
    if (same != filters.end())
      *same = std::move(f);
    else
      filters.push_back(std::move(f));
  }
  for (size_t s = 0; s < sort.size(); ++s) {
    if (sort[s].is_group && sort[s].index >= level)
      return Bad("sort: '" + sort_names[s] + "' is not a field at groupLevel " + std::to_string(level));
  }

  MDB_txn* txn;
  int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn);
  if (rc) return LmdbFailure(rc, "txn_begin");
  struct Abort {
    MDB_txn* t;
    ~Abort() { mdb_txn_abort(t); }
  } abort_guard{txn};

  QueryResult result;
  {
    MDB_val k{12, const_cast<char*>("through_etag")}, d;
    if (mdb_get(txn, meta_, &k, &d) == 0 && d.mv_size == 8) result.snapshot_etag = format::GetLE<uint64_t>(static_cast<const char*>(d.mv_data));
  }

  MDB_cursor* cur;
  rc = mdb_cursor_open(txn, rows_, &cur);
  if (rc) return LmdbFailure(rc, "cursor_open");
  std::deque<std::string> store;
  std::vector<OutRow> out;
  std::vector<SumState> sums;
  std::vector<MinMaxState> mms;
  std::vector<Value> comps(ng);
  std::vector<size_t> ends(ng);
  MDB_val k, d;
  for (rc = mdb_cursor_get(cur, &k, &d, MDB_FIRST); rc == 0; rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT)) {
    std::string_view key(static_cast<const char*>(k.mv_data), k.mv_size);
    if (d.mv_size != row_bytes_) {
      mdb_cursor_close(cur);
      return Status::Corruption("mapreduce index: row of the wrong size");
    }
    size_t pos = 0;
    bool ok = true;
    if (ng == 0) {
      pos = key.size();
    } else {
      for (size_t g = 0; g < ng && ok; ++g) {
        ok = DecodeComponent(key, &pos, store, &comps[g]);
        ends[g] = pos;
      }
    }
    if (!ok) {
      mdb_cursor_close(cur);
      return Status::Corruption("mapreduce index: undecodable group key");
    }
    bool pass = true;
    for (const Filter& f : filters)
      if (!Matches(comps[f.field], f)) {
        pass = false;
        break;
      }
    if (!pass) continue;
    size_t prefix_len = level == 0 ? 0 : (ng == 0 ? key.size() : ends[level - 1]);
    const char* row = static_cast<const char*>(d.mv_data);
    bool merge = !out.empty() && level < ng && out.back().prefix_len == prefix_len &&
                 out.back().key.substr(0, prefix_len) == key.substr(0, prefix_len);
    if (!merge) {
      OutRow o;
      o.key = key;
      o.prefix_len = prefix_len;
      o.agg = sums.size();
      out.push_back(o);
      sums.resize(sums.size() + nr);
      mms.resize(mms.size() + nr);
    }
    OutRow& o = out.back();
    o.count += format::GetLE<uint64_t>(row);
    for (size_t r = 0; r < nr; ++r) {
      const char* slot = row + red_offset_[r];
      switch (reducers[r].kind) {
        case ReducerKind::kCount: break;
        case ReducerKind::kSum: case ReducerKind::kAvg: {
          AddSums(sums[o.agg + r], LoadSum(slot));
          break;
        }
        case ReducerKind::kMin: case ReducerKind::kMax: {
          if (!slot[0]) break;
          MinMaxState& m = mms[o.agg + r];
          int c = m.present ? std::memcmp(slot + 1, m.enc, format::kOrderedNumberBytes) : 0;
          if (!m.present || (reducers[r].kind == ReducerKind::kMin ? c < 0 : c > 0)) {
            m.present = true;
            std::memcpy(m.enc, slot + 1, format::kOrderedNumberBytes);
          }
          break;
        }
      }
    }
  }
  mdb_cursor_close(cur);
  if (rc != MDB_NOTFOUND) return LmdbFailure(rc, "cursor_get");

  auto reducer_value = [&](const OutRow& o, size_t r) -> Value {
    switch (reducers[r].kind) {
      case ReducerKind::kCount: return Value::Int(int64_t(o.count));
      case ReducerKind::kSum: return SumValue(sums[o.agg + r]);
      case ReducerKind::kAvg: return AvgValue(sums[o.agg + r]);
      case ReducerKind::kMin: case ReducerKind::kMax: {
        const MinMaxState& m = mms[o.agg + r];
        return m.present ? DecodeOrdered(m.enc) : Value::Null();
      }
    }
    return Value::Null();
  };
  auto group_values = [&](const OutRow& o, std::vector<Value>* vals) {
    vals->resize(level);
    size_t pos = 0;
    for (size_t g = 0; g < level; ++g) DecodeComponent(o.key, &pos, store, &(*vals)[g]);
  };

  result.total = out.size();
  std::vector<uint32_t> order(out.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  if (!sort.empty()) {
    size_t ns = sort.size();
    std::vector<Value> sv(out.size() * ns);
    std::vector<Value> gv;
    for (size_t i = 0; i < out.size(); ++i) {
      bool need_groups = false;
      for (const SortKey& s : sort) need_groups |= s.is_group;
      if (need_groups) group_values(out[i], &gv);
      for (size_t s = 0; s < ns; ++s)
        sv[i * ns + s] = sort[s].is_group ? gv[sort[s].index] : reducer_value(out[i], sort[s].index);
    }
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      for (size_t s = 0; s < ns; ++s) {
        int c = Collate(sv[a * ns + s], sv[b * ns + s]);
        if (c != 0) return sort[s].desc ? c > 0 : c < 0;
      }
      return false;
    });
  }

  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.StartArray();
  std::vector<Value> gv;
  std::string scratch;
  uint64_t end = offset >= out.size() ? 0 : std::min<uint64_t>(out.size(), offset + std::min<uint64_t>(limit, out.size()));
  for (uint64_t i = offset; i < end; ++i) {
    const OutRow& o = out[order[i]];
    w.StartObject();
    group_values(o, &gv);
    for (size_t g = 0; g < level; ++g) {
      w.Key(groups[g].data(), rapidjson::SizeType(groups[g].size()));
      WriteValue(w, gv[g], scratch);
    }
    for (size_t r = 0; r < nr; ++r) {
      w.Key(reducers[r].name.data(), rapidjson::SizeType(reducers[r].name.size()));
      WriteValue(w, reducer_value(o, r), scratch);
    }
    w.EndObject();
    if (buf.GetSize() > max_response_bytes)
      return Status::TooLarge("the rows would exceed " + std::to_string(max_response_bytes) +
                              " bytes; ask for fewer with limit (or page with offset)");
  }
  w.EndArray();
  result.rows_json.assign(buf.GetString(), buf.GetSize());
  return result;
}

}  // namespace corvid::mapreduce

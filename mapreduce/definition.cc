// Definition validation (every error names its field) and MapDocument: the
// per-document hot path from JSON text to encoded entries.
#include "mapreduce/definition.h"

#include <rapidjson/error/en.h>

#include <cctype>
#include <map>
#include <set>

#include "common/exact_json.h"
#include "common/json_string.h"
#include "mapreduce/format.h"

namespace corvid::mapreduce {
namespace {

constexpr size_t kValueBufBytes = 64 * 1024;
constexpr size_t kStackBufBytes = 16 * 1024;
constexpr size_t kMaxEntriesPerDoc = 10000;
// Map names, groupBy names and reducers, each: every reducer costs every
// row and every map entry (definitions are hand-written and small).
constexpr size_t kMaxNames = 256;

bool IsIdentifier(std::string_view s) {
  if (s.empty()) return false;
  auto start = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!start(s[0])) return false;
  for (char c : s)
    if (!start(c) && !(c >= '0' && c <= '9')) return false;
  return true;
}

bool IsReservedParam(std::string_view s) {
  return s == "sort" || s == "limit" || s == "offset" || s == "groupLevel" || s == "minEtag" || s == "waitMs";
}

Status Invalid(std::string_view field, std::string_view message) {
  std::string m(field);
  m += ": ";
  m += message;
  return Status::InvalidArgument(std::move(m));
}
// An error at byte `offset` of the field's source (Status::offset).
Status InvalidAt(std::string_view field, std::string_view message, size_t offset) {
  return Status::InvalidArgumentAt(message, offset).Prefixed(std::string(field) + ": ");
}
// A parser's error about the field's source, its offset kept.
Status Invalid(std::string_view field, const Status& parsed) { return parsed.Prefixed(std::string(field) + ": "); }

const char* ReducerName(ReducerKind k) {
  switch (k) {
    case ReducerKind::kCount: return "count";
    case ReducerKind::kSum: return "sum";
    case ReducerKind::kMin: return "min";
    case ReducerKind::kMax: return "max";
    case ReducerKind::kAvg: return "avg";
  }
  return "?";
}

}  // namespace

Result<std::shared_ptr<const Definition>> Definition::Compile(std::string_view definition_json) {
  auto r = DefinitionImpl::CompileImpl(definition_json);
  if (!r.ok()) return r.status();
  return std::shared_ptr<const Definition>(std::move(r).value());
}

MapScratch::MapScratch()
    : value_buf_(new char[kValueBufBytes]),
      stack_buf_(new char[kStackBufBytes]),
      value_pool_(value_buf_.get(), kValueBufBytes),
      stack_pool_(stack_buf_.get(), kStackBufBytes) {}

Result<std::shared_ptr<const DefinitionImpl>> DefinitionImpl::CompileImpl(std::string_view definition_json) {
  rapidjson::Document d;
  d.Parse(definition_json.data(), definition_json.size());
  if (d.HasParseError()) {
    return InvalidAt("definition", std::string("invalid JSON (") + rapidjson::GetParseError_En(d.GetParseError()) + ")",
                     d.GetErrorOffset());
  }
  if (!d.IsObject()) return Invalid("definition", "must be a JSON object");
  // Unknown keys are refused, as in search definitions: a misspelt key
  // ("groupby") must not be silently ignored.
  for (const auto& m : d.GetObject()) {
    std::string_view k(m.name.GetString(), m.name.GetStringLength());
    if (k != "type" && k != "collection" && k != "map" && k != "groupBy" && k != "reduce")
      return Invalid(k, "unknown key (expected type, collection, map, groupBy, reduce)");
  }
  auto def = std::make_shared<DefinitionImpl>();

  auto type = d.FindMember("type");
  if (type == d.MemberEnd() || !type->value.IsString() || std::string_view(type->value.GetString()) != "mapreduce")
    return Invalid("type", "must be \"mapreduce\"");
  auto coll = d.FindMember("collection");
  if (coll == d.MemberEnd() || !coll->value.IsString() || coll->value.GetStringLength() == 0)
    return Invalid("collection", "must be a non-empty string");
  def->collection_.assign(coll->value.GetString(), coll->value.GetStringLength());

  // map
  auto map = d.FindMember("map");
  if (map == d.MemberEnd() || !map->value.IsObject() || map->value.MemberCount() == 0)
    return Invalid("map", "must be a non-empty object of name -> expression");
  if (map->value.MemberCount() > kMaxNames) return Invalid("map", "more than " + std::to_string(kMaxNames) + " names");
  for (auto m = map->value.MemberBegin(); m != map->value.MemberEnd(); ++m) {
    std::string name(m->name.GetString(), m->name.GetStringLength());
    std::string field = "map." + name;
    if (!IsIdentifier(name)) return Invalid(field, "name must be an identifier ([A-Za-z_][A-Za-z0-9_]*)");
    for (const auto& prev : def->map_names_)
      if (prev == name) return Invalid(field, "duplicate name");
    if (!m->value.IsString()) return Invalid(field, "must be an expression string");
    ParseOptions opt;
    auto e = ParseExpression(std::string_view(m->value.GetString(), m->value.GetStringLength()), opt);
    if (!e.ok()) return Invalid(field, e.status());
    def->map_names_.push_back(std::move(name));
    def->maps_.push_back(std::move(e).value());
  }
  def->map_needed_.assign(def->maps_.size(), false);

  // groupBy
  auto group = d.FindMember("groupBy");
  if (group == d.MemberEnd() || !group->value.IsArray()) return Invalid("groupBy", "must be an array of map names");
  if (group->value.Size() > kMaxNames) return Invalid("groupBy", "more than " + std::to_string(kMaxNames) + " names");
  for (rapidjson::SizeType k = 0; k < group->value.Size(); ++k) {
    const auto& g = group->value[k];
    std::string field = "groupBy[" + std::to_string(k) + "]";
    if (!g.IsString()) return Invalid(field, "must be a map name");
    std::string name(g.GetString(), g.GetStringLength());
    int idx = -1;
    for (size_t i = 0; i < def->map_names_.size(); ++i)
      if (def->map_names_[i] == name) idx = int(i);
    if (idx < 0) return Invalid(field, "unknown map name '" + name + "'");
    for (const auto& prev : def->group_names_)
      if (prev == name) return Invalid(field, "duplicate name '" + name + "'");
    if (IsReservedParam(name)) return Invalid(field, "'" + name + "' is a reserved query parameter name");
    def->group_names_.push_back(name);
    def->group_maps_.push_back(idx);
    def->map_needed_[size_t(idx)] = true;
  }

  // reduce
  auto reduce = d.FindMember("reduce");
  if (reduce == d.MemberEnd() || !reduce->value.IsObject() || reduce->value.MemberCount() == 0)
    return Invalid("reduce", "must be a non-empty object of name -> reducer");
  if (reduce->value.MemberCount() > kMaxNames)
    return Invalid("reduce", "more than " + std::to_string(kMaxNames) + " reducers");
  for (auto m = reduce->value.MemberBegin(); m != reduce->value.MemberEnd(); ++m) {
    std::string name(m->name.GetString(), m->name.GetStringLength());
    std::string field = "reduce." + name;
    if (!IsIdentifier(name)) return Invalid(field, "name must be an identifier ([A-Za-z_][A-Za-z0-9_]*)");
    for (const auto& prev : def->reducers_)
      if (prev.name == name) return Invalid(field, "duplicate name");
    for (const auto& g : def->group_names_)
      if (g == name) return Invalid(field, "name clashes with a groupBy field");
    if (IsReservedParam(name)) return Invalid(field, "'" + name + "' is a reserved query parameter name");
    if (!m->value.IsString()) return Invalid(field, "must be a reducer string: count(), sum(x), min(x), max(x) or avg(x)");
    std::string src(m->value.GetString(), m->value.GetStringLength());
    size_t b = src.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return InvalidAt(field, "empty reducer", 0);
    size_t e = b;
    while (e < src.size() && (std::isalnum(uint8_t(src[e])) || src[e] == '_')) ++e;
    std::string fname = src.substr(b, e - b);
    for (char& c : fname) c = char(std::tolower(uint8_t(c)));
    Reducer red;
    red.name = name;
    if (fname == "count") red.kind = ReducerKind::kCount;
    else if (fname == "sum") red.kind = ReducerKind::kSum;
    else if (fname == "min") red.kind = ReducerKind::kMin;
    else if (fname == "max") red.kind = ReducerKind::kMax;
    else if (fname == "avg") red.kind = ReducerKind::kAvg;
    else
      return InvalidAt(field, "unknown reducer '" + src.substr(b, e - b) + "' (use count, sum, min, max or avg)", b);
    size_t open = src.find_first_not_of(" \t\r\n", e);
    if (open == std::string::npos || src[open] != '(')
      return InvalidAt(field, "expected '('", open == std::string::npos ? src.size() : open);
    size_t close = src.find_last_not_of(" \t\r\n");
    if (src[close] != ')' || close <= open) return InvalidAt(field, "expected ')'", src.size());
    std::string inner_src = src;  // blank the reducer call so offsets stay those of `src`
    for (size_t k = 0; k <= open; ++k) inner_src[k] = ' ';
    inner_src[close] = ' ';
    bool empty_arg = inner_src.find_first_not_of(" \t\r\n") == std::string::npos;
    if (red.kind == ReducerKind::kCount) {
      if (!empty_arg) return InvalidAt(field, "count() takes no argument", open + 1);
    } else {
      if (empty_arg) return InvalidAt(field, std::string(ReducerName(red.kind)) + " takes one argument", b);
      ParseOptions opt;
      opt.map_names = def->map_names_;
      opt.resolve_map_names = true;
      opt.allow_unwind = false;
      auto ex = ParseExpression(inner_src, opt);
      if (!ex.ok()) return Invalid(field, ex.status());
      red.arg = std::move(ex).value();
      VisitNodes(*red.arg, [&](Node& n) {
        if (n.kind == NodeKind::kMapRef) def->map_needed_[size_t(n.slot)] = true;
      });
      red.input = int(def->numeric_reducers_++);
    }
    def->reducers_.push_back(std::move(red));
  }

  // Unwind variables: one per distinct argument, shared by every map that
  // unwinds the same path (so {tag: unwind(tags), up: upper(unwind(tags))}
  // pairs each tag with its own upper-case form).
  std::map<std::string, int> unwind_slots;
  for (size_t i = 0; i < def->maps_.size(); ++i) {
    VisitNodes(*def->maps_[i], [&](Node& n) {
      if (n.kind != NodeKind::kUnwind) return;
      std::string canon;
      CanonicalForm(*n.args[0], &canon);
      auto [it, inserted] = unwind_slots.emplace(canon, int(def->unwind_args_.size()));
      if (inserted) def->unwind_args_.push_back(n.args[0].get());
      n.slot = it->second;
    });
  }
  // An unwind in a map that nothing uses still multiplies entries; keep the
  // semantics simple: unwinds count only in maps that are used.
  {
    std::vector<const Node*> used;
    std::map<const Node*, int> remap;
    for (size_t i = 0; i < def->maps_.size(); ++i) {
      if (!def->map_needed_[i]) continue;
      VisitNodes(*def->maps_[i], [&](Node& n) {
        if (n.kind != NodeKind::kUnwind) return;
        const Node* arg = def->unwind_args_[size_t(n.slot)];
        auto [it, inserted] = remap.emplace(arg, int(used.size()));
        if (inserted) used.push_back(arg);
      });
    }
    for (size_t i = 0; i < def->maps_.size(); ++i) {
      VisitNodes(*def->maps_[i], [&](Node& n) {
        if (n.kind != NodeKind::kUnwind) return;
        auto it = remap.find(def->unwind_args_[size_t(n.slot)]);
        n.slot = it == remap.end() ? -1 : it->second;
      });
    }
    def->unwind_args_ = std::move(used);
  }

  // The top-level fields the maps read: each field path's first component
  // (the store adds the dotted keys that start with it, DecodeFields; not
  // every dotted prefix here, which a deep path would make quadratic). A
  // definition that reads none still needs an object: it asks for the
  // empty name.
  {
    std::set<std::string> names;
    for (const auto& m : def->maps_) {
      VisitNodes(*m, [&](Node& n) {
        if (n.kind == NodeKind::kField && !n.path.empty()) names.insert(n.path.front());
      });
    }
    if (names.empty()) names.insert("");
    def->read_fields_.assign(names.begin(), names.end());
  }

  // Canonical form and fingerprint.
  std::string& c = def->canonical_;
  c = "corvid.mapreduce.v1|";
  AppendJsonString(def->collection_, c);
  c += "|map";
  for (size_t i = 0; i < def->maps_.size(); ++i) {
    c += '|';
    AppendJsonString(def->map_names_[i], c);
    c += '=';
    CanonicalForm(*def->maps_[i], &c);
  }
  c += "|groupBy";
  for (const auto& g : def->group_names_) {
    c += '|';
    AppendJsonString(g, c);
  }
  c += "|reduce";
  for (const auto& r : def->reducers_) {
    c += '|';
    AppendJsonString(r.name, c);
    c += '=';
    c += ReducerName(r.kind);
    c += '(';
    if (r.arg) CanonicalForm(*r.arg, &c);
    c += ')';
  }
  def->fingerprint_ = format::Fnv1a64(c);
  return std::shared_ptr<const DefinitionImpl>(std::move(def));
}

bool DefinitionImpl::MapDocument(std::string_view json, MapScratch& s, MappedDoc* out, std::string* error,
                                 std::string* warning) const {
  out->Clear();
  error->clear();
  warning->clear();
  s.value_pool_.Clear();
  s.stack_pool_.Clear();
  MapScratch::Doc doc(&s.value_pool_, 1024, &s.stack_pool_);
  const rapidjson::ParseResult parsed = ParseWithExactNumbers(doc, json);
  if (parsed.IsError()) {
    *error = std::string("invalid JSON (") + rapidjson::GetParseError_En(parsed.Code()) + ") at offset " +
             std::to_string(parsed.Offset());
    return false;
  }
  bool ok = MapParsed(doc, s, out, error, warning);
  if (!ok) out->Clear();
  return ok;
}

bool DefinitionImpl::MapParsed(const rapidjson::Value& doc, MapScratch& s, MappedDoc* out, std::string* error,
                               std::string* warning) const {
  EvalContext& ctx = s.ctx_;
  ctx.ResetArena();
  ctx.doc = &doc;
  ctx.unwind_values = {};
  ctx.map_values = {};
  s.map_values_.assign(maps_.size(), Value());
  size_t nu = unwind_args_.size();
  if (nu == 0) return EmitEntry(s, out, error, warning);

  s.unwind_sources_.resize(nu);
  s.unwind_values_.resize(nu);
  s.unwind_pos_.assign(nu, 0);
  size_t total = 1;
  for (size_t k = 0; k < nu; ++k) {
    Value v;
    if (!Evaluate(*unwind_args_[k], ctx, &v)) {
      *error = "unwind: " + ctx.error();
      return false;
    }
    if (v.IsNullish()) return true;
    size_t n = v.type == ValueType::kArray ? v.json->Size() : 1;
    if (n == 0) return true;
    total *= n;
    if (total > kMaxEntriesPerDoc) {
      *error = "unwind: more than " + std::to_string(kMaxEntriesPerDoc) + " entries for one document";
      return false;
    }
    s.unwind_sources_[k] = v;
  }
  ctx.unwind_values = s.unwind_values_;
  while (true) {
    for (size_t k = 0; k < nu; ++k) {
      const Value& src = s.unwind_sources_[k];
      s.unwind_values_[k] = src.type == ValueType::kArray ? Value::FromJson((*src.json)[rapidjson::SizeType(s.unwind_pos_[k])]) : src;
    }
    if (!EmitEntry(s, out, error, warning)) return false;
    size_t k = 0;
    for (; k < nu; ++k) {
      const Value& src = s.unwind_sources_[k];
      size_t n = src.type == ValueType::kArray ? src.json->Size() : 1;
      if (++s.unwind_pos_[k] < n) break;
      s.unwind_pos_[k] = 0;
    }
    if (k == nu) break;
  }
  return true;
}

bool DefinitionImpl::EmitEntry(MapScratch& s, MappedDoc* out, std::string* error, std::string* warning) const {
  EvalContext& ctx = s.ctx_;
  ctx.map_values = {};
  for (size_t i = 0; i < maps_.size(); ++i) {
    if (!map_needed_[i]) continue;
    if (!Evaluate(*maps_[i], ctx, &s.map_values_[i])) {
      *error = "map." + map_names_[i] + ": " + ctx.error();
      return false;
    }
  }
  size_t key_start = out->keys.size();
  if (group_maps_.empty()) out->keys.push_back('\0');
  for (size_t g = 0; g < group_maps_.size(); ++g) {
    const Value& v = s.map_values_[size_t(group_maps_[g])];
    switch (v.type) {
      case ValueType::kMissing: case ValueType::kNull:
        out->keys.resize(key_start);  // no entry for a null key
        return true;
      case ValueType::kBool: format::PutKeyBool(out->keys, v.b); break;
      case ValueType::kInt: format::PutKeyInt(out->keys, v.i); break;
      case ValueType::kDouble: format::PutKeyDouble(out->keys, v.d); break;
      case ValueType::kString: format::PutKeyString(out->keys, v.s); break;
      case ValueType::kArray: case ValueType::kObject:
        *error = "groupBy." + group_names_[g] + ": value is an " + (v.type == ValueType::kArray ? "array" : "object") +
                 " (use unwind for arrays)";
        return false;
    }
  }
  if (out->keys.size() - key_start > format::kMaxGroupKeyBytes) {
    *error = "group key longer than " + std::to_string(format::kMaxGroupKeyBytes) + " bytes";
    return false;
  }
  out->key_ends.push_back(uint32_t(out->keys.size()));
  ctx.map_values = s.map_values_;
  for (const Reducer& r : reducers_) {
    if (!r.arg) continue;
    NumInput in;
    Value v;
    if (!Evaluate(*r.arg, ctx, &v)) {
      if (warning->empty()) *warning = "reduce." + r.name + ": " + ctx.error() + " (value left out)";
    } else if (v.type == ValueType::kInt) {
      in.kind = format::kNumInt;
      in.i = v.i;
    } else if (v.type == ValueType::kDouble) {
      in.kind = format::kNumDouble;
      in.d = v.d;
    } else if (!v.IsNullish() && warning->empty()) {
      static constexpr const char* kNames[] = {"missing", "null", "bool", "number", "number", "string", "array", "object"};
      *warning = "reduce." + r.name + ": " + ReducerName(r.kind) + " needs a number, got " + kNames[int(v.type)] +
                 " (value left out)";
    }
    out->inputs.push_back(in);
  }
  return true;
}

}  // namespace corvid::mapreduce

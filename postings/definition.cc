// SearchDefinition::Compile: validation of "type": "search" definitions,
// every error naming its field, and ISO-8601 date parsing for date fields.
#include "postings/definition.h"

#include <rapidjson/error/en.h>

#include <algorithm>
#include <set>
#include <cmath>

#include "common/exact_json.h"

namespace corvid::postings {
namespace {

Status Invalid(std::string_view field, std::string_view message) {
  std::string m(field);
  m += ": ";
  m += message;
  return Status::InvalidArgument(std::move(m));
}

int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

bool Digits(std::string_view s, size_t pos, size_t n, int* out) {
  if (pos + n > s.size()) return false;
  int v = 0;
  for (size_t i = 0; i < n; ++i) {
    char c = s[pos + i];
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

}  // namespace

std::vector<std::string> SplitPath(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t dot = s.find('.', start);
    out.emplace_back(s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return out;
}

namespace {

// The one value at `path` (SplitPath) through objects only; nullptr if it
// is missing, goes through an array, or two keys reach it ({"a": {"b": 1},
// "a.b": 2}): ForEachValue lists those.
const rapidjson::Value* ValueAt(const rapidjson::Value& doc, const std::vector<std::string>& path) {
  const rapidjson::Value* v = &doc;
  for (size_t i = 0; i < path.size();) {
    if (!v->IsObject()) return nullptr;
    const rapidjson::Value* next = nullptr;
    size_t spelt = 0, keys = 0;
    ForEachSpelledMember(*v, path, i, [&](const rapidjson::Value& m, size_t n) {
      next = &m;
      spelt = n;
      ++keys;
    });
    if (keys != 1) return nullptr;
    v = next;
    i += spelt;
  }
  return v;
}

}  // namespace

void WriteStoredFields(const rapidjson::Value& doc, const std::vector<std::string>& paths,
                       const std::vector<std::vector<std::string>>& split,
                       rapidjson::Writer<rapidjson::StringBuffer>& w, const BigIntegers* big) {
  w.StartObject();
  std::vector<const rapidjson::Value*> found;
  for (size_t i = 0; i < paths.size(); ++i) {
    const std::string& p = paths[i];
    if (const rapidjson::Value* v = ValueAt(doc, split[i])) {
      w.Key(p.data(), static_cast<rapidjson::SizeType>(p.size()));
      WriteExactly(*v, w, big);
      continue;
    }
    found.clear();
    ForEachValue(doc, split[i], 0, [&](const rapidjson::Value& v) { found.push_back(&v); });
    if (found.empty()) continue;
    w.Key(p.data(), static_cast<rapidjson::SizeType>(p.size()));
    w.StartArray();
    for (const rapidjson::Value* v : found) WriteExactly(*v, w, big);
    w.EndArray();
  }
  w.EndObject();
}

size_t KeySpells(std::string_view key, const std::vector<std::string>& path, size_t i) {
  for (size_t j = i; j < path.size(); ++j) {
    const std::string& c = path[j];
    if (!key.starts_with(c)) return 0;
    key.remove_prefix(c.size());
    if (key.empty()) return j + 1 - i;
    if (key.front() != '.') return 0;
    key.remove_prefix(1);
  }
  return 0;
}


std::optional<double> ParseIsoDate(std::string_view s, double* next) {
  int y = 0, mo = 1, d = 1, h = 0, mi = 0, sec = 0;
  double frac = 0;
  // The unit of the last component written: the period is [value, value + 1 unit).
  enum class Unit { kYear, kMonth, kDay, kHour, kMinute, kSecond, kPoint } unit = Unit::kYear;
  if (!Digits(s, 0, 4, &y)) return std::nullopt;
  size_t p = 4;
  auto at = [](int y, int mo, int d, int h, int mi, int sec, double frac) {
    return static_cast<double>(DaysFromCivil(y, mo, d)) * 86400000.0 + h * 3600000.0 + mi * 60000.0 + sec * 1000.0 + frac;
  };
  auto done = [&](double offset_ms) -> std::optional<double> {
    static const int kDays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (mo < 1 || mo > 12 || d < 1 || d > kDays[mo - 1] || h > 23 || mi > 59 || sec > 60) return std::nullopt;
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (mo == 2 && d == 29 && !leap) return std::nullopt;
    const double v = at(y, mo, d, h, mi, sec, frac) - offset_ms;
    if (next != nullptr) {
      switch (unit) {
        case Unit::kYear: *next = at(y + 1, 1, 1, 0, 0, 0, 0) - offset_ms; break;
        case Unit::kMonth: *next = (mo == 12 ? at(y + 1, 1, 1, 0, 0, 0, 0) : at(y, mo + 1, 1, 0, 0, 0, 0)) - offset_ms; break;
        case Unit::kDay: *next = v + 86400000.0; break;
        case Unit::kHour: *next = v + 3600000.0; break;
        case Unit::kMinute: *next = v + 60000.0; break;
        case Unit::kSecond: *next = v + 1000.0; break;
        case Unit::kPoint: *next = v; break;
      }
    }
    return v;
  };
  if (p == s.size()) return done(0);
  if (s[p] != '-' || !Digits(s, p + 1, 2, &mo)) return std::nullopt;
  p += 3;
  unit = Unit::kMonth;
  if (p == s.size()) return done(0);
  if (s[p] != '-' || !Digits(s, p + 1, 2, &d)) return std::nullopt;
  p += 3;
  unit = Unit::kDay;
  if (p == s.size()) return done(0);
  if ((s[p] != 'T' && s[p] != 't' && s[p] != ' ') || !Digits(s, p + 1, 2, &h)) return std::nullopt;
  p += 3;
  unit = Unit::kHour;
  if (p < s.size() && s[p] == ':') {
    if (!Digits(s, p + 1, 2, &mi)) return std::nullopt;
    p += 3;
    unit = Unit::kMinute;
    if (p < s.size() && s[p] == ':') {
      if (!Digits(s, p + 1, 2, &sec)) return std::nullopt;
      p += 3;
      unit = Unit::kSecond;
      if (p < s.size() && (s[p] == '.' || s[p] == ',')) {
        ++p;
        double scale = 100;
        size_t n = 0;
        while (p < s.size() && s[p] >= '0' && s[p] <= '9') {
          frac += (s[p] - '0') * scale;
          scale /= 10;
          ++p;
          ++n;
        }
        if (n == 0) return std::nullopt;
        unit = Unit::kPoint;
      }
    }
  }
  double offset_ms = 0;
  if (p < s.size()) {
    if (s[p] == 'Z' || s[p] == 'z') {
      ++p;
    } else if (s[p] == '+' || s[p] == '-') {
      int oh = 0, om = 0;
      int sign = s[p] == '-' ? -1 : 1;
      if (!Digits(s, p + 1, 2, &oh)) return std::nullopt;
      p += 3;
      if (p < s.size() && s[p] == ':') ++p;
      if (p < s.size()) {
        if (!Digits(s, p, 2, &om)) return std::nullopt;
        p += 2;
      }
      if (oh > 23 || om > 59) return std::nullopt;
      offset_ms = sign * (oh * 3600000.0 + om * 60000.0);
    } else {
      return std::nullopt;
    }
  }
  if (p != s.size()) return std::nullopt;
  return done(offset_ms);
}

const FieldDef* SearchDefinitionImpl::Find(std::string_view name) const {
  auto it = std::lower_bound(fields_.begin(), fields_.end(), name,
                             [](const FieldDef& f, std::string_view n) { return f.name < n; });
  if (it == fields_.end() || it->name != name) return nullptr;
  return &*it;
}

// Fields (and store paths) in one definition.
constexpr size_t kMaxFields = 1000;

Result<std::shared_ptr<const SearchDefinition>> SearchDefinition::Compile(std::string_view definition_json) {
  auto r = SearchDefinitionImpl::CompileImpl(definition_json);
  if (!r.ok()) return r.status();
  return std::shared_ptr<const SearchDefinition>(std::move(r).value());
}

Result<std::shared_ptr<const SearchDefinitionImpl>> SearchDefinitionImpl::CompileImpl(std::string_view json) {
  rapidjson::Document d;
  d.Parse(json.data(), json.size());
  if (d.HasParseError())
    return Invalid("definition", std::string("invalid JSON (") + rapidjson::GetParseError_En(d.GetParseError()) +
                                     ") at offset " + std::to_string(d.GetErrorOffset()));
  if (!d.IsObject()) return Invalid("definition", "must be a JSON object");
  auto def = std::make_shared<SearchDefinitionImpl>();
  for (const auto& m : d.GetObject()) {
    std::string_view k(m.name.GetString(), m.name.GetStringLength());
    if (k != "type" && k != "collection" && k != "fields" && k != "store")
      return Invalid(k, "unknown key (expected type, collection, fields, store)");
  }
  auto type = d.FindMember("type");
  if (type == d.MemberEnd() || !type->value.IsString() || std::string_view(type->value.GetString()) != "search")
    return Invalid("type", "must be \"search\"");
  auto coll = d.FindMember("collection");
  if (coll == d.MemberEnd() || !coll->value.IsString() || coll->value.GetStringLength() == 0)
    return Invalid("collection", "must be a non-empty string");
  def->collection_.assign(coll->value.GetString(), coll->value.GetStringLength());
  auto fields = d.FindMember("fields");
  if (fields == d.MemberEnd() || !fields->value.IsObject() || fields->value.MemberCount() == 0)
    return Invalid("fields", "must be a non-empty object of field path -> options");
  // Each field costs every document and segment lengths and norms; as
  // Elasticsearch's index.mapping.total_fields.limit.
  if (fields->value.MemberCount() > kMaxFields)
    return Invalid("fields", "more than " + std::to_string(kMaxFields) + " fields");
  for (const auto& f : fields->value.GetObject()) {
    FieldDef fd;
    fd.name.assign(f.name.GetString(), f.name.GetStringLength());
    std::string where = "fields." + fd.name;
    if (fd.name.empty()) return Invalid("fields", "a field path must not be empty");
    fd.path = SplitPath(fd.name);
    for (const auto& c : fd.path)
      if (c.empty()) return Invalid(where, "a dotted path must not have empty components");
    if (fd.name[0] == '_') return Invalid(where, "field names starting with '_' are reserved");
    if (!f.value.IsObject()) return Invalid(where, "must be an object such as {\"analyzer\": \"standard\"} or {\"type\": \"number\"}");
    std::string type_name = "text";
    bool has_analyzer = false;
    for (const auto& o : f.value.GetObject()) {
      std::string_view k(o.name.GetString(), o.name.GetStringLength());
      if (k == "type") {
        if (!o.value.IsString()) return Invalid(where + ".type", "must be \"text\", \"number\" or \"date\"");
        type_name.assign(o.value.GetString(), o.value.GetStringLength());
        if (type_name != "text" && type_name != "number" && type_name != "date")
          return Invalid(where + ".type", "unknown type '" + type_name + "' (expected text, number or date)");
      } else if (k == "analyzer") {
        if (!o.value.IsString()) return Invalid(where + ".analyzer", "must be a string");
        fd.analyzer_name.assign(o.value.GetString(), o.value.GetStringLength());
        has_analyzer = true;
      } else if (k == "boost") {
        if (!o.value.IsNumber() || !(o.value.GetDouble() > 0) || !(o.value.GetDouble() <= kMaxBoost))
          return Invalid(where + ".boost", std::string("must be a number > 0 and <= ") + kMaxBoostText);
        fd.boost = o.value.GetDouble();
      } else if (k == "facet") {
        if (!o.value.IsBool()) return Invalid(where + ".facet", "must be true or false");
        fd.facet = o.value.GetBool();
      } else {
        return Invalid(where + "." + std::string(k), "unknown option (expected analyzer, boost, facet or type)");
      }
    }
    if (type_name == "text") {
      fd.kind = FieldKind::kText;
      if (!has_analyzer) fd.analyzer_name = "standard";
      auto a = analyzers::FindAnalyzer(fd.analyzer_name);
      if (!a.ok()) return Invalid(where + ".analyzer", "unknown analyzer '" + fd.analyzer_name + "'");
      fd.analyzer = *a;
      fd.keyword = fd.analyzer_name == "keyword";
      fd.multi_term = fd.keyword                        ? MultiTermForm::kAsIs
                      : fd.analyzer_name == "folding" ? MultiTermForm::kFolded
                                                      : MultiTermForm::kNormalized;
    } else {
      fd.kind = type_name == "number" ? FieldKind::kNumber : FieldKind::kDate;
      if (has_analyzer || fd.facet || fd.boost != 1.0)
        return Invalid(where, "a " + type_name + " field takes no analyzer, boost or facet");
    }
    def->fields_.push_back(std::move(fd));
  }
  std::sort(def->fields_.begin(), def->fields_.end(), [](const FieldDef& a, const FieldDef& b) { return a.name < b.name; });
  for (size_t i = 1; i < def->fields_.size(); ++i)
    if (def->fields_[i].name == def->fields_[i - 1].name) return Invalid("fields." + def->fields_[i].name, "duplicate field");
  auto store = d.FindMember("store");
  if (store != d.MemberEnd() && store->value.IsArray() && store->value.Size() > kMaxFields)
    return Invalid("store", "more than " + std::to_string(kMaxFields) + " paths");
  if (store != d.MemberEnd()) {
    if (store->value.IsString() && std::string_view(store->value.GetString()) == "*") {
      def->store_all_ = true;
    } else if (store->value.IsArray()) {
      for (const auto& s : store->value.GetArray()) {
        if (!s.IsString() || s.GetStringLength() == 0) return Invalid("store", "must be \"*\" or an array of field paths");
        if (std::string_view(s.GetString(), s.GetStringLength()) == "*") {
          def->store_all_ = true;  // ["*"] as "*", as the request's fields=* reads
          continue;
        }
        std::string path(s.GetString(), s.GetStringLength());
        std::vector<std::string> split = SplitPath(path);
        for (const auto& c : split)
          if (c.empty()) return Invalid("store", "a dotted path must not have empty components ('" + path + "')");
        if (std::find(def->store_.begin(), def->store_.end(), path) != def->store_.end())
          continue;  // a hit has each key once
        def->store_.push_back(std::move(path));
        def->store_split_.push_back(std::move(split));
      }
    } else {
      return Invalid("store", "must be \"*\" or an array of field paths");
    }
  }
  std::string canon = "search|" + def->collection_ + "|";
  uint32_t text_slots = 0, numeric_slots = 0;
  for (auto& f : def->fields_) {
    f.slot = f.kind == FieldKind::kText ? text_slots++ : numeric_slots++;
    canon += f.name + ":" + std::to_string(static_cast<int>(f.kind)) + ":" + f.analyzer_name + ":" +
             std::to_string(f.boost) + ":" + (f.facet ? "1" : "0") + ";";
    // A changed analyzer is a changed definition: the index rebuilds. (Its
    // first revision adds nothing, so older indexes keep their fingerprint.)
    if (f.analyzer != nullptr && f.analyzer->revision() > 1) canon += "rev" + std::to_string(f.analyzer->revision()) + ";";
    // Likewise a path of several components since it reads keys that hold
    // dots (KeySpells): documents may yield more values than before.
    if (f.path.size() > 1) canon += "keys2;";
    // And a number field since it holds integers beyond 2^53 exactly
    // (Number, segment.h): its older segments hold their doubles.
    if (f.kind == FieldKind::kNumber) canon += "exact2;";
  }
  for (auto& f : def->fields_) (f.kind == FieldKind::kText ? def->text_ : def->numeric_).push_back(&f);
  canon += def->store_all_ ? "*" : "";
  for (auto& s : def->store_) canon += s + ",";
  // Likewise stored paths since they keep the digits of integers beyond
  // 64 bits (BigIntegers): older segments hold such a number's double.
  if (!def->store_.empty()) canon += "digits2;";
  def->fingerprint_ = Fnv1a64(canon);
  // The top-level fields read: each path's first component (the store adds
  // the dotted keys that start with it, KeySpells and DecodeFields); none
  // listed: whole documents.
  if (!def->store_all_) {
    std::set<std::string> names;
    for (const auto& f : def->fields_)
      if (!f.path.empty()) names.insert(f.path.front());
    for (const auto& sp : def->store_split_)
      if (!sp.empty()) names.insert(sp.front());
    if (names.empty()) names.insert("");
    def->read_fields_.assign(names.begin(), names.end());
  }
  return std::shared_ptr<const SearchDefinitionImpl>(std::move(def));
}

}  // namespace corvid::postings

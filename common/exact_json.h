// Parses JSON into a RapidJSON document with every number converted by
// std::from_chars, which rounds correctly, as kParseFullPrecisionFlag
// means to. RapidJSON 1.1's own full-precision path reads out of bounds
// (GetCachedPowerByIndex) on numbers such as 0.<700 zeros>1, which the
// store accepts (any number of digits within a double's range), so an
// index worker parsing such a stored document with it crashed, and again
// after every restart. The integers beyond 64 bits, which a double cannot
// hold, can be kept as their text for writing values back (BigIntegers).
// Header-only; include where RapidJSON is a dependency.
#pragma once

#include <rapidjson/document.h>
#include <rapidjson/encodedstream.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>
#include <rapidjson/stream.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace corvid {

// The integers of a parsed document that fit neither int64 nor uint64 (a
// JSON integer may have any number of digits, and the store keeps them as
// written). The document holds each as its nearest double, which has lost
// digits; a parse given a BigIntegers records their text, so that
// WriteExactly writes them back digit for digit (API.md: "an integer too
// large for uint64 keeps its digits"). Costs nothing for a document
// without one. Valid while its document is neither changed nor moved.
class BigIntegers {
 public:
  bool empty() const { return located_.empty(); }
  // The text of `v` if it is one of them, else nullptr.
  const std::string* Find(const rapidjson::Value& v) const {
    auto it = located_.find(&v);
    return it == located_.end() ? nullptr : &it->second;
  }

  // For the parse below: the `nth` double it gave the document (from 0)
  // is the integer `text`.
  void Record(size_t nth, std::string_view text) { recorded_.emplace_back(nth, std::string(text)); }
  // After the parse: ties the recorded texts to the document's values, by
  // walking it in document order, which is the order of its doubles.
  void Locate(const rapidjson::Value& root) {
    located_.clear();
    if (recorded_.empty()) return;
    size_t nth = 0, next = 0;
    Walk(root, nth, next);
    recorded_.clear();
  }
  void Clear() {
    recorded_.clear();
    located_.clear();
  }

 private:
  void Walk(const rapidjson::Value& v, size_t& nth, size_t& next) {
    if (next == recorded_.size()) return;
    if (v.IsObject()) {
      for (auto m = v.MemberBegin(); m != v.MemberEnd(); ++m) Walk(m->value, nth, next);
    } else if (v.IsArray()) {
      for (const auto& e : v.GetArray()) Walk(e, nth, next);
    } else if (v.IsDouble()) {
      if (recorded_[next].first == nth) located_.emplace(&v, std::move(recorded_[next++].second));
      ++nth;
    }
  }

  std::vector<std::pair<size_t, std::string>> recorded_;  // (nth double, text), in parse order
  std::unordered_map<const rapidjson::Value*, std::string> located_;
};

// Writes `v` as v.Accept(w) does, but each of `big`'s integers as its text
// (null or empty `big`: exactly Accept). Returns what the writer returns.
template <class Writer>
bool WriteExactly(const rapidjson::Value& v, Writer& w, const BigIntegers* big) {
  if (big == nullptr || big->empty()) return v.Accept(w);
  if (v.IsObject()) {
    if (!w.StartObject()) return false;
    for (auto m = v.MemberBegin(); m != v.MemberEnd(); ++m) {
      if (!w.Key(m->name.GetString(), m->name.GetStringLength())) return false;
      if (!WriteExactly(m->value, w, big)) return false;
    }
    return w.EndObject(v.MemberCount());
  }
  if (v.IsArray()) {
    if (!w.StartArray()) return false;
    for (const auto& e : v.GetArray())
      if (!WriteExactly(e, w, big)) return false;
    return w.EndArray(v.Size());
  }
  if (const std::string* text = v.IsDouble() ? big->Find(v) : nullptr)
    return w.RawValue(text->data(), text->size(), rapidjson::kNumberType);
  return v.Accept(w);
}

// A JSON number's text (validated) as the nearest double, correctly
// rounded (std::from_chars); out of a double's range, what strtod gives: 0
// or a denormal below the smallest, infinity beyond the largest. One
// reading for the validator that refuses the latter (server/json_input.cc)
// and for every reader of stored documents.
inline double JsonNumberToDouble(std::string_view text) {
  double d = 0;
  if (auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), d);
      ec == std::errc() && p == text.data() + text.size())
    return d;
  const std::string copy(text);  // strtod wants a terminated string; rare
  return std::strtod(copy.c_str(), nullptr);
}

namespace detail {

// Forwards SAX events to a document, turning raw number text into the
// value RapidJSON would have stored: an integer type when the text is an
// integer that fits 64 bits, else a double.
template <class Document>
class ExactNumberHandler {
 public:
  using Ch = typename Document::Ch;
  using SizeType = rapidjson::SizeType;

  explicit ExactNumberHandler(Document& doc, BigIntegers* big = nullptr) : doc_(doc), big_(big) {}

  bool Null() { return doc_.Null(); }
  bool Bool(bool b) { return doc_.Bool(b); }
  bool Int(int i) { return doc_.Int(i); }
  bool Uint(unsigned u) { return doc_.Uint(u); }
  bool Int64(int64_t i) { return doc_.Int64(i); }
  bool Uint64(uint64_t u) { return doc_.Uint64(u); }
  bool Double(double d) { return doc_.Double(d); }
  bool String(const Ch* s, SizeType n, bool copy) { return doc_.String(s, n, copy); }
  bool StartObject() { return doc_.StartObject(); }
  bool Key(const Ch* s, SizeType n, bool copy) { return doc_.Key(s, n, copy); }
  bool EndObject(SizeType n) { return doc_.EndObject(n); }
  bool StartArray() { return doc_.StartArray(); }
  bool EndArray(SizeType n) { return doc_.EndArray(n); }

  bool RawNumber(const Ch* s, SizeType n, bool) {
    const char* end = s + n;
    bool integer = true;
    for (const char* p = s; p < end; ++p)
      if (*p == '.' || *p == 'e' || *p == 'E') integer = false;
    if (integer) {
      if (*s == '-') {
        int64_t i;
        if (auto [p, ec] = std::from_chars(s, end, i); ec == std::errc() && p == end) return doc_.Int64(i);
      } else {
        uint64_t u;
        if (auto [p, ec] = std::from_chars(s, end, u); ec == std::errc() && p == end) return doc_.Uint64(u);
      }
      if (big_ != nullptr) big_->Record(doubles_, std::string_view(s, n));  // beyond 64 bits
    }
    const size_t nth = doubles_++;
    double d = JsonNumberToDouble(std::string_view(s, n));
    if (std::isinf(d)) {
      // Beyond a double's range: only in a store written before the
      // validator refused 10e308 as it refuses 1e400 (RapidJSON passes the
      // former). No writer can put infinity in JSON (RapidJSON's gives up
      // mid-value): it is read as the largest double and written back as
      // written.
      if (big_ != nullptr && !integer) big_->Record(nth, std::string_view(s, n));  // an integer is recorded above
      d = std::copysign(std::numeric_limits<double>::max(), d);
    }
    return doc_.Double(d);
  }

 private:
  Document& doc_;
  BigIntegers* big_;
  size_t doubles_ = 0;  // Double values given so far (BigIntegers::Record)
};

// After a parse given `big`: its texts tied to the document's values, or
// none if the parse failed.
inline void FinishBigIntegers(BigIntegers& big, const rapidjson::ParseResult& result, const rapidjson::Value& doc) {
  if (result.IsError()) big.Clear();
  else big.Locate(doc);
}

}  // namespace detail

// Parses `json` into `doc` (RapidJSON's other parse flags may be added in
// kFlags). Returns RapidJSON's parse result; on error `doc` is left as
// Populate leaves it (null). With `big`, records the text of the integers
// beyond 64 bits (BigIntegers), for writing `doc`'s values back out.
template <unsigned kFlags = 0, class Document>
rapidjson::ParseResult ParseWithExactNumbers(Document& doc, std::string_view json, BigIntegers* big = nullptr) {
  rapidjson::MemoryStream ms(json.data(), json.size());
  rapidjson::EncodedInputStream<rapidjson::UTF8<>, rapidjson::MemoryStream> is(ms);
  rapidjson::Reader reader;
  rapidjson::ParseResult result;
  if (big != nullptr) big->Clear();
  auto generate = [&](Document& d) {
    detail::ExactNumberHandler<Document> handler(d, big);
    result = reader.template Parse<kFlags | rapidjson::kParseNumbersAsStringsFlag>(is, handler);
    return !result.IsError();
  };
  doc.Populate(generate);
  if (big != nullptr) detail::FinishBigIntegers(*big, result, doc);
  return result;
}

// As ParseWithExactNumbers, in place: strings point into `json` (which
// must be NUL-terminated and outlive `doc`), as Document::ParseInsitu.
template <unsigned kFlags = 0, class Document>
rapidjson::ParseResult ParseInsituWithExactNumbers(Document& doc, char* json, BigIntegers* big = nullptr) {
  rapidjson::InsituStringStream is(json);
  rapidjson::Reader reader;
  rapidjson::ParseResult result;
  if (big != nullptr) big->Clear();
  auto generate = [&](Document& d) {
    detail::ExactNumberHandler<Document> handler(d, big);
    result = reader.template Parse<kFlags | rapidjson::kParseInsituFlag | rapidjson::kParseNumbersAsStringsFlag>(
        is, handler);
    return !result.IsError();
  };
  doc.Populate(generate);
  if (big != nullptr) detail::FinishBigIntegers(*big, result, doc);
  return result;
}

}  // namespace corvid

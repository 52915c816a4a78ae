// Parses JSON into a RapidJSON document with every number converted by
// std::from_chars, which rounds correctly, as kParseFullPrecisionFlag
// means to. RapidJSON 1.1's own full-precision path reads out of bounds
// (GetCachedPowerByIndex) on numbers such as 0.<700 zeros>1, which the
// store accepts (any number of digits within a double's range), so an
// index worker parsing such a stored document with it crashed, and again
// after every restart. Header-only; include where RapidJSON is a dependency.
#pragma once

#include <rapidjson/document.h>
#include <rapidjson/encodedstream.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>
#include <rapidjson/stream.h>

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace corvid {

namespace detail {

// Forwards SAX events to a document, turning raw number text into the
// value RapidJSON would have stored: an integer type when the text is an
// integer that fits 64 bits, else a double.
template <class Document>
class ExactNumberHandler {
 public:
  using Ch = typename Document::Ch;
  using SizeType = rapidjson::SizeType;

  explicit ExactNumberHandler(Document& doc) : doc_(doc) {}

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
    }
    double d;
    if (auto [p, ec] = std::from_chars(s, end, d); ec == std::errc() && p == end) return doc_.Double(d);
    // Out of range: strtod gives the rounded denormal, zero or infinity
    // (the store refuses numbers beyond a double's range, so this is a
    // value below the smallest denormal in practice).
    std::string text(s, n);
    return doc_.Double(std::strtod(text.c_str(), nullptr));
  }

 private:
  Document& doc_;
};

}  // namespace detail

// Parses `json` into `doc` (RapidJSON's other parse flags may be added in
// kFlags). Returns RapidJSON's parse result; on error `doc` is left as
// Populate leaves it (null).
template <unsigned kFlags = 0, class Document>
rapidjson::ParseResult ParseWithExactNumbers(Document& doc, std::string_view json) {
  rapidjson::MemoryStream ms(json.data(), json.size());
  rapidjson::EncodedInputStream<rapidjson::UTF8<>, rapidjson::MemoryStream> is(ms);
  rapidjson::Reader reader;
  rapidjson::ParseResult result;
  auto generate = [&](Document& d) {
    detail::ExactNumberHandler<Document> handler(d);
    result = reader.template Parse<kFlags | rapidjson::kParseNumbersAsStringsFlag>(is, handler);
    return !result.IsError();
  };
  doc.Populate(generate);
  return result;
}

// As ParseWithExactNumbers, in place: strings point into `json` (which
// must be NUL-terminated and outlive `doc`), as Document::ParseInsitu.
template <unsigned kFlags = 0, class Document>
rapidjson::ParseResult ParseInsituWithExactNumbers(Document& doc, char* json) {
  rapidjson::InsituStringStream is(json);
  rapidjson::Reader reader;
  rapidjson::ParseResult result;
  auto generate = [&](Document& d) {
    detail::ExactNumberHandler<Document> handler(d);
    result = reader.template Parse<kFlags | rapidjson::kParseInsituFlag | rapidjson::kParseNumbersAsStringsFlag>(
        is, handler);
    return !result.IsError();
  };
  doc.Populate(generate);
  return result;
}

}  // namespace corvid

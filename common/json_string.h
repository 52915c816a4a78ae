// Appends a string as a JSON string literal: quoted, with '"', '\\' and
// the control bytes escaped (RFC 8259 §7), every other byte as it is (the
// caller passes UTF-8; the logger replaces invalid sequences first). The
// one copy: map/reduce values and definitions, log lines, export and import.
#pragma once

#include <string>
#include <string_view>

namespace corvid {

inline void AppendJsonString(std::string_view s, std::string& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s.data() + start, i - start);
    start = i + 1;
    switch (c) {
      case '"': out.append("\\\""); break;
      case '\\': out.append("\\\\"); break;
      case '\n': out.append("\\n"); break;
      case '\t': out.append("\\t"); break;
      case '\r': out.append("\\r"); break;
      case '\b': out.append("\\b"); break;
      case '\f': out.append("\\f"); break;
      default:
        out.append("\\u00");
        out.push_back(kHex[c >> 4]);
        out.push_back(kHex[c & 15]);
    }
  }
  out.append(s.data() + start, s.size() - start);
  out.push_back('"');
}

}  // namespace corvid

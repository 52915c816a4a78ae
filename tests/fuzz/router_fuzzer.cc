// router: corvid::server::Router (server/router.h, transport-free) on whole
// requests built from the input, over a real DocumentStore and IndexEngine
// (router_harness.h: the environment and every invariant checked).
//
// Input, HTTP-like text:
//   <METHOD> <target>[ HTTP/1.1]\n
//   <Name>: <value>\n          (any number; Content-Type, If-Match,
//                               If-None-Match, Authorization are used,
//                               X-Router: keyed picks the router with an
//                               API key and small limits)
//   \n
//   <body>
// Line ends may be \r\n. A request the HTTP parser (Beast) would refuse
// never reaches the router, and is skipped here: a method that is not a
// token, a target with bytes outside 0x21-0x7e and 0x80-0xff, a header
// value with control characters.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tests/fuzz/router_harness.h"

namespace {

bool IsTchar(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         std::string_view("!#$%&'*+-.^_`|~").find(char(c)) != std::string_view::npos;
}

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

// The next line of `in` (without its \n or \r\n); false at the end.
bool NextLine(std::string_view& in, std::string_view& line) {
  if (in.empty()) return false;
  const size_t nl = in.find('\n');
  line = in.substr(0, nl);
  in.remove_prefix(nl == std::string_view::npos ? in.size() : nl + 1);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return true;
}

void Combine(std::string& field, std::string_view value) {
  if (!field.empty()) field += ", ";
  field.append(value);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string_view line;
  if (!NextLine(in, line)) return 0;
  const size_t space = line.find(' ');
  if (space == std::string_view::npos || space == 0) return 0;
  corvid::server::Request req;
  req.method.assign(line.substr(0, space));
  std::string_view target = line.substr(space + 1);
  for (std::string_view version : {" HTTP/1.1", " HTTP/1.0"})
    if (target.ends_with(version)) target.remove_suffix(version.size());
  if (target.empty()) return 0;
  for (unsigned char c : req.method)
    if (!IsTchar(c)) return 0;
  for (unsigned char c : target)
    if (c <= 0x20 || c == 0x7f) return 0;
  req.target.assign(target);

  bool keyed = false;
  while (NextLine(in, line) && !line.empty()) {
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return 0;
    const std::string_view name = line.substr(0, colon);
    for (unsigned char c : name)
      if (!IsTchar(c)) return 0;
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    for (unsigned char c : value)
      if ((c < 0x20 && c != '\t') || c == 0x7f) return 0;
    if (EqualsIgnoringCase(name, "content-type")) {
      Combine(req.content_type, value);
    } else if (EqualsIgnoringCase(name, "if-match")) {
      Combine(req.if_match, value);
    } else if (EqualsIgnoringCase(name, "if-none-match")) {
      Combine(req.if_none_match, value);
    } else if (EqualsIgnoringCase(name, "authorization")) {
      req.has_authorization = true;
      Combine(req.authorization, value);
    } else if (EqualsIgnoringCase(name, "x-router")) {
      keyed = EqualsIgnoringCase(value, "keyed");
    }
  }
  req.body.assign(in);
  corvid::fuzz::Env("router").Run(std::move(req), keyed);
  return 0;
}

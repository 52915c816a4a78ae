// bulk: NDJSON bulk bodies through the router's bulk path
// (POST /docs/{collection}/_bulk, server/router.cc ParseBulkPart: line
// splitting, per-line ValidateJsonObject with duplicate keys refused, ids,
// "_deleted"), and what a bulk that passes does: one atomic write through
// the merger, then the search and map/reduce indexes over the collection
// index every document (router_harness.h: environment and invariants).
// The whole input is the body. Collection "c" (indexed) and Content-Type
// application/x-ndjson, except when the first line is "#<collection>" or
// "#<collection> <content type>": then those, and the rest is the body.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tests/fuzz/router_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);
  std::string collection = "c", content_type = "application/x-ndjson";
  if (body.starts_with("#")) {
    const size_t nl = body.find('\n');
    std::string_view first = body.substr(1, nl == std::string_view::npos ? std::string_view::npos : nl - 1);
    body.remove_prefix(nl == std::string_view::npos ? body.size() : nl + 1);
    const size_t space = first.find(' ');
    collection.assign(first.substr(0, space));
    if (space != std::string_view::npos) content_type.assign(first.substr(space + 1));
    // Only what can be sent in a target and a header value.
    for (unsigned char c : collection)
      if (c <= 0x20 || c == 0x7f || c == '/' || c == '?' || c == '#') return 0;
    for (unsigned char c : content_type)
      if ((c < 0x20 && c != '\t') || c == 0x7f) return 0;
  }
  corvid::server::Request req;
  req.method = "POST";
  req.target = "/docs/" + collection + "/_bulk";
  req.content_type = content_type;
  req.body.assign(body);
  corvid::fuzz::Env("bulk").Run(std::move(req), false);
  return 0;
}

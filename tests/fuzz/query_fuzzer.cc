// query: the search query parser (postings/query_parser.h ParseQuery,
// Lucene classic syntax) on arbitrary text, with both default operators.
// Invariants: an error is InvalidArgument naming an offset within the
// query; a tree's offsets lie within the query, fuzzy edits are 0..2,
// boosts are finite and not negative; ToDebugString renders any tree.
// (A message may quote one byte of a multi-byte character: the router
// repairs invalid UTF-8 in every error message, router.cc.)
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "postings/query_parser.h"
#include "tests/fuzz/fuzz_util.h"

using namespace corvid::postings;

namespace {

void CheckTree(const QueryNode& n, size_t size, int depth) {
  FUZZ_CHECK_MSG(n.offset <= size, "node offset %zu beyond the query (%zu bytes)", n.offset, size);
  FUZZ_CHECK(n.edits <= 2);
  FUZZ_CHECK_MSG(std::isfinite(n.boost) && n.boost >= 0, "boost %g", n.boost);
  if (n.kind == QueryNode::Kind::kBool) {
    for (const auto& [occur, child] : n.clauses) {
      FUZZ_CHECK(child != nullptr);
      CheckTree(*child, size, depth + 1);
    }
  } else {
    FUZZ_CHECK(n.clauses.empty());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view q(reinterpret_cast<const char*>(data), size);
  for (DefaultOperator op : {DefaultOperator::kOr, DefaultOperator::kAnd}) {
    auto parsed = ParseQuery(q, op);
    if (!parsed.ok()) {
      const corvid::Status& s = parsed.status();
      FUZZ_CHECK_MSG(s.code() == corvid::StatusCode::kInvalidArgument, "not InvalidArgument: %s",
                     s.message().c_str());
      // Every syntax error names its byte, in the message and as the offset.
      FUZZ_CHECK_MSG(s.offset().has_value(), "no offset: %s", s.message().c_str());
      FUZZ_CHECK_MSG(*s.offset() <= size, "error offset %zu beyond the query (%zu bytes): %s", *s.offset(), size,
                     s.message().c_str());
      FUZZ_CHECK_MSG(s.message().ends_with(" at offset " + std::to_string(*s.offset())),
                     "message and offset %zu differ: %s", *s.offset(), s.message().c_str());
      continue;
    }
    const QueryNode& root = **parsed;
    CheckTree(root, size, 0);
    (void)ToDebugString(root);
  }
  return 0;
}

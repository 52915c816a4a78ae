// Compiles a parsed query (query_parser.h) against a snapshot into the
// tree of query.h: fields resolved, words analyzed as each field's
// analyzer does, prefix/wildcard/fuzzy words expanded over every segment's
// dictionary, numbers and dates parsed, idf computed over live documents.
// Bounded (kMaxQueryTerms, kMaxExpansions in compiler.cc) before the memory
// is spent.
#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include "common/status.h"
#include "postings/query_parser.h"
#include "postings/search/query.h"
#include "postings/snapshot.h"

namespace corvid::postings::search {

struct CompiledQuery {
  std::unique_ptr<CNode> root;
  int nodes = 0;  // node ids are 0..nodes-1 (SegEval's size)
};

Result<CompiledQuery> Compile(const Snapshot& snap, const QueryNode& query);

// An integer literal is exact up to 64 bits, as a document's JSON integer
// is (Number); any other number is the nearest double.
std::optional<Number> ParseNumber(std::string_view s);

}  // namespace corvid::postings::search

// The planner (strategy.h): which strategy ranks a query's matches, from
// the shape of its compiled tree, the role Lucene's BooleanScorerSupplier
// plays.
#include "postings/search/strategy.h"

#include <algorithm>

namespace corvid::postings::search {

// The terms that make up the whole score, in Score's order, if the query
// is a flat disjunction: one leaf, or a boolean of optional leaves (and any
// prohibited clauses, which only remove documents), whose alternatives are
// terms or expansions. Otherwise false.
bool FlatTerms(const CNode& root, std::vector<FlatTerm>& out) {
  auto leaf = [&](const CNode& n) {
    if (n.kind != CNode::Kind::kLeaf) return false;
    for (const Alt& a : n.alts)
      if (!a.any && a.terms.size() != 1) return false;
    for (const Alt& a : n.alts)
      for (uint32_t i = 0; i < a.terms.size(); ++i) out.push_back(FlatTerm{&a, i});
    return true;
  };
  if (root.kind == CNode::Kind::kLeaf) return leaf(root);
  if (root.kind != CNode::Kind::kBool) return false;
  bool any = false;
  for (const auto& [occ, c] : root.clauses) {
    if (occ == Occur::kMustNot) continue;
    if (occ == Occur::kMust || !leaf(*c)) return false;
    any = true;
  }
  return any;
}

// The scoring alternatives of a boolean of leaves with at least one
// required leaf ("a AND b", "+a b -c"), each a single term, in the order
// Score adds them; false for any other shape.
bool ConjunctionTerms(const CNode& root, std::vector<const Alt*>& out) {
  if (root.kind != CNode::Kind::kBool) return false;
  bool any_must = false;
  for (const auto& [occ, c] : root.clauses) {
    if (occ == Occur::kMustNot) continue;
    if (c->kind != CNode::Kind::kLeaf) return false;
    for (const Alt& a : c->alts)
      if (a.terms.size() != 1) return false;
    any_must |= occ == Occur::kMust;
  }
  if (!any_must) return false;
  for (const auto& [occ, c] : root.clauses)
    if (occ != Occur::kMustNot)
      for (const Alt& a : c->alts) out.push_back(&a);
  return true;
}

const char* StrategyName(Strategy s) {
  switch (s) {
    case Strategy::kExhaustive: return "exhaustive";
    case Strategy::kLeafTopK: return "leaf-top-k";
    case Strategy::kDisjunction: return "disjunction";
    case Strategy::kConjunction: return "conjunction";
    case Strategy::kAccumulate: return "accumulate";
  }
  return "unknown";
}

Plan PlanSearch(const CNode& root, bool by_score) {
  Plan plan;
  if (!by_score) return plan;
  if (FlatTerms(root, plan.flat)) {
    plan.strategy = plan.flat.size() > kMaxScoreTerms ? Strategy::kAccumulate : Strategy::kDisjunction;
    plan.flat_has_not = std::any_of(root.clauses.begin(), root.clauses.end(),
                                    [](const auto& c) { return c.first == Occur::kMustNot; });
    return plan;
  }
  plan.flat.clear();  // FlatTerms may have added some before it refused
  if (ConjunctionTerms(root, plan.conj)) {
    plan.strategy = Strategy::kConjunction;
    return plan;
  }
  if (root.kind == CNode::Kind::kLeaf) plan.strategy = Strategy::kLeafTopK;
  return plan;
}

}  // namespace corvid::postings::search

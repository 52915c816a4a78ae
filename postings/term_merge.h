// The one k-way merge of sorted term lists in postings/: a merge's inputs'
// dictionaries of a field (segment_merger.cc), and the terms a prefix,
// wildcard or fuzzy word matched in each segment (search/compiler.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace corvid::postings {

// `Lists` gives count() lists, list k holding size(k) terms, term(k, i)
// its i-th, each list ascending bytewise without repeats. Next() moves to
// the next term of their union; `at` then names the lists holding it, in
// list order, with its index in each. One comparison per list and term.
template <class Lists>
class TermMerge {
 public:
  struct Source {
    size_t list;
    uint32_t index;
  };

  explicit TermMerge(const Lists& lists) : lists_(lists), cursor_(lists.count(), 0), head_(lists.count()) {
    for (size_t k = 0; k < cursor_.size(); ++k) Load(k);
  }

  bool Next() {
    for (const Source& s : at) {
      ++cursor_[s.list];
      Load(s.list);
    }
    at.clear();
    for (size_t k = 0; k < cursor_.size(); ++k) {
      if (cursor_[k] == kDone) continue;
      const int c = at.empty() ? -1 : head_[k].compare(term);
      if (c < 0) {
        at.clear();
        term = head_[k];
      }
      if (c <= 0) at.push_back(Source{k, cursor_[k]});
    }
    return !at.empty();
  }

  std::string_view term;    // the current term (valid while the lists are)
  std::vector<Source> at;   // who holds it

 private:
  static constexpr uint32_t kDone = UINT32_MAX;
  void Load(size_t k) {
    if (cursor_[k] >= lists_.size(k)) {
      cursor_[k] = kDone;
      return;
    }
    head_[k] = lists_.term(k, cursor_[k]);
  }
  const Lists& lists_;
  std::vector<uint32_t> cursor_;  // per list: the index of its head, kDone past its end
  std::vector<std::string_view> head_;
};

}  // namespace corvid::postings

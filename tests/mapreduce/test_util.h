// Helpers shared by the mapreduce tests: a temporary directory removed on
// destruction, and a batch of DocChanges that owns its strings.
#pragma once

#include <cstdlib>
#include <deque>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "common/doc_change.h"

namespace corvid::mapreduce {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "corvid_mr_XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class Batch {
 public:
  void Put(uint64_t etag, std::string id, std::string json) {
    ids_.push_back(std::move(id));
    jsons_.push_back(std::move(json));
    changes_.push_back(DocChange{etag, ids_.back(), false, jsons_.back()});
  }
  void Del(uint64_t etag, std::string id) {
    ids_.push_back(std::move(id));
    changes_.push_back(DocChange{etag, ids_.back(), true, {}});
  }
  std::span<const DocChange> changes() const { return changes_; }
  uint64_t last_etag() const { return changes_.empty() ? 0 : changes_.back().etag; }
  void Clear() {
    ids_.clear();
    jsons_.clear();
    changes_.clear();
  }

 private:
  std::deque<std::string> ids_, jsons_;  // deque: views stay valid
  std::vector<DocChange> changes_;
};

}  // namespace corvid::mapreduce

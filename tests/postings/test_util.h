// Helpers shared by the postings tests: temporary directories, a small
// in-memory document store, and hit parsing.
#pragma once

#include <fcntl.h>
#include <rapidjson/document.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/resident_pages.h"
#include "postings/search_index.h"

namespace corvid::postings::testing {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/postings_test_XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct ParsedHit {
  std::string id;
  double score;
  std::string fields_json;
  std::vector<std::string> highlights;  // of the first highlighted field
};

inline std::vector<ParsedHit> ParseHits(const std::string& json) {
  rapidjson::Document d;
  d.Parse(json.c_str());
  std::vector<ParsedHit> out;
  for (const auto& h : d.GetArray()) {
    ParsedHit p;
    p.id = h["id"].GetString();
    p.score = h["score"].GetDouble();
    if (h.HasMember("highlights")) {
      for (const auto& f : h["highlights"].GetObject())
        for (const auto& s : f.value.GetArray()) p.highlights.emplace_back(s.GetString());
    }
    out.push_back(std::move(p));
  }
  return out;
}

// Documents by id, for fetch_document and batches.
struct Store {
  std::map<std::string, std::string> docs;
  uint64_t etag = 0;
  std::vector<std::string> ids, jsons;
  std::vector<DocChange> batch;
  void Put(const std::string& id, const std::string& json) {
    docs[id] = json;
    ids.push_back(id);
    jsons.push_back(json);
  }
  void Delete(const std::string& id) {
    docs.erase(id);
    ids.push_back(id);
    jsons.push_back("\x01");
  }
  // Applies everything queued since the last call as one batch.
  Status Flush(SearchIndex& idx, std::vector<IndexError>* errors = nullptr) {
    batch.clear();
    for (size_t i = 0; i < ids.size(); ++i) {
      DocChange c;
      c.etag = ++etag;
      c.id = ids[i];
      c.deleted = jsons[i] == "\x01";
      if (!c.deleted) c.json = jsons[i];
      batch.push_back(c);
    }
    std::vector<IndexError> errs;
    Status st = idx.ApplyBatch(batch, etag, errors ? *errors : errs);
    ids.clear();
    jsons.clear();
    return st;
  }
  std::function<std::optional<std::string>(std::string_view)> Fetcher() const {
    return [this](std::string_view id) -> std::optional<std::string> {
      auto it = docs.find(std::string(id));
      if (it == docs.end()) return std::nullopt;
      return it->second;
    };
  }
};

// How many pages of [data, data + size) of a mapping are in the page
// cache (mincore); SIZE_MAX if the kernel would not say, which fails any
// check that few pages were read.
inline size_t ResidentPages(const void* data, size_t size) {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t from = reinterpret_cast<uintptr_t>(data) / page * page;
  std::vector<unsigned char> in((reinterpret_cast<uintptr_t>(data) + size - from + page - 1) / page);
  if (::mincore(reinterpret_cast<void*>(from), in.size() * page, in.data()) != 0) return SIZE_MAX;
  return static_cast<size_t>(std::count_if(in.begin(), in.end(), [](unsigned char c) { return (c & 1) != 0; }));
}

// Takes the segment files (*.cvs) in `dir` out of the page cache, and
// `mapping` (one of them, as mapped) out of our page tables first. False
// if some of the mapping stayed resident (tmpfs keeps every page): a test
// of what a cold read fetches then has nothing to measure.
inline bool EvictSegmentFiles(const std::string& dir, std::string_view mapping) {
  DropResidentPages(mapping.data(), mapping.size());
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".cvs") continue;
    const int fd = ::open(entry.path().c_str(), O_RDONLY);
    if (fd < 0) return false;
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
  return ResidentPages(mapping.data(), mapping.size()) == 0;
}

}  // namespace corvid::postings::testing

// A read-only private memory map of a whole file (segments, `corvid
// import`'s input). Movable, not copyable; an empty file maps to nothing.
//
// How much a page fault reads is the mapping's ReadAdvice (madvise). The
// kernel's default reads around the faulting page a window as large as the
// block device's readahead, 8 MiB on some machines (read_ahead_kb): right
// for a pass over the file, ruinous for lookups under a memory cap, where
// every cold page a query touches then reads 8 MiB and evicts as much.
#pragma once

#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "common/durable_file.h"
#include "common/status.h"

namespace corvid {

// kRandom: a fault reads its page only (queries; they ask for what they
// know they will read with WillNeed, resident_pages.h). kSequential: a
// fault reads ahead of itself (one pass front to back). A mapping given
// neither has the kernel's read-around.
enum class ReadAdvice { kRandom, kSequential };

class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile() {
    if (data_ != nullptr && size_ > 0) ::munmap(const_cast<char*>(data_), size_);
  }
  MappedFile(MappedFile&& o) noexcept : data_(o.data_), size_(o.size_) {
    o.data_ = nullptr;
    o.size_ = 0;
  }
  MappedFile& operator=(MappedFile&&) = delete;
  MappedFile(const MappedFile&) = delete;

  static Result<MappedFile> Open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("open " + path);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      const Status s = ErrnoStatus("stat " + path);
      ::close(fd);
      return s;
    }
    MappedFile m;
    m.size_ = static_cast<size_t>(st.st_size);
    if (m.size_ > 0) {
      void* p = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const Status s = ErrnoStatus("mmap " + path);
        ::close(fd);
        m.size_ = 0;
        return s;
      }
      m.data_ = static_cast<const char*>(p);
    }
    ::close(fd);
    return m;
  }

  // Sets how faults on the mapping read (the advice is the mapping's, so it
  // holds for every reader of this MappedFile).
  void Advise(ReadAdvice advice) const {
    if (data_ == nullptr || size_ == 0) return;
    (void)::madvise(const_cast<char*>(data_), size_, advice == ReadAdvice::kRandom ? MADV_RANDOM : MADV_SEQUENTIAL);
  }

  const char* data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view view() const { return {data_ ? data_ : "", size_}; }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace corvid

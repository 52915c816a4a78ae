// A read-only private memory map of a whole file (segments, `corvid
// import`'s input). Movable, not copyable; an empty file maps to nothing.
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

  const char* data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view view() const { return {data_ ? data_ : "", size_}; }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace corvid

//===- FuzzInput.h - Helpers shared by the reader fuzz targets --*- C++ -*-===//
//
// The readers under test take a path (they check that it is a regular file,
// open it and read it, or pread it): an input is handed to them as an
// anonymous in-memory file (memfd) named by /proc/self/fd/N, so the reader
// runs unchanged and nothing is written to disk.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_TEST_FUZZ_FUZZINPUT_H
#define CAC_TEST_FUZZ_FUZZINPUT_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

namespace cac::fuzz {

/// An anonymous regular file holding one input; closed (and gone) with the
/// object.
class MemFile {
public:
  MemFile(const uint8_t *data, size_t size) {
    fd_ = memfd_create("cac-fuzz", MFD_CLOEXEC);
    if (fd_ < 0) {
      std::perror("cac fuzz: memfd_create");
      std::abort();
    }
    size_t done = 0;
    while (done < size) {
      ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) {
        std::perror("cac fuzz: writing the memfd");
        std::abort();
      }
      done += size_t(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile &) = delete;
  MemFile &operator=(const MemFile &) = delete;

  /// A path that opens the file (a regular file to stat and open).
  const std::string &path() const { return path_; }

private:
  int fd_ = -1;
  std::string path_;
};

/// A command line's arguments from one input: its NUL-separated parts (an
/// empty part is an empty argument), at most \p most of them.
inline std::vector<std::string> splitArguments(const uint8_t *data,
                                               size_t size, size_t most) {
  std::vector<std::string> args;
  std::string input(reinterpret_cast<const char *>(data), size);
  size_t start = 0;
  while (start <= input.size() && args.size() < most) {
    size_t end = input.find('\0', start);
    if (end == std::string::npos)
      end = input.size();
    args.push_back(input.substr(start, end - start));
    start = end + 1;
  }
  return args;
}

} // namespace cac::fuzz

#endif // CAC_TEST_FUZZ_FUZZINPUT_H

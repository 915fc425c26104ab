//===- FileUtil.cpp - Durable, atomic file and directory writes -----------===//

#include "cac/Runtime/Support/FileUtil.h"

#include <array>
#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <ftw.h>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace cac::rt {

namespace {

/// Removes a folder and what it holds (as std::filesystem::remove_all, which
/// is not called: pip's libtorch.so exports a remove_all of its own that
/// crashes when the program's calls bind to it).
int removeEntry(const char *path, const struct stat *, int, struct FTW *) {
  return ::remove(path);
}
void removeTree(const fs::path &p, std::error_code &ec) {
  ec.clear();
  if (::nftw(p.c_str(), removeEntry, 16, FTW_DEPTH | FTW_PHYS) != 0 &&
      errno != ENOENT)
    ec = std::error_code(errno, std::generic_category());
}

[[noreturn]] void throwErrno(const std::string &what, const fs::path &path) {
  int err = errno;
  throw std::runtime_error(what + " '" + path.string() +
                           "': " + std::strerror(err));
}

constexpr size_t kBufferSize = 1 << 20;

#if defined(__x86_64__)
/// CRC-32C with SSE 4.2's crc32 instruction (the caller inverts).
__attribute__((target("sse4.2"))) uint32_t
crc32cHardware(const uint8_t *p, size_t size, uint32_t crc) {
  uint64_t c = crc;
  for (; size >= 8; size -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; size > 0; --size, ++p)
    c32 = __builtin_ia32_crc32qi(c32, *p);
  return c32;
}
#endif

/// fsyncs every file and folder below \p dir (deepest first) and \p dir.
void fsyncTree(const fs::path &dir) {
  for (const auto &entry : fs::directory_iterator(dir)) {
    if (entry.is_directory())
      fsyncTree(entry.path());
  }
  fsyncDirectory(dir);
}

} // namespace

FileWriter::FileWriter(fs::path path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throwErrno("cannot create", path_);
  buffer_.reserve(kBufferSize);
}

FileWriter::~FileWriter() {
  if (fd_ >= 0)
    ::close(fd_);
}

namespace {

/// Writes all of \p size bytes to \p fd; throws naming \p path.
void writeAll(int fd, const fs::path &path, const char *p, size_t left) {
  if (injectedWriteFailure(path, left)) {
    errno = ENOSPC;
    throwErrno("cannot write", path);
  }
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      throwErrno("cannot write", path);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

struct InjectedFailure {
  std::mutex mutex;
  std::string spec, text;
  uint64_t after = 0, written = 0;
};

} // namespace

bool injectedWriteFailure(const fs::path &path, size_t size) {
  const char *env = std::getenv("CAC_TEST_ENOSPC");
  if (!env || !*env)
    return false;
  static InjectedFailure f;
  std::lock_guard<std::mutex> lock(f.mutex);
  if (f.spec != env) {
    f.spec = env;
    size_t colon = f.spec.rfind(':');
    f.text = f.spec.substr(0, colon);
    f.after = colon == std::string::npos
                  ? 0
                  : std::strtoull(f.spec.c_str() + colon + 1, nullptr, 10);
    f.written = 0;
  }
  if (path.string().find(f.text) == std::string::npos)
    return false;
  if (f.written + size > f.after)
    return true;
  f.written += size;
  return false;
}

void appendToFile(const fs::path &path, std::string_view text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                  0644);
  if (fd < 0)
    throwErrno("cannot open", path);
  try {
    writeAll(fd, path, text.data(), text.size());
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0)
    throwErrno("cannot write", path);
}

int removeStaleTemporaries(const fs::path &finalPath) {
  fs::path dir = finalPath.parent_path().empty() ? fs::path(".")
                                                 : finalPath.parent_path();
  std::string base = finalPath.filename().string();
  std::error_code ec;
  if (base.empty() || !fs::is_directory(dir, ec))
    return 0;
  std::vector<fs::path> stale;
  for (const auto &entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name == base + ".tmp" || name.rfind(base + ".tmp-", 0) == 0)
      stale.push_back(entry.path());
  }
  int removed = 0;
  for (const fs::path &p : stale) {
    removeTree(p, ec);
    removed += ec ? 0 : 1;
  }
  return removed;
}

uint32_t crc32c(const void *data, size_t size, uint32_t crc) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k)
        c = (c & 1) ? 0x82f63b78u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  const auto *p = static_cast<const uint8_t *>(data);
  crc = ~crc;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("sse4.2"))
    return ~crc32cHardware(p, size, crc);
#endif
  for (size_t i = 0; i < size; ++i)
    crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

std::string fileCrc32c(const fs::path &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throwErrno("cannot open", path);
  std::vector<char> buf(kBufferSize);
  uint32_t crc = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      errno = e;
      throwErrno("cannot read", path);
    }
    if (n == 0)
      break;
    crc = crc32c(buf.data(), static_cast<size_t>(n), crc);
  }
  ::close(fd);
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", crc);
  return hex;
}

void FileWriter::flush() {
  writeAll(fd_, path_, buffer_.data(), buffer_.size());
  buffer_.clear();
}

void FileWriter::write(const void *data, size_t size) {
  if (fd_ < 0)
    throw std::runtime_error("write to closed file '" + path_.string() + "'");
  const char *p = static_cast<const char *>(data);
  written_ += size;
  if (buffer_.size() + size > kBufferSize) {
    flush();
    if (size >= kBufferSize) {
      buffer_.assign(p, p + size);
      flush();
      return;
    }
  }
  buffer_.insert(buffer_.end(), p, p + size);
}

void FileWriter::commit() {
  if (fd_ < 0)
    return;
  flush();
  if (::fsync(fd_) != 0)
    throwErrno("cannot fsync", path_);
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0)
    throwErrno("cannot close", path_);
}

void fsyncDirectory(const fs::path &dir) {
  fs::path d = dir.empty() ? fs::path(".") : dir;
  int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    throwErrno("cannot open directory", d);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some file systems refuse fsync on directories; that is not a data loss.
  if (rc != 0 && err != EINVAL && err != EROFS) {
    errno = err;
    throwErrno("cannot fsync directory", d);
  }
}

void writeFileAtomic(const fs::path &path,
                     const std::function<void(FileWriter &)> &fill) {
  fs::path tmp = path;
  tmp += ".tmp";
  try {
    FileWriter writer(tmp);
    fill(writer);
    writer.commit();
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throwErrno("cannot rename '" + tmp.string() + "' to", path);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  fsyncDirectory(path.parent_path());
}

void writeFileAtomic(const fs::path &path, std::string_view contents) {
  writeFileAtomic(path, [&](FileWriter &w) { w.write(contents); });
}

void requireRegularFile(const fs::path &path, const std::string &what) {
  struct stat st;
  // stat, not open: opening a FIFO waits for a writer.
  if (::stat(path.c_str(), &st) != 0)
    throwErrno("cannot open " + what, path);
  if (S_ISDIR(st.st_mode)) {
    errno = EISDIR;
    throwErrno("cannot read " + what, path);
  }
  if (!S_ISREG(st.st_mode))
    throw std::runtime_error(
        "cannot read " + what + " '" + path.string() +
        "': not a regular file (a device, a FIFO or a socket, which may "
        "never end); give a file");
}

std::string readFileToString(const fs::path &path) {
  requireRegularFile(path, "file");
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    errno = errno ? errno : ENOENT;
    throwErrno("cannot open", path);
  }
  if (std::filesystem::is_directory(path)) {
    errno = EISDIR;
    throwErrno("cannot read", path);
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad())
    throwErrno("cannot read", path);
  return ss.str();
}

AtomicDirectory::AtomicDirectory(fs::path finalPath)
    : final_(std::move(finalPath)) {
  while (!final_.empty() && !final_.has_filename())
    final_ = final_.parent_path(); // "dir/" → "dir"
  if (final_.empty())
    throw std::runtime_error("atomic directory: empty path");
  fs::path parent = final_.parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (ec)
      throw std::runtime_error("cannot create directory '" + parent.string() +
                               "': " + ec.message());
  }
  std::string templ = final_.string() + ".tmp-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data()))
    throwErrno("cannot create temporary directory", templ);
  tmp_ = fs::path(buf.data());
}

AtomicDirectory::~AtomicDirectory() {
  if (!committed_) {
    std::error_code ec;
    removeTree(tmp_, ec);
  }
}

void AtomicDirectory::commit() {
  if (committed_)
    return;
  fsyncTree(tmp_);
  std::error_code ec;
  bool exists = fs::exists(final_, ec);
  if (exists) {
    // Swap in one step so the final name never disappears, then delete the
    // old contents, which now live under the temporary name.
    if (::renameat2(AT_FDCWD, tmp_.c_str(), AT_FDCWD, final_.c_str(),
                    RENAME_EXCHANGE) != 0) {
      if (errno != EINVAL && errno != ENOSYS)
        throwErrno("cannot exchange '" + tmp_.string() + "' with", final_);
      // The file system cannot exchange: move the old folder aside first.
      fs::path old = tmp_;
      old += ".old";
      if (::rename(final_.c_str(), old.c_str()) != 0)
        throwErrno("cannot move aside", final_);
      if (::rename(tmp_.c_str(), final_.c_str()) != 0)
        throwErrno("cannot rename '" + tmp_.string() + "' to", final_);
      removeTree(old, ec);
    } else {
      removeTree(tmp_, ec);
    }
  } else if (::rename(tmp_.c_str(), final_.c_str()) != 0) {
    throwErrno("cannot rename '" + tmp_.string() + "' to", final_);
  }
  committed_ = true;
  fsyncDirectory(final_.parent_path());
}

} // namespace cac::rt

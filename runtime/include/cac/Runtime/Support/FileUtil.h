//===- FileUtil.h - Durable, atomic file and directory writes ---*- C++ -*-===//
//
// Everything the runtime persists (weights, checkpoints, configs) goes through
// these helpers so that a crash never leaves a half-written file or folder
// visible under its final name: data is written under a temporary name,
// fsync'ed, renamed into place, and the parent directory is fsync'ed.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_SUPPORT_FILEUTIL_H
#define CAC_RUNTIME_SUPPORT_FILEUTIL_H

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace cac::rt {

/// A buffered writer on a POSIX file descriptor. Every failure throws
/// std::runtime_error naming the file and the system error.
class FileWriter {
public:
  /// Creates (truncates) \p path for writing.
  explicit FileWriter(std::filesystem::path path);
  ~FileWriter();
  FileWriter(const FileWriter &) = delete;
  FileWriter &operator=(const FileWriter &) = delete;

  /// Appends \p size bytes.
  void write(const void *data, size_t size);
  /// Appends a string.
  void write(std::string_view text) { write(text.data(), text.size()); }
  /// Flushes the buffer, fsyncs and closes the file.
  void commit();
  /// Bytes written so far.
  uint64_t bytesWritten() const { return written_; }
  const std::filesystem::path &path() const { return path_; }

private:
  void flush();
  std::filesystem::path path_;
  int fd_ = -1;
  std::vector<char> buffer_;
  uint64_t written_ = 0;
};

/// Writes a file atomically: \p fill writes the contents to `PATH.tmp`, which
/// is then fsync'ed and renamed to \p path, and the directory is fsync'ed. On
/// any exception the temporary file is removed and the old file, if any, is
/// left untouched.
void writeFileAtomic(const std::filesystem::path &path,
                     const std::function<void(FileWriter &)> &fill);

/// writeFileAtomic with fixed contents.
void writeFileAtomic(const std::filesystem::path &path,
                     std::string_view contents);

/// fsyncs a directory so that renames and creations inside it are durable.
void fsyncDirectory(const std::filesystem::path &dir);

/// Reads a whole file; throws std::runtime_error naming the file on failure.
std::string readFileToString(const std::filesystem::path &path);

/// A folder that becomes visible under its final name all at once.
///
/// The constructor creates `FINAL.tmp-XXXXXX` beside \p finalPath; the caller
/// writes into path() (with FileWriter, which fsyncs each file) and calls
/// commit(), which fsyncs the folder tree and renames it to \p finalPath. An
/// existing \p finalPath is replaced by an atomic exchange (renameat2
/// RENAME_EXCHANGE) and then deleted, so readers see either the old or the
/// new folder, never a mix. If commit() is never reached the destructor
/// removes the temporary folder.
class AtomicDirectory {
public:
  explicit AtomicDirectory(std::filesystem::path finalPath);
  ~AtomicDirectory();
  AtomicDirectory(const AtomicDirectory &) = delete;
  AtomicDirectory &operator=(const AtomicDirectory &) = delete;

  /// The temporary folder to write into.
  const std::filesystem::path &path() const { return tmp_; }
  /// Publishes the folder under its final name.
  void commit();

private:
  std::filesystem::path final_;
  std::filesystem::path tmp_;
  bool committed_ = false;
};

} // namespace cac::rt

#endif // CAC_RUNTIME_SUPPORT_FILEUTIL_H

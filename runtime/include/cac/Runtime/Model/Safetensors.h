//===- Safetensors.h - Reading and writing .safetensors files ---*- C++ -*-===//
//
// The safetensors format: an 8-byte little-endian header length N, N bytes of
// JSON mapping each tensor name to {"dtype", "shape", "data_offsets"} (plus an
// optional "__metadata__" object of strings), then the raw little-endian data.
// Offsets are relative to the first byte after the header.
//
// Reading validates the whole header before any data is touched; every
// problem (truncated file, bad header length, bad JSON, unknown dtype, offsets
// out of range or overlapping, sizes that do not match the shape) is a
// std::runtime_error whose message names the file and what is wrong.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_MODEL_SAFETENSORS_H
#define CAC_RUNTIME_MODEL_SAFETENSORS_H

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace cac::rt {

/// Tensors by name, as read from or written to a safetensors file.
using NamedTensors = std::map<std::string, at::Tensor>;

/// The safetensors dtype string ("F32", "BF16", ...) of a torch dtype; throws
/// for dtypes the format (or this implementation) does not store.
std::string safetensorsDTypeName(at::ScalarType type);

/// The torch dtype of a safetensors dtype string; throws for unknown names.
at::ScalarType safetensorsDTypeFromName(const std::string &name);

/// One tensor's header entry.
struct SafetensorsEntry {
  std::string name;
  /// The dtype as written in the file ("F32", "BF16", "I64", ...).
  std::string dtypeName;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  /// Byte range inside the data section.
  uint64_t begin = 0, end = 0;
};

/// An open safetensors file. The header is parsed and validated by the
/// constructor; tensors are read on demand (so a sharded multi-gigabyte model
/// is never held in memory twice).
class SafetensorsReader {
public:
  /// Opens and validates \p path.
  explicit SafetensorsReader(std::filesystem::path path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader &) = delete;
  SafetensorsReader &operator=(const SafetensorsReader &) = delete;

  const std::filesystem::path &path() const { return path_; }
  /// Tensor names, sorted.
  std::vector<std::string> names() const;
  bool contains(const std::string &name) const;
  /// The header entry of \p name; throws naming the file if absent.
  const SafetensorsEntry &entry(const std::string &name) const;
  /// The "__metadata__" strings.
  const std::map<std::string, std::string> &metadata() const {
    return metadata_;
  }

  /// Reads a tensor in its stored dtype (CPU, contiguous).
  at::Tensor readRaw(const std::string &name) const;
  /// Reads a tensor; floating-point dtypes (F16, BF16, F64) are converted to
  /// float32, integer and bool tensors keep their dtype.
  at::Tensor read(const std::string &name) const;
  /// Reads a tensor into \p dst (any device/dtype), which must have the same
  /// shape; throws naming the tensor and both shapes otherwise. A contiguous
  /// CPU \p dst of the stored dtype is read into directly; any other goes
  /// through one host buffer of the stored bytes, converted by copy_.
  /// Returns the size of that buffer (0 when there was none).
  uint64_t readInto(const std::string &name, at::Tensor dst) const;
  /// read() of every tensor.
  NamedTensors readAll() const;

private:
  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t dataStart_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

/// Reads every tensor of \p path (floating point converted to float32).
NamedTensors loadSafetensors(const std::filesystem::path &path);

/// Writes \p tensors to \p path atomically (PATH.tmp, fsync, rename, fsync of
/// the directory). Each tensor is stored in its own dtype, from a contiguous
/// CPU copy; names are sorted and the header is padded to 8 bytes.
void saveSafetensors(const std::filesystem::path &path,
                     const NamedTensors &tensors,
                     const std::map<std::string, std::string> &metadata = {});

} // namespace cac::rt

#endif // CAC_RUNTIME_MODEL_SAFETENSORS_H

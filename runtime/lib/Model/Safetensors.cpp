//===- Safetensors.cpp - Reading and writing .safetensors files -----------===//

#include "cac/Runtime/Model/Safetensors.h"
#include "cac/Runtime/Model/ShapeString.h"
#include "cac/Runtime/Support/FileUtil.h"

#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; this host is not");

namespace fs = std::filesystem;
using nlohmann::json;

namespace cac::rt {

namespace {

/// Headers larger than this are rejected as corrupt (the reference
/// implementation uses the same limit).
constexpr uint64_t kMaxHeaderSize = 100'000'000;

struct DTypeName {
  const char *name;
  at::ScalarType type;
};

constexpr DTypeName kDTypes[] = {
    {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf},
    {"BF16", at::kBFloat16}, {"I64", at::kLong}, {"I32", at::kInt},
    {"I16", at::kShort}, {"I8", at::kChar},    {"U8", at::kByte},
    {"BOOL", at::kBool},
};

[[noreturn]] void fail(const fs::path &path, const std::string &what) {
  throw std::runtime_error("safetensors file '" + path.string() +
                           "': " + what);
}

/// Why a header's dtype cannot be read: quantized formats (F8_E4M3,
/// F8_E5M2, 4- and 6-bit types) are named as such.
std::string unsupportedDTypeReason(const std::string &name) {
  bool quantized = name.rfind("F8", 0) == 0 || name.rfind("F6", 0) == 0 ||
                   name.rfind("F4", 0) == 0 || name == "I4" || name == "U4";
  if (quantized)
    return "quantized dtype '" + name +
           "' is not supported (dequantize the model to BF16, F16 or F32)";
  return "unknown or unsupported dtype '" + name +
         "' (supported: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)";
}

/// Reads exactly \p size bytes at \p offset; false on a short read.
bool preadAll(int fd, void *dst, uint64_t size, uint64_t offset) {
  char *p = static_cast<char *>(dst);
  while (size > 0) {
    ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    p += n;
    size -= static_cast<uint64_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

} // namespace

std::string safetensorsDTypeName(at::ScalarType type) {
  for (const auto &d : kDTypes)
    if (d.type == type)
      return d.name;
  throw std::runtime_error(std::string("safetensors: cannot store dtype ") +
                           c10::toString(type));
}

at::ScalarType safetensorsDTypeFromName(const std::string &name) {
  for (const auto &d : kDTypes)
    if (name == d.name)
      return d.type;
  throw std::runtime_error("safetensors: unsupported dtype '" + name + "'");
}

SafetensorsReader::SafetensorsReader(fs::path path) : path_(std::move(path)) {
  // O_NONBLOCK: a FIFO opens at once (to be refused below) instead of
  // waiting for a writer; a regular file ignores it.
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0)
    fail(path_, std::string("cannot open: ") + std::strerror(errno));
  struct stat st;
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    fail(path_, "not a regular file");
  }
  // From here on the destructor does not run if we throw; close explicitly.
  try {
    uint64_t fileSize = static_cast<uint64_t>(st.st_size);
    if (fileSize < 8)
      fail(path_, "truncated: " + std::to_string(fileSize) +
                      " bytes, shorter than the 8-byte header length");
    unsigned char lenBytes[8];
    if (!preadAll(fd_, lenBytes, 8, 0))
      fail(path_, "cannot read the header length");
    uint64_t headerSize = 0;
    for (int i = 7; i >= 0; --i)
      headerSize = (headerSize << 8) | lenBytes[i];
    if (headerSize > kMaxHeaderSize)
      fail(path_, "bad header length " + std::to_string(headerSize) +
                      " (limit " + std::to_string(kMaxHeaderSize) + ")");
    if (headerSize > fileSize - 8)
      fail(path_, "bad header length " + std::to_string(headerSize) +
                      ": the file has only " + std::to_string(fileSize - 8) +
                      " bytes after it (truncated?)");
    std::string header(headerSize, '\0');
    if (!preadAll(fd_, header.data(), headerSize, 8))
      fail(path_, "cannot read the header");
    dataStart_ = 8 + headerSize;
    uint64_t dataSize = fileSize - dataStart_;

    json j;
    try {
      j = json::parse(header);
    } catch (const json::exception &e) {
      fail(path_, std::string("header is not valid JSON: ") + e.what());
    }
    if (!j.is_object())
      fail(path_, "header is not a JSON object");

    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string &name = it.key();
      const json &v = it.value();
      if (name == "__metadata__") {
        if (!v.is_object())
          fail(path_, "__metadata__ is not an object");
        for (auto m = v.begin(); m != v.end(); ++m) {
          if (!m.value().is_string())
            fail(path_, "__metadata__ value '" + m.key() + "' is not a string");
          metadata_[m.key()] = m.value().get<std::string>();
        }
        continue;
      }
      std::string where = "tensor '" + name + "': ";
      if (!v.is_object())
        fail(path_, where + "header entry is not an object");
      SafetensorsEntry e;
      e.name = name;
      if (!v.contains("dtype") || !v["dtype"].is_string())
        fail(path_, where + "missing string field 'dtype'");
      e.dtypeName = v["dtype"].get<std::string>();
      bool known = false;
      for (const auto &d : kDTypes)
        if (e.dtypeName == d.name) {
          e.dtype = d.type;
          known = true;
        }
      if (!known)
        fail(path_, where + unsupportedDTypeReason(e.dtypeName));
      if (!v.contains("shape") || !v["shape"].is_array())
        fail(path_, where + "missing array field 'shape'");
      uint64_t numel = 1;
      bool overflow = false;
      for (const json &d : v["shape"]) {
        if (!d.is_number_integer() || d.get<int64_t>() < 0)
          fail(path_, where + "shape has a non-integer or negative dimension");
        uint64_t dim = d.get<uint64_t>();
        if (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / dim)
          overflow = true;
        numel *= dim;
        e.shape.push_back(static_cast<int64_t>(dim));
      }
      if (!v.contains("data_offsets") || !v["data_offsets"].is_array() ||
          v["data_offsets"].size() != 2 ||
          !v["data_offsets"][0].is_number_unsigned() ||
          !v["data_offsets"][1].is_number_unsigned())
        fail(path_, where + "'data_offsets' must be two non-negative integers");
      e.begin = v["data_offsets"][0].get<uint64_t>();
      e.end = v["data_offsets"][1].get<uint64_t>();
      if (e.begin > e.end)
        fail(path_, where + "data_offsets [" + std::to_string(e.begin) + ", " +
                        std::to_string(e.end) + "] are reversed");
      if (e.end > dataSize)
        fail(path_, where + "data_offsets [" + std::to_string(e.begin) + ", " +
                        std::to_string(e.end) + "] out of range: the data "
                        "section has " + std::to_string(dataSize) +
                        " bytes (truncated?)");
      uint64_t elem = c10::elementSize(e.dtype);
      if (overflow || numel > std::numeric_limits<uint64_t>::max() / elem ||
          numel * elem != e.end - e.begin)
        fail(path_, where + "shape " + shapeString(e.shape) + " of " +
                        e.dtypeName + " needs " +
                        (overflow ? std::string("too many")
                                  : std::to_string(numel * elem)) +
                        " bytes but data_offsets span " +
                        std::to_string(e.end - e.begin));
      entries_.emplace(name, std::move(e));
    }

    // Tensors must not share bytes.
    std::vector<const SafetensorsEntry *> byOffset;
    for (const auto &[n, e] : entries_)
      if (e.end > e.begin)
        byOffset.push_back(&e);
    std::sort(byOffset.begin(), byOffset.end(),
              [](auto *a, auto *b) { return a->begin < b->begin; });
    for (size_t i = 1; i < byOffset.size(); ++i)
      if (byOffset[i]->begin < byOffset[i - 1]->end)
        fail(path_, "tensors '" + byOffset[i - 1]->name + "' and '" +
                        byOffset[i]->name + "' overlap");
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0)
    ::close(fd_);
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto &[n, e] : entries_)
    out.push_back(n);
  return out;
}

bool SafetensorsReader::contains(const std::string &name) const {
  return entries_.count(name) != 0;
}

const SafetensorsEntry &
SafetensorsReader::entry(const std::string &name) const {
  auto it = entries_.find(name);
  if (it == entries_.end())
    fail(path_, "no tensor named '" + name + "'");
  return it->second;
}

at::Tensor SafetensorsReader::readRaw(const std::string &name) const {
  const SafetensorsEntry &e = entry(name);
  at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
  uint64_t size = e.end - e.begin;
  if (size > 0 && !preadAll(fd_, t.data_ptr(), size, dataStart_ + e.begin))
    fail(path_, "tensor '" + name + "': short read (file changed?)");
  return t;
}

at::Tensor SafetensorsReader::read(const std::string &name) const {
  at::Tensor t = readRaw(name);
  if (at::isFloatingType(t.scalar_type()) && t.scalar_type() != at::kFloat)
    t = t.to(at::kFloat);
  return t;
}

uint64_t SafetensorsReader::readInto(const std::string &name,
                                     at::Tensor dst) const {
  const SafetensorsEntry &e = entry(name);
  if (dst.sizes() != at::IntArrayRef(e.shape))
    fail(path_, "tensor '" + name + "' has shape " + shapeString(e.shape) +
                    ", expected " + shapeString(dst.sizes()));
  uint64_t size = e.end - e.begin;
  if (dst.device().is_cpu() && dst.scalar_type() == e.dtype &&
      dst.is_contiguous()) {
    // Already the stored bytes' layout: no staging buffer.
    if (size > 0 &&
        !preadAll(fd_, dst.data_ptr(), size, dataStart_ + e.begin))
      fail(path_, "tensor '" + name + "': short read (file changed?)");
    // As copy_ would: a rollout copy and autograd see the change.
    dst.unsafeGetTensorImpl()->bump_version();
    return 0;
  }
  c10::NoGradGuard noGrad;
  dst.copy_(readRaw(name));
  return size;
}

NamedTensors SafetensorsReader::readAll() const {
  NamedTensors out;
  for (const auto &[n, e] : entries_)
    out.emplace(n, read(n));
  return out;
}

NamedTensors loadSafetensors(const fs::path &path) {
  return SafetensorsReader(path).readAll();
}

void saveSafetensors(const fs::path &path, const NamedTensors &tensors,
                     const std::map<std::string, std::string> &metadata) {
  json header = json::object();
  if (!metadata.empty())
    header["__metadata__"] = metadata;
  std::vector<at::Tensor> data;
  data.reserve(tensors.size());
  uint64_t offset = 0;
  for (const auto &[name, tensor] : tensors) {
    if (name == "__metadata__")
      throw std::runtime_error("saving '" + path.string() +
                               "': '__metadata__' is not a tensor name");
    if (!tensor.defined())
      throw std::runtime_error("saving '" + path.string() + "': tensor '" +
                               name + "' is undefined");
    std::string dtype;
    try {
      dtype = safetensorsDTypeName(tensor.scalar_type());
    } catch (const std::exception &e) {
      throw std::runtime_error("saving '" + path.string() + "': tensor '" +
                               name + "': " + e.what());
    }
    at::Tensor cpu = tensor.detach().to(at::kCPU).contiguous();
    uint64_t bytes = static_cast<uint64_t>(cpu.numel()) * cpu.element_size();
    header[name] = {{"dtype", dtype},
                    {"shape", cpu.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(std::move(cpu));
  }
  std::string text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned.
  while ((8 + text.size()) % 8 != 0)
    text.push_back(' ');
  writeFileAtomic(path, [&](FileWriter &w) {
    uint64_t n = text.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i)
      len[i] = static_cast<unsigned char>(n >> (8 * i));
    w.write(len, 8);
    w.write(text);
    for (const at::Tensor &t : data)
      if (t.numel() > 0)
        w.write(t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size());
  });
}

} // namespace cac::rt

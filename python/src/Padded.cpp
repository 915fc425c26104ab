//===- Padded.cpp - Right-padded rows to packed tokens, on the CPU --------===//
//
// verl's and TRL's response masks are right-padded: each row is a run of
// ones and then zeros. For such a mask the package packs a [B, T] tensor to
// the runtime's [N] tokens and back by copying each row's prefix, in one
// pass over the rows and without a flat index of the N tokens (what torch's
// boolean indexing builds). A mask with zeros inside a row (observation
// tokens) takes the indexed path of python/cac/_batch.py instead.
//
//===----------------------------------------------------------------------===//

#include "Padded.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace py = pybind11;

namespace {

/// `t` as a CPU matrix whose rows are contiguous, read in place: a slice of
/// a wider tensor (verl's response mask is the attention mask's last T
/// columns) keeps its row stride rather than being copied.
at::Tensor hostMatrix(const at::Tensor &t, const char *what) {
  if (!t.defined() || t.dim() != 2 || !t.device().is_cpu())
    throw py::value_error(std::string(what) + ": expected a CPU [B, T] tensor");
  if (t.stride(1) == 1 || t.size(1) <= 1)
    return t;
  return t.contiguous();
}

/// The distance between two rows of a hostMatrix, in elements.
int64_t rowStride(const at::Tensor &m) {
  return m.size(0) > 1 ? m.stride(0) : m.size(1);
}

/// One row's nonzero entries and its "rises" (a nonzero entry after a
/// zero): the row is right-padded exactly when it has no rise. One
/// branch-free pass that the compiler vectorizes; 1-byte masks (bool,
/// uint8) are read as bytes and counted in byte lanes, 255 entries at a
/// time, which is several times faster than widening each entry to 32 bits.
template <typename T> struct RowScan {
  int64_t count = 0;
  int64_t rises = 0;

  void scan(const T *row, int64_t cols) {
    if (cols > 0)
      count += row[0] != T(0);
    for (int64_t begin = 1; begin < cols; begin += kBlock) {
      int64_t end = std::min(cols, begin + kBlock);
      Lane n = 0, r = 0;
      for (int64_t t = begin; t < end; ++t) {
        Lane set = row[t] != T(0);
        n += set;
        r += set & Lane(row[t - 1] == T(0));
      }
      count += n;
      rises += r;
    }
  }

private:
  using Lane = std::conditional_t<sizeof(T) == 1, uint8_t, int32_t>;
  static constexpr int64_t kBlock = sizeof(T) == 1 ? 255 : (1 << 30);
};

/// Per row: the number of nonzero entries, and whether they are the row's
/// first ones (a right-padded row).
template <typename T>
void countRows(const T *m, int64_t rows, int64_t cols, int64_t stride,
               int64_t *counts, std::atomic<bool> &prefix) {
  at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
    bool allPrefix = true;
    for (int64_t b = begin; b < end; ++b) {
      RowScan<T> row;
      row.scan(m + b * stride, cols);
      counts[b] = row.count;
      allPrefix = allPrefix && row.rises == 0;
    }
    if (!allPrefix)
      prefix.store(false, std::memory_order_relaxed);
  });
}

py::tuple maskRows(const at::Tensor &maskIn) {
  at::Tensor mask = hostMatrix(maskIn, "mask");
  at::Tensor counts = at::empty({mask.size(0)}, at::kLong);
  std::atomic<bool> prefix{true};
  {
    py::gil_scoped_release release;
    int64_t rows = mask.size(0), cols = mask.size(1), stride = rowStride(mask);
    int64_t *c = counts.data_ptr<int64_t>();
    if (mask.element_size() == 1) {
      // bool, uint8 and int8 alike: a byte is set when it is not 0.
      countRows(static_cast<const uint8_t *>(mask.data_ptr()), rows, cols,
                stride, c, prefix);
    } else {
      AT_DISPATCH_ALL_TYPES_AND2(
          at::kHalf, at::kBFloat16, mask.scalar_type(), "mask_rows", [&] {
            countRows(mask.data_ptr<scalar_t>(), rows, cols, stride, c, prefix);
          });
    }
  }
  return py::make_tuple(counts, prefix.load());
}

/// Row starts in the packed tokens (an exclusive prefix sum of counts).
std::vector<int64_t> rowStarts(const at::Tensor &counts, int64_t rows) {
  if (!counts.defined() || counts.dim() != 1 || counts.size(0) != rows ||
      counts.scalar_type() != at::kLong || !counts.device().is_cpu())
    throw py::value_error("counts: expected CPU int64 [B] matching the rows");
  const int64_t *c = counts.data_ptr<int64_t>();
  std::vector<int64_t> starts(rows + 1, 0);
  for (int64_t b = 0; b < rows; ++b)
    starts[b + 1] = starts[b] + c[b];
  return starts;
}

/// `out` when the caller gave one (checked to hold `shape` of `like`'s
/// dtype on the CPU, contiguous), else a new tensor.
at::Tensor outputTensor(const std::optional<at::Tensor> &out,
                        at::IntArrayRef shape, const at::Tensor &like,
                        const char *what) {
  if (!out)
    return at::empty(shape, like.options());
  const at::Tensor &o = *out;
  if (!o.device().is_cpu() || o.scalar_type() != like.scalar_type() ||
      o.sizes() != shape || !o.is_contiguous())
    throw py::value_error(std::string(what) + ": expected a contiguous CPU " +
                          std::string(c10::toString(like.scalar_type())) +
                          " tensor of shape " + c10::str(shape) + ", got " +
                          std::string(c10::toString(o.scalar_type())) + " " +
                          c10::str(o.sizes()) + " on " + o.device().str() +
                          (o.is_contiguous() ? "" : " (not contiguous)"));
  return o;
}

at::Tensor packRows(const at::Tensor &paddedIn, const at::Tensor &counts) {
  at::Tensor padded = hostMatrix(paddedIn, "padded tensor");
  int64_t rows = padded.size(0), stride = rowStride(padded);
  std::vector<int64_t> starts = rowStarts(counts, rows);
  const int64_t *c = counts.data_ptr<int64_t>();
  at::Tensor out = at::empty({starts[rows]}, padded.options());
  size_t size = padded.element_size();
  const char *src = static_cast<const char *>(padded.data_ptr());
  char *dst = static_cast<char *>(out.data_ptr());
  py::gil_scoped_release release;
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b)
      std::memcpy(dst + starts[b] * size, src + b * stride * size, c[b] * size);
  });
  return out;
}

at::Tensor unpackRows(const at::Tensor &packed, const at::Tensor &counts,
                      int64_t cols, const std::optional<at::Tensor> &into) {
  if (!packed.defined() || packed.dim() != 1 || !packed.device().is_cpu())
    throw py::value_error("packed tensor: expected a CPU [N] tensor");
  at::Tensor flat = packed.contiguous();
  int64_t rows = counts.defined() && counts.dim() == 1 ? counts.size(0) : -1;
  std::vector<int64_t> starts = rowStarts(counts, rows);
  if (starts[rows] != flat.size(0))
    throw py::value_error("packed tensor: " + std::to_string(flat.size(0)) +
                          " tokens, the mask has " +
                          std::to_string(starts[rows]));
  const int64_t *c = counts.data_ptr<int64_t>();
  at::Tensor out = outputTensor(into, {rows, cols}, flat, "unpack_rows out");
  size_t size = flat.element_size();
  const char *src = static_cast<const char *>(flat.data_ptr());
  char *dst = static_cast<char *>(out.data_ptr());
  py::gil_scoped_release release;
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      char *row = dst + b * cols * size;
      std::memcpy(row, src + starts[b] * size, c[b] * size);
      // Zero bits are 0 in every dtype the package returns.
      std::memset(row + c[b] * size, 0, (cols - c[b]) * size);
    }
  });
  return out;
}

} // namespace

void bindPadded(py::module &m) {
  m.def("mask_rows", &maskRows, py::arg("mask"),
        "(counts int64 [B], right_padded) of a CPU [B, T] mask.");
  m.def("pack_rows", &packRows, py::arg("padded"), py::arg("counts"),
        "The first counts[b] entries of each row of a CPU [B, T] tensor, "
        "concatenated to [N].");
  m.def("unpack_rows", &unpackRows, py::arg("packed"), py::arg("counts"),
        py::arg("t"), py::arg("out") = std::nullopt,
        "The inverse of pack_rows: [B, t] with 0 after each row's tokens "
        "(into `out` when given).");
}

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

#include <atomic>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace py = pybind11;

namespace {

at::Tensor hostMatrix(const at::Tensor &t, const char *what) {
  if (!t.defined() || t.dim() != 2 || !t.device().is_cpu())
    throw py::value_error(std::string(what) + ": expected a CPU [B, T] tensor");
  return t.contiguous();
}

/// Per row: the number of nonzero entries, and whether they are the row's
/// first ones (a right-padded row).
template <typename T>
void countRows(const at::Tensor &mask, int64_t *counts,
               std::atomic<bool> &prefix) {
  const T *m = mask.data_ptr<T>();
  int64_t cols = mask.size(1);
  at::parallel_for(0, mask.size(0), 64, [&](int64_t begin, int64_t end) {
    bool allPrefix = true;
    for (int64_t b = begin; b < end; ++b) {
      const T *row = m + b * cols;
      // Two branch-free passes that the compiler vectorizes: the count,
      // then whether the first `count` entries are all set.
      // (32-bit counts, as wide as a float's lanes; rows are shorter
      // than 2^31, checked by the caller.)
      int32_t n = 0;
      for (int64_t t = 0; t < cols; ++t)
        n += row[t] != T(0);
      int32_t set = 0;
      for (int32_t t = 0; t < n; ++t)
        set += row[t] != T(0);
      counts[b] = n;
      allPrefix = allPrefix && set == n;
    }
    if (!allPrefix)
      prefix.store(false, std::memory_order_relaxed);
  });
}

py::tuple maskRows(const at::Tensor &maskIn) {
  at::Tensor mask = hostMatrix(maskIn, "mask");
  if (mask.size(1) > INT32_MAX)
    throw py::value_error("mask: rows of 2^31 or more tokens");
  at::Tensor counts = at::empty({mask.size(0)}, at::kLong);
  std::atomic<bool> prefix{true};
  {
    py::gil_scoped_release release;
    AT_DISPATCH_ALL_TYPES_AND3(at::kBool, at::kHalf, at::kBFloat16,
                               mask.scalar_type(),
                               "mask_rows", [&] {
                                 countRows<scalar_t>(
                                     mask, counts.data_ptr<int64_t>(), prefix);
                               });
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

at::Tensor packRows(const at::Tensor &paddedIn, const at::Tensor &counts) {
  at::Tensor padded = hostMatrix(paddedIn, "padded tensor");
  int64_t rows = padded.size(0), cols = padded.size(1);
  std::vector<int64_t> starts = rowStarts(counts, rows);
  const int64_t *c = counts.data_ptr<int64_t>();
  at::Tensor out = at::empty({starts[rows]}, padded.options());
  size_t size = padded.element_size();
  const char *src = static_cast<const char *>(padded.data_ptr());
  char *dst = static_cast<char *>(out.data_ptr());
  py::gil_scoped_release release;
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b)
      std::memcpy(dst + starts[b] * size, src + b * cols * size, c[b] * size);
  });
  return out;
}

at::Tensor unpackRows(const at::Tensor &packed, const at::Tensor &counts,
                      int64_t cols) {
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
  at::Tensor out = at::empty({rows, cols}, flat.options());
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
        py::arg("t"),
        "The inverse of pack_rows: [B, t] with 0 after each row's tokens.");
}

//===- Device.cpp - The --device value of cac-run -------------------------===//
//
// Apart from the trainer, so that cac-run's command line (and its fuzz
// target, test/fuzz) can check a device without the training loop.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Train/Trainer.h"

#include <torch/cuda.h>

#include <optional>

namespace cac::rt::train {

std::string checkDevice(const std::string &spec, c10::Device &out) {
  std::optional<c10::Device> d;
  try {
    d.emplace(spec);
  } catch (const std::exception &) {
  }
  if (!d || (!d->is_cpu() && !d->is_cuda()) || (d->is_cpu() && d->has_index()))
    return "--device expects cpu, cuda or cuda:N, got '" + spec + "'";
  if (d->is_cuda()) {
    if (!torch::cuda::is_available())
      return "--device " + spec +
             ": this LibTorch sees no CUDA device (Debian's libtorch is "
             "CPU-only; build cac-run against a CUDA LibTorch on a GPU "
             "machine, docs/training.md)";
    int64_t n = static_cast<int64_t>(torch::cuda::device_count());
    if (d->has_index() && d->index() >= n)
      return "--device " + spec + ": this machine has " + std::to_string(n) +
             " CUDA device" + (n == 1 ? "" : "s");
    if (!d->has_index())
      d.emplace(c10::kCUDA, 0);
  }
  out = *d;
  return {};
}

} // namespace cac::rt::train

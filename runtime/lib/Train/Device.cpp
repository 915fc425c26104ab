//===- Device.cpp - The --device value of cac-run -------------------------===//
//
// Apart from the trainer, so that cac-run's command line (and its fuzz
// target, test/fuzz) can check a device, and pick a data-parallel worker's,
// without the training loop.
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

std::optional<c10::Device> rankGpu(int localRank, int64_t gpus, bool share) {
  if (localRank < 0 || gpus < 1 || (localRank >= gpus && !share))
    return std::nullopt;
  return c10::Device(c10::kCUDA,
                     static_cast<c10::DeviceIndex>(localRank % gpus));
}

std::string checkWorkerDevice(const std::string &spec, int localRank,
                              bool share, c10::Device &out) {
  std::string err = checkDevice(spec, out);
  if (!err.empty() || spec != "cuda")
    return err;
  int64_t n = static_cast<int64_t>(torch::cuda::device_count());
  std::optional<c10::Device> gpu = rankGpu(localRank, n, share);
  if (!gpu)
    return "local rank " + std::to_string(localRank) +
           " has no GPU of its own: this machine has " + std::to_string(n) +
           " CUDA device" + (n == 1 ? "" : "s") +
           " and NCCL needs one per rank (Gloo workers, --workers N --device "
           "cuda, may share one)";
  out = *gpu;
  return {};
}

} // namespace cac::rt::train

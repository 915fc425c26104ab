//===- cac-bench-gpu.cpp - Compiled GPU kernels vs verl's loops -----------===//
//
// cac-bench-gpu --bundles DIR [--methods gae,sae,grpo] [--shapes 4096x4096,..]
//               [--iters K] [--device cuda|cpu] [--variants thread,b128,..]
//
// For each method and batch shape B x T (every sequence T tokens long, groups
// of 8 sequences, for tree estimators a root per group and a leaf per
// sequence), measured in one run on one device:
//   default  DIR/NAME, the bundle as `cac compile --bundle` writes it: its seq
//            kernels run one block of 128 threads per sequence, 4 tokens per
//            thread in a tile, striped in loops without a scan and blocked
//            in loops with one, each tile asking L2 for the next one's
//            tokens (docs/pipeline.md);
//   variants DIR/NAME-V for each V of --variants that was staged, one row
//            each (scripts/gpu/stage.sh): `thread`
//            (`--seq-block 0`: one thread per sequence), `b64`/`b256`
//            (--seq-block), `i2`/`i8` (--seq-items), `striped` (--seq-layout
//            striped), `nopf` (--seq-prefetch=false), `blocked256` (256
//            threads, blocked, no prefetch), `nofg` (--fuse-groups=false:
//            group statistics in a group kernel of their own), `pfin`
//            (--seq-prefetch-written=false) and `split`/`split2k`
//            (--seq-split 1024/2048: few long sequences over several
//            blocks each), to choose the defaults on a GPU;
//   loop     verl's loop for the methods verl has (gae, gae_dense:
//            compute_gae_advantage_return, one column operation per token;
//            grpo, rloo: per-sample loops over the group scores), on the
//            same device; from C++, so without Python's per-call overhead;
// their ratios, the bytes of inputs and outputs per token, each bundle's
// throughput against the device's copy bandwidth measured by the same
// program, and the largest difference of the device's outputs from the
// bundle's host.so on the CPU (and of verl's advantage from the kernels').
// Two times per bundle: `call ms`, the median over --iters runs of
// BundleEstimator::run (what cac-run calls: inputs already on the device,
// one launch per kernel), each synchronized before and after, so that it
// includes the host's work and one round trip; and `device ms`, the GPU's
// time per call from CUDA events around K calls issued back to back (median
// of several such runs; K such that they take about 1 ms), as a kernel
// benchmark times a kernel: the host's launches overlap the previous call's
// kernels. The copy bandwidth is timed both ways too, and each way's
// throughput is given against the same way's copy bandwidth. Prints a
// Markdown table for docs/benchmarks.md. A
// benchmark, not a test; `--device cpu` runs the same program on the CPU
// (host.so against itself) to check the program without a GPU.
//
// scripts/gpu/stage.sh compiles the bundles (on a machine
// with the compiler); `scripts/gpu/check.sh bench` builds and runs it on a GPU
// machine.
//
//===----------------------------------------------------------------------===//

#include "../common/BenchCommon.h"
#include "cac/Runtime/Kernels/Bundle.h"
#include "cac/Runtime/Kernels/CudaDriver.h"

#include <torch/cuda.h>

#include <cstdio>
#include <optional>
#include <sys/stat.h>

using namespace cac::rt;
using namespace cac::bench;

namespace {

bool isDir(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

/// The largest |a - b| over the outputs both maps have.
double maxDiff(const TensorMap &a, const TensorMap &b) {
  double d = 0.0;
  for (const auto &[k, v] : a) {
    auto it = b.find(k);
    if (it == b.end() || it->second.numel() != v.numel())
      continue;
    d = std::max(d, (v.to(at::kCPU, at::kDouble) -
                     it->second.to(at::kCPU, at::kDouble))
                        .abs()
                        .max()
                        .item<double>());
  }
  return d;
}

/// Device time per call of `fn`, in ms, from two CUDA events recorded on
/// the legacy default stream (LibTorch's default, which the bundles launch
/// on) around `k` calls with no host synchronisation between them; the
/// median over `reps` such runs. 0 when the driver has no event API.
double deviceMs(int reps, int k, const std::function<void()> &fn) {
  const CudaDriver &d = CudaDriver::get();
  if (!d.cuEventCreate || !d.cuEventRecord || !d.cuEventSynchronize ||
      !d.cuEventElapsedTime || !d.cuEventDestroy)
    return 0.0;
  ScopedContext scope(d.primaryContext(0));
  cu::Event start = nullptr, stop = nullptr;
  d.check(d.cuEventCreate(&start, 0), "cuEventCreate");
  d.check(d.cuEventCreate(&stop, 0), "cuEventCreate");
  fn(); // warm-up
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    torch::cuda::synchronize();
    d.check(d.cuEventRecord(start, nullptr), "cuEventRecord");
    for (int i = 0; i < k; ++i)
      fn();
    d.check(d.cuEventRecord(stop, nullptr), "cuEventRecord");
    d.check(d.cuEventSynchronize(stop), "cuEventSynchronize");
    float total = 0.0f;
    d.check(d.cuEventElapsedTime(&total, start, stop), "cuEventElapsedTime");
    ms.push_back(double(total) / k);
  }
  d.cuEventDestroy(start);
  d.cuEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

/// Calls per event-timed run: about 1 ms of work, at least 1, at most 20.
int callsPerRun(double callMs) {
  return int(std::clamp(1.0 / std::max(callMs, 1e-3), 1.0, 20.0));
}

std::string fmt(const char *f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

} // namespace

static int run(int argc, char **argv) {
  std::string bundlesDir, deviceName = "cuda";
  std::vector<std::string> variants = {"thread",     "b256",    "nopf",
                                       "blocked256", "striped", "b64",
                                       "i2",         "i8",      "nofg",
                                       "pfin",       "split",   "split2k"};
  CommonOptions o;
  o.methods = {"gae", "sae", "grpo", "gae_dense", "rloo"};
  o.shapes = {{4096, 4096}, {256, 8192}, {256, 4096}};
  o.iters = 20;
  bool ok = parseArgs(argc, argv, o, [&](const std::string &a,
                                         const std::string &v) {
    if (a == "--bundles")
      bundlesDir = v;
    else if (a == "--device")
      deviceName = v;
    else if (a == "--variants")
      variants = split(v, ',');
    else
      return false;
    return true;
  });
  if (!ok)
    return 2;
  const std::vector<std::string> &methods = o.methods;
  const std::vector<Shape> &shapes = o.shapes;
  const int iters = o.iters;
  if (bundlesDir.empty() || (deviceName != "cuda" && deviceName != "cpu")) {
    std::fprintf(stderr,
                 "usage: cac-bench-gpu --bundles DIR [--methods a,b] "
                 "[--shapes BxT,..] [--iters K] [--device cuda|cpu] "
                 "[--variants thread,b128,..]\n"
                 "(bench/gpu/run.sh compiles the bundles and runs it)\n");
    return 2;
  }
  const bool cuda = deviceName == "cuda";
  if (cuda && !torch::cuda::is_available()) {
    std::fprintf(stderr, "cac-bench-gpu: LibTorch sees no CUDA device (this "
                         "LibTorch is CPU-only or no GPU is present); "
                         "--device cpu runs the program on the CPU\n");
    return 1;
  }
  const at::Device device = cuda ? at::Device(at::kCUDA, 0) : at::kCPU;
  std::function<void()> sync;
  if (cuda)
    sync = [] { torch::cuda::synchronize(); };
  const at::TensorOptions onDevice = at::TensorOptions().device(device);

  // Copy bandwidth (bytes read + written per second) of a 256 MiB copy of
  // floats, timed per call (host clock, synchronized) and on the device.
  double bw = copyBandwidth(iters, onDevice, sync), deviceBw = bw;
  if (cuda) {
    const int64_t n = int64_t(64) << 20;
    at::Tensor a = at::rand({n}, onDevice.dtype(at::kFloat)),
               c = at::empty({n}, onDevice.dtype(at::kFloat));
    double ms = deviceMs(std::max(3, iters / 3), 10, [&] { c.copy_(a); });
    if (ms > 0.0)
      deviceBw = 2.0 * double(n) * 4.0 / (ms * 1e-3);
    // Writing alone (a fill), for the methods that mostly write (GRPO's
    // broadcast): context, not the denominator.
    double fillMs =
        deviceMs(std::max(3, iters / 3), 10, [&] { c.fill_(1.0f); });
    if (fillMs > 0.0)
      std::printf("device %s: fill bandwidth %.0f GB/s device time (write "
                  "only, 256 MiB)\n",
                  device.str().c_str(),
                  double(n) * 4.0 / (fillMs * 1e-3) / 1e9);
  }
  std::printf("device %s: copy bandwidth %.0f GB/s per call, %.0f GB/s device "
              "time (read + write, 256 MiB)\n\n",
              device.str().c_str(), bw / 1e9, deviceBw / 1e9);
  std::printf("| method | B x T | variant | kernels | call ms | device ms | "
              "vs default | loop ms | loop / this | bytes/token | GB/s | "
              "of copy bw | of copy bw (call) | max diff vs CPU |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | "
              "--- | --- | --- | --- |\n");

  for (const std::string &name : methods) {
    // The default bundle first, then each variant that was staged.
    std::vector<std::pair<std::string, BundleEstimator>> bundles;
    bundles.emplace_back("default",
                         BundleEstimator::load(bundlesDir + "/" + name));
    for (const std::string &v : variants)
      if (isDir(bundlesDir + "/" + name + "-" + v))
        bundles.emplace_back(
            v, BundleEstimator::load(bundlesDir + "/" + name + "-" + v));
    const Manifest &m = bundles.front().second.manifest();
    for (Shape sh : shapes) {
      const int64_t B = sh.B, T = sh.T, N = B * T, G = (B + 7) / 8;
      std::mt19937_64 rng(1234);
      PackedBatch cpuBatch =
          PackedBatch::fromLengths(std::vector<int64_t>(size_t(B), T));
      cpuBatch.setGroups(at::arange(B, at::kLong).div(8, "floor"));
      // Tree estimators: per group a root and a leaf per sequence.
      if (m.needsTree)
        setBenchTree(cpuBatch, benchTree(B, T));
      PackedBatch batch = cpuBatch.to(device);
      ParamMap params;
      for (const ParamSpec &ps : m.params)
        if (!ps.defaultValue)
          params[ps.name] = ps.name == "lambda" ? 0.95 : 1.0;
      TensorMap cpuInputs, inputs;
      for (const BufferSpec &bs : m.buffers) {
        if (bs.role != BufferRole::Input)
          continue;
        bool perToken = bs.domain == Domain::Token || bs.domain == Domain::Seg;
        std::vector<double> v = randomInput(bs, perToken ? N : B, rng);
        cpuInputs[bs.name] = at::tensor(v, at::kDouble).to(at::kFloat);
        inputs[bs.name] = cpuInputs[bs.name].to(device);
      }
      // Agreement with the bundle's CPU code (host.so).
      TensorMap cpuOut = bundles.front().second.run(cpuInputs, cpuBatch, params);

      std::optional<double> loopMs;
      at::Tensor loopAdv;
      if (hasVerlLoop(name))
        loopMs = medianMs(
            std::max(1, iters / 5),
            [&] { loopAdv = runVerlLoop(name, inputs, B, T); }, sync);

      double defaultMs = 0.0;
      for (auto &[variant, est] : bundles) {
        TensorMap out;
        auto call = [&] { out = est.run(inputs, batch, params); };
        double ms = medianMs(iters, call, sync);
        double devMs =
            cuda ? deviceMs(std::max(3, iters / 3), callsPerRun(ms), call)
                 : 0.0;
        if (devMs <= 0.0)
          devMs = ms; // the CPU, or a driver without events
        if (variant == "default")
          defaultMs = devMs;
        double diff = maxDiff(out, cpuOut);
        // The baseline computes what the kernels compute.
        if (loopMs)
          diff = std::max(diff, (loopAdv.to(at::kCPU, at::kDouble) -
                                 out.at("adv").to(at::kCPU, at::kDouble))
                                    .abs()
                                    .max()
                                    .item<double>());
        double bytes = ioBytes(m, N, B, G, m.needsTree ? G + B : 0);
        double gbps = bytes / (devMs * 1e-3) / 1e9;
        double callGbps = bytes / (ms * 1e-3) / 1e9;
        std::printf(
            "| %s | %lld x %lld | %s | %zu | %.3f | %.3f | %s | %s | %s | "
            "%.1f | %.0f | %.1f%% | %.1f%% | %.1e |\n",
            name.c_str(), (long long)B, (long long)T, variant.c_str(),
            est.manifest().kernels.size(), ms, devMs,
            fmt("%.2fx", devMs / defaultMs).c_str(),
            loopMs ? fmt("%.2f", *loopMs).c_str() : "—",
            loopMs ? fmt("%.0fx", *loopMs / ms).c_str() : "—",
            bytes / double(N), gbps, 100.0 * gbps * 1e9 / deviceBw,
            100.0 * callGbps * 1e9 / bw, diff);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  return mainOf("cac-bench-gpu", run, argc, argv);
}

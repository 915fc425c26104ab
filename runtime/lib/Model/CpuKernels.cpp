//===- CpuKernels.cpp - Which CPU kernels LibTorch runs on ----------------===//

#include "cac/Runtime/Model/CpuKernels.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>

#include <dlfcn.h>

#include <sstream>

namespace cac::rt {

namespace {

/// The value of at::show_config()'s "CPU capability usage:" line.
std::string atenCapability() {
  std::istringstream in(at::show_config());
  const std::string key = "CPU capability usage:";
  for (std::string line; std::getline(in, line);) {
    auto at = line.find(key);
    if (at == std::string::npos)
      continue;
    std::string v = line.substr(at + key.size());
    size_t b = v.find_first_not_of(' ');
    return b == std::string::npos ? "unknown" : v.substr(b);
  }
  return "unknown";
}

/// OpenBLAS's core name, looked up in the process (LibTorch's BLAS is
/// whichever libblas.so.3 the system provides; no link-time dependency).
std::string blasCore() {
  using CoreName = char *(*)();
  auto fn = reinterpret_cast<CoreName>(
      ::dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (!fn)
    return "BLAS unknown (not OpenBLAS)";
  const char *name = fn();
  return std::string("OpenBLAS ") + (name ? name : "unknown");
}

} // namespace

bool setCpuThreads(int n, bool blas) {
  at::set_num_threads(n);
  if (!blas)
    return false;
  using SetThreads = void (*)(int);
  auto fn = reinterpret_cast<SetThreads>(
      ::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (!fn)
    return false;
  fn(n);
  return true;
}

std::string cpuKernelSet() {
  // Fixed for the process: both are chosen when the libraries load.
  static const std::string set = "ATen " + atenCapability() + ", " + blasCore();
  using GetThreads = int (*)();
  static const auto threads = reinterpret_cast<GetThreads>(
      ::dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (!threads)
    return set;
  int n = threads();
  return set + ", " + std::to_string(n) + (n == 1 ? " BLAS thread" : " BLAS threads");
}

} // namespace cac::rt

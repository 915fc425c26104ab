//===- cpu-module-test.cpp - host.so loading and threaded launches --------===//

#include "cac/Runtime/Kernels/CpuModule.h"
#include "cac/Runtime/Kernels/Manifest.h"
#include "test-bundles.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <vector>

using namespace cac::rt;
using namespace cac::rt::test;

namespace {

TEST(CpuModule, ResolvesKernels) {
  auto m = CpuModule::load(hostSoPath(), {"disc_k0", "gmean_k1"});
  EXPECT_EQ(m->numKernels(), 2u);
  EXPECT_EQ(m->kernelName(1), "gmean_k1");
  EXPECT_NE(m->function(0), nullptr);
}

TEST(CpuModule, MissingSymbolNamesKernelAndFile) {
  try {
    CpuModule::load(hostSoPath(), {"disc_k0", "nope_k7"});
    FAIL() << "no error";
  } catch (const BundleError &e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(hostSoPath() + ": kernel 'nope_k7' of the manifest is "
                                      "not exported"),
              std::string::npos)
        << msg;
  }
}

TEST(CpuModule, MissingFile) {
  try {
    CpuModule::load("/nonexistent/host.so", {"k"});
    FAIL() << "no error";
  } catch (const BundleError &e) {
    EXPECT_NE(std::string(e.what()).find(
                  "/nonexistent/host.so: cannot load the host kernels"),
              std::string::npos)
        << e.what();
  }
}

/// Runs units_k0 (out[u] += 1) over `units` with `threads`; every unit must be
/// covered exactly once and the caller's range values left untouched.
void checkUnitsCoveredOnce(int64_t units, int threads) {
  auto m = CpuModule::load(hostSoPath(), {"units_k0"});
  std::vector<float> out(units, 0.0f);
  int64_t sizes[6] = {units, 1, 0, 0, 0, 0};
  int64_t begin = -7, end = -7; // must not be read or written
  void *nullArray = nullptr;
  float *outPtr = out.data();
  std::vector<void *> params = {&begin,     &end,       &sizes[0],  &sizes[1],
                                &sizes[2],  &sizes[3],  &nullArray, &nullArray,
                                &nullArray, &nullArray, &nullArray, &nullArray,
                                &outPtr};
  m->launch(0, units, params.data(), params.size(), threads);
  for (int64_t u = 0; u < units; ++u)
    ASSERT_EQ(out[u], 1.0f)
        << "unit " << u << " of " << units << ", " << threads << " threads";
  EXPECT_EQ(begin, -7);
  EXPECT_EQ(end, -7);
}

TEST(CpuModule, SplitsGridsOverThreads) {
  for (int threads : {1, 2, 3, 8})
    for (int64_t units : {0, 1, 2, 5, 64, 1000, 4097})
      checkUnitsCoveredOnce(units, threads);
  EXPECT_GE(cpuPoolThreads(), 1);
}

TEST(CpuModule, ConcurrentCallersShareThePool) {
  std::vector<std::thread> callers;
  for (int i = 0; i < 4; ++i)
    callers.emplace_back([] {
      for (int r = 0; r < 20; ++r)
        checkUnitsCoveredOnce(333, 4);
    });
  for (auto &t : callers)
    t.join();
}

} // namespace

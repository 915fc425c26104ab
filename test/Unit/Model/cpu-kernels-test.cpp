//===- cpu-kernels-test.cpp - CPU kernel set and thread counts ------------===//
//
// cac-run names the CPU kernels it runs on, and `--threads N` must reach
// OpenBLAS's own thread pool as well as ATen's (two data-parallel workers of
// one thread would otherwise run one BLAS thread per core each).
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Model/CpuKernels.h"

#include <ATen/Parallel.h>

#include <gtest/gtest.h>

#include <dlfcn.h>

using namespace cac::rt;

TEST(CpuKernels, NamesAtenAndTheBlas) {
  std::string set = cpuKernelSet();
  EXPECT_EQ(set.rfind("ATen ", 0), 0u) << set;
  EXPECT_NE(set.find(", "), std::string::npos) << set;
  EXPECT_EQ(set, cpuKernelSet()); // fixed for the process
}

TEST(CpuKernels, ThreadsReachOpenBlas) {
  using GetThreads = int (*)();
  auto blasThreads = reinterpret_cast<GetThreads>(
      ::dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  int before = at::get_num_threads();
  int blasBefore = blasThreads ? blasThreads() : 0;
  bool blas = setCpuThreads(1, true);
  EXPECT_EQ(at::get_num_threads(), 1);
  EXPECT_EQ(blas, blasThreads != nullptr);
  if (blasThreads) {
    EXPECT_EQ(blasThreads(), 1);
    EXPECT_NE(cpuKernelSet().find(", 1 BLAS thread"), std::string::npos)
        << cpuKernelSet();
  }
  // ATen only: OpenBLAS keeps its count.
  EXPECT_FALSE(setCpuThreads(2, false));
  EXPECT_EQ(at::get_num_threads(), 2);
  if (blasThreads) {
    EXPECT_EQ(blasThreads(), 1);
  }
  setCpuThreads(before, false);
  if (blasThreads) { // restore OpenBLAS's count (ATen's is unchanged)
    setCpuThreads(blasBefore, true);
    setCpuThreads(before, false);
  }
}

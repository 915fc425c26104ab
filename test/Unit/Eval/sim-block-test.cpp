//===- sim-block-test.cpp - The GPU simulation's block scheduler ----------===//
//
// `cac eval --backend gpu-sim` runs a block kernel's threads cooperatively
// (cac::simulateBlock): a barrier returns only when every thread of the
// block has reached it, and threads that reach different barriers fail the
// run.
//
//===----------------------------------------------------------------------===//

#include "cac/Eval/Runner.h"

#include "llvm/Support/Error.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

namespace {

std::string errorText(llvm::Error e) {
  return e ? llvm::toString(std::move(e)) : std::string();
}

// Each thread writes its slot, waits, then reads its neighbours' slots: with
// a barrier that does not wait for everyone, some thread reads a slot not
// written yet. Repeated over many rounds (as a kernel's tiles and units).
TEST(SimBlock, BarrierWaitsForEveryThread) {
  for (int64_t n : {1, 2, 7, 32, 256}) {
    SCOPED_TRACE("threads " + std::to_string(n));
    std::vector<int64_t> slot(size_t(n), -1), seen(size_t(n), 0);
    const int rounds = 20;
    std::string e = errorText(cac::simulateBlock(n, [&](int64_t tid,
                                                        void *barrier) {
      for (int r = 0; r < rounds; ++r) {
        slot[size_t(tid)] = r * 1000 + tid;
        cac::simulationBarrier(barrier);
        int64_t next = (tid + 1) % n, prev = (tid + n - 1) % n;
        if (slot[size_t(next)] == r * 1000 + next &&
            slot[size_t(prev)] == r * 1000 + prev)
          ++seen[size_t(tid)];
        cac::simulationBarrier(barrier); // nobody writes round r+1 early
      }
    }));
    EXPECT_EQ(e, "");
    for (int64_t t = 0; t < n; ++t)
      EXPECT_EQ(seen[size_t(t)], rounds) << "thread " << t;
  }
}

// Every thread runs to its end, with its own stack (locals survive the
// switches at each barrier).
TEST(SimBlock, ThreadsKeepTheirLocalsAcrossBarriers) {
  const int64_t n = 64;
  std::vector<int64_t> sums(size_t(n), 0);
  std::string e = errorText(
      cac::simulateBlock(n, [&](int64_t tid, void *barrier) {
        int64_t local[16];
        for (int k = 0; k < 16; ++k)
          local[k] = tid * 16 + k;
        for (int k = 0; k < 5; ++k)
          cac::simulationBarrier(barrier);
        sums[size_t(tid)] = std::accumulate(local, local + 16, int64_t(0));
      }));
  EXPECT_EQ(e, "");
  for (int64_t t = 0; t < n; ++t)
    EXPECT_EQ(sums[size_t(t)], 256 * t + 120) << "thread " << t;
}

// A warp barrier (inside a shuffle) waits for the caller's warp only: warp 0
// exchanges values through several warp barriers while warp 1 already waits
// at the block barrier, as on the GPU, where a shuffle does not synchronize
// other warps. Lanes read their warp-mates' writes after it.
TEST(SimBlock, WarpBarrierWaitsForTheWarpOnly) {
  const int64_t n = 64;
  std::vector<int64_t> slot(size_t(n), -1), got(size_t(n), -1);
  std::string e = errorText(
      cac::simulateBlock(n, [&](int64_t tid, void *barrier) {
        if (tid < 32)
          for (int r = 0; r < 4; ++r) {
            slot[size_t(tid)] = r * 100 + tid;
            cac::simulationWarpBarrier(barrier);
            got[size_t(tid)] = slot[size_t(tid ^ 1)];
            cac::simulationWarpBarrier(barrier);
          }
        cac::simulationBarrier(barrier);
      }));
  EXPECT_EQ(e, "");
  for (int64_t t = 0; t < 32; ++t)
    EXPECT_EQ(got[size_t(t)], 300 + (t ^ 1)) << "lane " << t;
  // A block smaller than a warp is one warp.
  EXPECT_EQ(errorText(cac::simulateBlock(8, [&](int64_t, void *barrier) {
              cac::simulationWarpBarrier(barrier);
            })),
            "");
  // A warp split between a warp barrier and a block barrier never meets.
  EXPECT_EQ(errorText(cac::simulateBlock(64, [&](int64_t tid, void *barrier) {
              if (tid == 5)
                cac::simulationBarrier(barrier);
              else
                cac::simulationWarpBarrier(barrier);
            })),
            "the threads of a block reached different barriers");
}

// A thread that returns while the others wait at a barrier, or that waits at
// one barrier more than the others: undefined on a GPU, an error here.
TEST(SimBlock, DifferentBarriersAreAnError) {
  std::string early = errorText(
      cac::simulateBlock(8, [&](int64_t tid, void *barrier) {
        if (tid == 3)
          return;
        cac::simulationBarrier(barrier);
      }));
  EXPECT_EQ(early, "the threads of a block reached different barriers");
  std::string extra = errorText(
      cac::simulateBlock(8, [&](int64_t tid, void *barrier) {
        cac::simulationBarrier(barrier);
        if (tid == 5)
          cac::simulationBarrier(barrier);
      }));
  EXPECT_EQ(extra, "the threads of a block reached different barriers");
  // The same number of barriers on every thread is fine, even with
  // different work between them.
  std::string fine = errorText(
      cac::simulateBlock(8, [&](int64_t tid, void *barrier) {
        volatile int64_t x = 0;
        for (int64_t k = 0; k < tid * 100; ++k)
          x = x + k;
        cac::simulationBarrier(barrier);
      }));
  EXPECT_EQ(fine, "");
  EXPECT_NE(errorText(cac::simulateBlock(0, [](int64_t, void *) {})), "");
}

} // namespace

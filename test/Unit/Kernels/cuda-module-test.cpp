//===- cuda-module-test.cpp - PTX loading and launching -------------------===//
//
// These tests need libcuda and a GPU; they skip without them (the build
// machine has neither). With a CUDA LibTorch they also compare whole bundle
// runs on CUDA tensors with the host.so results.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Kernels/Bundle.h"
#include "cac/Runtime/Kernels/CudaDriver.h"
#include "cac/Runtime/Kernels/CudaModule.h"
#include "test-bundles.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

using namespace cac::rt;
using namespace cac::rt::test;

namespace {

std::string errorOf(const std::function<void()> &fn) {
  try {
    fn();
  } catch (const BundleError &e) {
    return e.what();
  }
  return "";
}

std::string readPtx() {
  std::ifstream in(ptxPath());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

#define REQUIRE_GPU_AND_PTX()                                                  \
  do {                                                                         \
    if (!CudaDriver::get().available())                                        \
      GTEST_SKIP() << CudaDriver::get().unavailableReason();                   \
    if (ptxPath().empty())                                                     \
      GTEST_SKIP() << "no test PTX (nvcc not found at build time)";            \
  } while (0)

TEST(CudaDriver, UnavailableIsReportedNotThrown) {
  const CudaDriver &d = CudaDriver::get();
  if (d.available()) {
    EXPECT_GT(d.deviceCount(), 0);
    EXPECT_EQ(d.describe(1).rfind("CUDA_ERROR_INVALID_VALUE", 0), 0u)
        << d.describe(1);
    return;
  }
  EXPECT_FALSE(d.unavailableReason().empty());
  // Loading a module then fails with that reason, naming the PTX.
  CudaModule m("// no code", {KernelSpec{"k", Grid::Seq, 128}}, "x.ptx");
  std::string err = errorOf([&] { m.prepare(0); });
  EXPECT_EQ(err, "x.ptx: cannot run CUDA kernels: " + d.unavailableReason());
}

TEST(CudaModule, TrailingNulIsStripped) {
  CudaModule m(std::string("abc\0\0", 5), {}, "p");
  EXPECT_EQ(m.ptx(), "abc");
}

TEST(CudaModule, BadPtxNamesTheCUresult) {
  REQUIRE_GPU_AND_PTX();
  CudaModule m(".version 7.0\n.target sm_75\nthis is not ptx\n",
               {KernelSpec{"k", Grid::Seq, 128}}, "bad.ptx");
  std::string err = errorOf([&] { m.prepare(0); });
  EXPECT_NE(err.find("bad.ptx: cuModuleLoadDataEx on device 0 failed: "
                     "CUDA_ERROR_"),
            std::string::npos)
      << err;
}

TEST(CudaModule, MissingKernelNamesIt) {
  REQUIRE_GPU_AND_PTX();
  CudaModule m(readPtx(),
               {KernelSpec{"disc_k0", Grid::Seq, 64},
                KernelSpec{"nope_k1", Grid::Seq, 64}},
               "t.ptx");
  std::string err = errorOf([&] { m.prepare(0); });
  EXPECT_NE(err.find("t.ptx: kernel 'nope_k1' of the manifest is not in the "
                     "PTX (cuModuleGetFunction: CUDA_ERROR_NOT_FOUND"),
            std::string::npos)
      << err;
}

/// Device memory through the driver alone, so this runs with a CPU LibTorch.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) : bytes(bytes) {
    const CudaDriver &d = CudaDriver::get();
    d.check(d.cuMemAlloc(&ptr, bytes ? bytes : 4), "cuMemAlloc");
  }
  ~DeviceBuffer() { CudaDriver::get().cuMemFree(ptr); }
  template <typename T> void upload(const std::vector<T> &v) {
    const CudaDriver &d = CudaDriver::get();
    d.check(d.cuMemcpyHtoD(ptr, v.data(), v.size() * sizeof(T)), "HtoD");
  }
  template <typename T> std::vector<T> download(size_t n) {
    std::vector<T> v(n);
    const CudaDriver &d = CudaDriver::get();
    d.check(d.cuMemcpyDtoH(v.data(), ptr, n * sizeof(T)), "DtoH");
    return v;
  }
  cu::DevicePtr ptr = 0;
  size_t bytes;
};

TEST(CudaModule, RawLaunchMatchesHost) {
  REQUIRE_GPU_AND_PTX();
  const CudaDriver &d = CudaDriver::get();
  ASSERT_TRUE(d.cuMemAlloc && d.cuMemcpyHtoD && d.cuMemcpyDtoH);
  ScopedContext scope(d.primaryContext(0));

  // 300 sequences of 0..9 tokens: several blocks of 64 units.
  std::vector<int32_t> offsets = {0};
  for (int b = 0; b < 300; ++b)
    offsets.push_back(offsets.back() + (b * 7) % 10);
  const int64_t B = 300, N = offsets.back();
  std::vector<float> x(N), bonus(B);
  for (int64_t i = 0; i < N; ++i)
    x[i] = float((i * 37) % 11) - 5.0f;
  for (int64_t b = 0; b < B; ++b)
    bonus[b] = float(b % 3);

  DeviceBuffer dOff(offsets.size() * 4), dX(N * 4), dBonus(B * 4), dRet(N * 4),
      dTotal(B * 4), dSeg(N * 4);
  dOff.upload(offsets);
  dX.upload(x);
  dBonus.upload(bonus);

  int64_t sizes[6] = {0, 0, B, 1, N, 0};
  void *null = nullptr;
  void *ptrs[6] = {(void *)dOff.ptr, (void *)dX.ptr,     (void *)dBonus.ptr,
                   (void *)dRet.ptr, (void *)dTotal.ptr, (void *)dSeg.ptr};
  float gamma = 0.5f;
  std::vector<void *> params = {
      &sizes[0], &sizes[1], &sizes[2], &sizes[3], &sizes[4], &sizes[5],
      &ptrs[0],  &null,     &null,     &null,     &null,     &null,
      &ptrs[1],  &ptrs[2],  &ptrs[3],  &ptrs[4],  &ptrs[5],  &gamma};
  CudaModule m(readPtx(), {KernelSpec{"disc_k0", Grid::Seq, 64}});
  m.launch(0, 0, B, params.data(), params.size(), nullptr);
  m.synchronize(0, nullptr);
  std::vector<float> ret = dRet.download<float>(N);
  std::vector<float> total = dTotal.download<float>(B);

  // The same on the host.
  std::vector<float> hRet(N), hTotal(B);
  std::vector<int32_t> hSeg(N);
  void *hptrs[6] = {offsets.data(), x.data(),      bonus.data(),
                    hRet.data(),    hTotal.data(), hSeg.data()};
  for (int i = 0; i < 6; ++i)
    params[i == 0 ? 6 : 11 + i] = &hptrs[i];
  auto host = CpuModule::load(hostSoPath(), {"disc_k0"});
  host->launch(0, B, params.data(), params.size(), 1);
  for (int64_t i = 0; i < N; ++i)
    ASSERT_FLOAT_EQ(ret[i], hRet[i]) << "token " << i;
  for (int64_t b = 0; b < B; ++b)
    ASSERT_FLOAT_EQ(total[b], hTotal[b]) << "sequence " << b;
}

/// Whole bundles on CUDA tensors (needs a CUDA build of LibTorch).
class CudaBundle : public ::testing::Test {
protected:
  void SetUp() override {
    if (!CudaDriver::get().available())
      GTEST_SKIP() << CudaDriver::get().unavailableReason();
    if (ptxPath().empty())
      GTEST_SKIP() << "no test PTX";
    if (!at::hasCUDA())
      GTEST_SKIP() << "LibTorch has no CUDA";
  }
  at::Device gpu{at::kCUDA, 0};
};

void expectSame(const TensorMap &cpu, const TensorMap &cuda, double tol) {
  ASSERT_EQ(cpu.size(), cuda.size());
  for (const auto &[name, t] : cpu) {
    const at::Tensor &g = cuda.at(name);
    EXPECT_TRUE(g.device().is_cuda()) << name;
    EXPECT_EQ(g.scalar_type(), t.scalar_type()) << name;
    EXPECT_TRUE(
        at::allclose(g.cpu().to(at::kDouble), t.to(at::kDouble), tol, tol))
        << name;
  }
}

TEST_F(CudaBundle, NonBlockingBatchMoveEqualsBlocking) {
  at::manual_seed(5);
  PackedBatch batch =
      PackedBatch::fromLengths(at::randint(1, 40, {300}, at::kLong));
  batch.setGroups(at::randint(0, 7, {300}, at::kLong));
  PackedBatch blocking = batch.to(gpu);
  PackedBatch async = batch.to(gpu, /*nonBlocking=*/true);
  EXPECT_TRUE(async.seqOffsets().is_cuda());
  EXPECT_TRUE(at::equal(async.seqOffsets().cpu(), blocking.seqOffsets().cpu()));
  EXPECT_TRUE(at::equal(async.seqGroup().cpu(), blocking.seqGroup().cpu()));
  EXPECT_TRUE(
      at::equal(async.groupMembers().cpu(), blocking.groupMembers().cpu()));
  EXPECT_TRUE(
      at::equal(async.groupOffsets().cpu(), blocking.groupOffsets().cpu()));
}

TEST_F(CudaBundle, DiscMatchesCpu) {
  TempBundle tb(discManifest(), true, true);
  BundleEstimator est = BundleEstimator::load(tb.dir());
  at::manual_seed(4);
  PackedBatch batch =
      PackedBatch::fromLengths(at::randint(0, 50, {1000}, at::kLong));
  at::Tensor x = at::randn({batch.numTokens()});
  at::Tensor bonus = at::randn({batch.numSeqs()});
  TensorMap cpu =
      est.run({{"x", x}, {"bonus", bonus}}, batch, {{"gamma", 0.95}});
  TensorMap onCuda = est.run({{"x", x.to(gpu)}, {"bonus", bonus.to(gpu)}},
                             batch, {{"gamma", 0.95}});
  expectSame(cpu, onCuda, 1e-5);

  TempBundle tb64(discManifest("f64"), true, true);
  BundleEstimator est64 = BundleEstimator::load(tb64.dir());
  PackedBatch onGpu = batch.to(gpu);
  RunOptions legacyStream;
  legacyStream.stream = nullptr; // explicit stream: run() synchronizes
  expectSame(est64.run({{"x", x}, {"bonus", bonus}}, batch),
             est64.run({{"x", x.to(gpu)}, {"bonus", bonus.to(gpu)}}, onGpu, {},
                       legacyStream),
             1e-12);
}

TEST_F(CudaBundle, GroupsAndTreesMatchCpu) {
  TempBundle tg(gmeanManifest(), true, true);
  BundleEstimator gm = BundleEstimator::load(tg.dir());
  at::manual_seed(5);
  PackedBatch batch = PackedBatch::fromLengths(at::ones({777}, at::kLong));
  batch.setGroups(at::randint(0, 40, {777}, at::kLong) * 1000);
  at::Tensor r = at::randn({777});
  RunOptions scratch;
  scratch.returnScratch = true;
  expectSame(gm.run({{"reward", r}}, batch, {{"scale", 0.5}}, scratch),
             gm.run({{"reward", r.to(gpu)}}, batch, {{"scale", 0.5}}, scratch),
             1e-5);

  TempBundle tt(treeManifest(), true, true);
  BundleEstimator tree = BundleEstimator::load(tt.dir());
  PackedBatch tb = PackedBatch::fromLengths(std::vector<int64_t>{4, 3, 0});
  tb.setTree(at::tensor({-1, 0, 0, 1}, at::kLong),
             at::tensor({0, 0, 1, 3, 0, 0, 2}, at::kLong));
  at::Tensor w = at::randn({7});
  expectSame(tree.run({{"w", w}}, tb), tree.run({{"w", w.to(gpu)}}, tb), 1e-5);
}

TEST_F(CudaBundle, MixedDevicesAreRejected) {
  TempBundle tb(discManifest(), true, true);
  BundleEstimator est = BundleEstimator::load(tb.dir());
  PackedBatch batch = PackedBatch::fromLengths(std::vector<int64_t>{2});
  std::string err = errorOf([&] {
    est.run({{"x", at::zeros({2}).to(gpu)}, {"bonus", at::zeros({1})}}, batch);
  });
  EXPECT_NE(err.find("inputs on different devices"), std::string::npos) << err;
}

} // namespace

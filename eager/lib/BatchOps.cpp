//===- BatchOps.cpp - Eager batch_top_k and uniform -----------------------===//
//
// The reference forms: a stable sort of the batch's tokens for the order (no
// bit-by-bit search as the kernels do), and the draw's hash on the host.
//
//===----------------------------------------------------------------------===//

#include "cac/Eager/BatchOps.h"
#include "cac/Eager/GroupOps.h"

#include "cac/Dialect/Cac/IR/CacDialect.h"

#include <cmath>
#include <cstdint>

torch::Tensor cac::batchKth(const PaddedBatch &pb, const torch::Tensor &x,
                            const torch::Tensor &k) {
  torch::Tensor flat = x.detach().masked_select(pb.mask);
  double kf = k.item<double>();
  auto n = static_cast<double>(flat.size(0));
  if (!(kf >= 1.0))
    return torch::scalar_tensor(-1.0, x.options());
  auto count = static_cast<int64_t>(std::min(std::floor(kf), n));
  // Descending and stable: equal values keep the lower index first; NaN
  // sorts before every number and -0.0 compares equal to 0.0.
  torch::Tensor order = std::get<1>(
      flat.sort(/*stable=*/true, /*dim=*/0, /*descending=*/true));
  return order[count - 1].to(x.scalar_type());
}

torch::Tensor cac::batchTopK(const PaddedBatch &pb, const torch::Tensor &x,
                             const torch::Tensor &kth) {
  auto at = static_cast<int64_t>(kth.item<double>());
  if (at < 0)
    return torch::zeros_like(pb.mask);
  torch::Tensor v = x.detach();
  torch::Tensor pivot = v.masked_select(pb.mask)[at];
  torch::Tensor lengths = pb.lengths.to(torch::kLong);
  torch::Tensor starts = lengths.cumsum(0) - lengths;
  torch::Tensor index =
      starts.unsqueeze(1) + torch::arange(v.size(1), lengths.options());
  torch::Tensor nan = v.isnan(), pivotNan = pivot.isnan();
  torch::Tensor ahead =
      torch::where(pivotNan, torch::zeros_like(nan), nan | (v > pivot));
  torch::Tensor tie = torch::where(pivotNan, nan, v == pivot);
  return (ahead | (tie & (index <= at))) & pb.mask;
}

namespace {
/// splitmix64's output function of z + the golden gamma.
uint64_t splitmix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
} // namespace

torch::Tensor cac::uniformDraw(const PaddedBatch &pb, const torch::Tensor &seed,
                               torch::ScalarType dtype) {
  double s = seed.item<double>();
  const double lim = 4611686018427387904.0; // 2^62
  s = std::isnan(s) ? 0.0 : std::max(std::min(s, lim), -lim);
  uint64_t base = splitmix(static_cast<uint64_t>(static_cast<int64_t>(s)));
  const int digits = dtype == torch::kFloat64 ? 53 : 24;
  torch::Tensor lengths = pb.lengths.to(torch::kCPU).to(torch::kLong);
  torch::Tensor out = torch::zeros({pb.numSeqs, pb.maxLen}, torch::kFloat64);
  auto o = out.accessor<double, 2>();
  auto len = lengths.accessor<int64_t, 1>();
  for (int64_t i = 0; i < pb.numSeqs; ++i) {
    uint64_t hs = splitmix(base ^ static_cast<uint64_t>(i));
    for (int64_t t = 0; t < len[i]; ++t) {
      uint64_t h = splitmix(hs ^ static_cast<uint64_t>(t));
      o[i][t] = std::ldexp(static_cast<double>(h >> (64 - digits)), -digits);
    }
  }
  return out.to(pb.mask.device()).to(dtype);
}

torch::Tensor
cac::evalAcrossSeqs(const PaddedBatch &pb, mlir::Operation *op,
                    torch::ScalarType dtype,
                    const llvm::DenseMap<mlir::Value, torch::Tensor> &env) {
  using namespace cac::ir;
  auto arg = [&](unsigned i) { return env.lookup(op->getOperand(i)); };
  if (mlir::isa<GroupRankOp>(op))
    return groupRanks(pb, arg(0));
  if (mlir::isa<GroupPosSumOp>(op))
    return groupPositionSums(pb, arg(0));
  if (auto k = mlir::dyn_cast<GroupKeyOp>(op)) {
    ReduceKind rk = k.getKind();
    return groupKeyReduce(pb, arg(0), arg(1),
                          rk == ReduceKind::Sum    ? GroupKeyKind::Sum
                          : rk == ReduceKind::Mean ? GroupKeyKind::Mean
                                                   : GroupKeyKind::Count);
  }
  if (mlir::isa<BatchKthOp>(op))
    return batchKth(pb, arg(0), arg(1));
  if (mlir::isa<BatchTopKOp>(op))
    return batchTopK(pb, arg(0), arg(1));
  return uniformDraw(pb, arg(0), dtype);
}

//===- World.h - The data-parallel world a trainer runs in ------*- C++ -*-===//
//
// A single process is a data-parallel world of size 1: the trainer calls the
// same collectives with or without workers, and a world of one implements
// each as the local computation (a sum over one rank is the identity). The
// statistics of a tensor spread over the ranks (moments, token means, a
// weighted token mean) are collectives too: a world of one takes them with
// ATen's float reductions of the local tensor, a world of N ranks all-reduces
// double-precision sums (docs/training.md, "Data-parallel training").
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_TRAIN_WORLD_H
#define CAC_RUNTIME_TRAIN_WORLD_H

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace cac::rt::train {

class Communicator;

/// Count, mean, variance (unbiased) and standard deviation of a tensor's
/// elements on every rank together. The tensors are 0-dim: float where a
/// world of one reduced the local tensor, double where ranks summed;
/// undefined where there are too few elements (mean: none, var/std: < 2).
struct Moments {
  double n = 0;
  at::Tensor mean, var, std;

  double meanValue() const { return mean.defined() ? mean.item<double>() : 0; }
  double stdValue() const { return std.defined() ? std.item<double>() : 0; }
};

/// The ranks of a data-parallel run as the trainer sees them.
class World {
public:
  /// A world of one process.
  World() = default;
  /// The world of \p comm's process group (null: a world of one).
  explicit World(Communicator *comm) : comm_(comm) {}

  int rank() const;
  int size() const;
  /// Rank 0 writes metrics, plots and checkpoints.
  bool writer() const { return rank() == 0; }
  /// The process group (null in a world of one).
  Communicator *communicator() const { return comm_; }

  /// This rank's share [lo, hi) of n items (shardRange).
  std::pair<int64_t, int64_t> shard(int64_t n) const;

  /// Sums \p values over the ranks, in place.
  void sum(std::vector<double> &values) const;
  /// Sums the gradients of \p params over the ranks, in place.
  void sumGradients(const std::vector<at::Tensor> &params) const;
  /// Waits for every rank.
  void barrier() const;
  /// Every rank's \p mine, in rank order.
  std::vector<int64_t> allCounts(int64_t mine) const;
  /// Every rank's \p mine concatenated in rank order.
  std::vector<double> gather(const std::vector<double> &mine) const;

  /// The moments of \p x's elements over the ranks.
  Moments moments(const at::Tensor &x) const;
  /// The mean of \p x's elements over the ranks, whose count is \p count
  /// (0 where the world has none).
  double tokenMean(const at::Tensor &x, double count) const;
  /// The token mean of \p x weighted by \p w over the ranks: sum(x * w)
  /// divided by the sum of the weights (\p total, at least 1). In a world
  /// of one it is aggregateMasked's token mean, whose divisor is w's sum.
  at::Tensor weightedTokenMean(const at::Tensor &x, const at::Tensor &w,
                               const at::Tensor &tokenSeq, int64_t numSeqs,
                               double total) const;

private:
  Communicator *comm_ = nullptr;
};

/// (x - mean) / sqrt(var + 1e-8) with \p m's moments; only centred where
/// they count one element, unchanged where none (whiten() alike).
at::Tensor whiten(const at::Tensor &x, const Moments &m);

} // namespace cac::rt::train

#endif // CAC_RUNTIME_TRAIN_WORLD_H

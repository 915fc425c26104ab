//===- World.cpp - The data-parallel world a trainer runs in --------------===//

#include "cac/Runtime/Train/World.h"

#include "cac/Runtime/Train/Distributed.h"
#include "cac/Runtime/Train/Objective.h"

#include <algorithm>
#include <cmath>

namespace cac::rt::train {

int World::rank() const { return comm_ ? comm_->rank() : 0; }

int World::size() const { return comm_ ? comm_->size() : 1; }

std::pair<int64_t, int64_t> World::shard(int64_t n) const {
  return shardRange(n, rank(), size());
}

void World::sum(std::vector<double> &values) const {
  if (comm_)
    comm_->sum(values);
}

void World::sumGradients(const std::vector<at::Tensor> &params) const {
  if (comm_)
    comm_->sumGradients(params);
}

void World::barrier() const {
  if (comm_)
    comm_->barrier();
}

std::vector<int64_t> World::allCounts(int64_t mine) const {
  std::vector<double> v(static_cast<size_t>(size()), 0.0);
  v[static_cast<size_t>(rank())] = static_cast<double>(mine);
  sum(v);
  std::vector<int64_t> out;
  for (double c : v)
    out.push_back(std::llround(c));
  return out;
}

std::vector<double> World::gather(const std::vector<double> &mine) const {
  if (!comm_)
    return mine;
  std::vector<int64_t> sizes = allCounts(static_cast<int64_t>(mine.size()));
  size_t total = 0, at = 0;
  for (int r = 0; r < size(); ++r) {
    size_t n = static_cast<size_t>(sizes[static_cast<size_t>(r)]);
    at += r < rank() ? n : 0;
    total += n;
  }
  std::vector<double> all(total, 0.0);
  std::copy(mine.begin(), mine.end(), all.begin() + static_cast<long>(at));
  sum(all);
  return all;
}

Moments World::moments(const at::Tensor &x) const {
  Moments m;
  if (!comm_) {
    // The local tensor is the world's: ATen's reductions of it.
    m.n = static_cast<double>(x.numel());
    if (x.numel() > 0)
      m.mean = x.mean();
    if (x.numel() > 1) {
      m.var = x.var();
      m.std = x.std();
    }
    return m;
  }
  at::Tensor x64 = x.to(at::kDouble);
  std::vector<double> s{x64.sum().item<double>(),
                        x64.pow(2).sum().item<double>(),
                        static_cast<double>(x.numel())};
  sum(s);
  double n = s[2], mean = n > 0 ? s[0] / n : 0.0;
  double var = n > 1 ? std::max(0.0, (s[1] - n * mean * mean) / (n - 1)) : 0.0;
  m.n = n;
  m.mean = at::scalar_tensor(mean, at::kDouble);
  m.var = at::scalar_tensor(var, at::kDouble);
  m.std = at::scalar_tensor(std::sqrt(var), at::kDouble);
  return m;
}

double World::tokenMean(const at::Tensor &x, double count) const {
  if (!comm_)
    return x.mean().item<double>();
  return count > 0 ? x.sum().item<double>() / count : 0.0;
}

at::Tensor World::weightedTokenMean(const at::Tensor &x, const at::Tensor &w,
                                    const at::Tensor &tokenSeq, int64_t numSeqs,
                                    double total) const {
  if (!comm_)
    return aggregateMasked(x, w, tokenSeq, numSeqs, Aggregation::TokenMean,
                           0.0);
  return (x * w).sum() / std::max(total, 1.0);
}

at::Tensor whiten(const at::Tensor &x, const Moments &m) {
  if (m.n > 1)
    return (x - m.mean) / at::sqrt(m.var + 1e-8);
  if (m.n == 1)
    return x - m.mean;
  return x;
}

} // namespace cac::rt::train

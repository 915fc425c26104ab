//===- TreeIndex.cpp - Per-node indices of the eager tree operations -----===//

#include "cac/Eager/TreeIndex.h"

#include <vector>

torch::Tensor cac::firstChildren(const torch::Tensor &parent) {
  torch::Tensor par = parent.to(torch::kInt64).contiguous();
  int64_t K = par.size(0);
  torch::Tensor first = torch::full({K}, int64_t(-1), par.options());
  auto pa = par.accessor<int64_t, 1>();
  auto fa = first.accessor<int64_t, 1>();
  for (int64_t k = K - 1; k >= 0; --k)
    if (pa[k] >= 0)
      fa[pa[k]] = k;
  return first;
}

torch::Tensor cac::pathFirsts(const torch::Tensor &parent,
                              const torch::Tensor &xs,
                              const torch::Tensor &leaf, bool leafOnly) {
  torch::Tensor par = parent.to(torch::kInt64).contiguous();
  torch::Tensor lf = leaf.to(torch::kInt64).contiguous();
  torch::Tensor xd = xs.to(torch::kDouble).contiguous();
  int64_t K = par.size(0), B = lf.size(0);
  torch::Tensor out = torch::zeros({K}, torch::kDouble);
  std::vector<char> seen(K, 0);
  auto pa = par.accessor<int64_t, 1>();
  auto la = lf.accessor<int64_t, 1>();
  auto xa = xd.accessor<double, 1>();
  auto oa = out.accessor<double, 1>();
  // A node seen once has its ancestors seen too: each node is visited once.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = la[b]; n >= 0 && !seen[n]; n = leafOnly ? -1 : pa[n]) {
      seen[n] = 1;
      oa[n] = xa[b];
    }
  return out.to(xs.scalar_type());
}

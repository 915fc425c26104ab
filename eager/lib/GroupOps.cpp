//===- GroupOps.cpp - Eager operations across a group's sequences ---------===//

#include "cac/Eager/GroupOps.h"

torch::Tensor cac::groupRanks(const PaddedBatch &pb, const torch::Tensor &x) {
  // [G, M] by group, members in ascending sequence order, so a lower slot
  // is a lower sequence index; pairs [G, M (i), M (j)].
  torch::Tensor m = pb.groupMask;
  torch::Tensor g = torch::zeros(m.sizes(), x.options())
                        .masked_scatter_(m, x.index_select(0, pb.groupMembers));
  torch::Tensor xi = g.unsqueeze(2), xj = g.unsqueeze(1);
  int64_t M = m.size(1);
  torch::Tensor slot = torch::arange(M, pb.groupMembers.options());
  torch::Tensor lower = (slot.unsqueeze(0) < slot.unsqueeze(1)).unsqueeze(0);
  torch::Tensor before = ((xj > xi) | ((xj == xi) & lower)) & m.unsqueeze(1);
  torch::Tensor ranks = before.sum(2).to(x.scalar_type());
  return torch::zeros_like(x).index_copy_(0, pb.groupMembers,
                                          ranks.masked_select(m));
}

torch::Tensor cac::groupKeyReduce(const PaddedBatch &pb, const torch::Tensor &x,
                                  const torch::Tensor &key, GroupKeyKind kind) {
  // [G, M] by group as in groupRanks; pairs [G, M (i), M (j)].
  torch::Tensor m = pb.groupMask;
  auto byGroup = [&](const torch::Tensor &v) {
    return torch::zeros(m.sizes(), v.options())
        .masked_scatter_(m, v.index_select(0, pb.groupMembers));
  };
  torch::Tensor gx = byGroup(x), gk = byGroup(key);
  int64_t M = m.size(1);
  torch::Tensor eye = torch::eye(M, m.options()).unsqueeze(0);
  torch::Tensor same =
      ((gk.unsqueeze(2) == gk.unsqueeze(1)) | eye) & m.unsqueeze(1);
  torch::Tensor n = same.sum(2).to(x.scalar_type());
  torch::Tensor r;
  if (kind == GroupKeyKind::Count) {
    r = n;
  } else {
    torch::Tensor xi = gx.unsqueeze(2), xj = gx.unsqueeze(1).expand_as(same);
    torch::Tensor term = kind == GroupKeyKind::Mean ? xj - xi : xj;
    torch::Tensor s = torch::where(same, term, torch::zeros_like(term)).sum(2);
    r = kind == GroupKeyKind::Mean ? gx + s / n.clamp_min(1) : s;
  }
  return torch::zeros_like(x).index_copy_(0, pb.groupMembers,
                                          r.masked_select(m));
}

torch::Tensor cac::groupPositionSums(const PaddedBatch &pb,
                                     const torch::Tensor &x) {
  torch::Tensor xm = torch::where(pb.mask, x, torch::zeros_like(x));
  torch::Tensor sums = torch::zeros({pb.numGroups, x.size(1)}, x.options())
                           .index_add(0, pb.seqGroup, xm);
  return sums.index_select(0, pb.seqGroup);
}

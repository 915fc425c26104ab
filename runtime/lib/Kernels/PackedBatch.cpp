//===- PackedBatch.cpp - Building and checking the batch structure --------===//

#include "cac/Runtime/Kernels/PackedBatch.h"
#include "cac/Runtime/Kernels/Manifest.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

namespace cac::rt {

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

/// A CPU tensor holding a copy of `v`. One allocation and a memcpy: the
/// structure of a small batch is built per estimator call, where
/// from_blob + clone cost more than the kernels of a short batch.
template <typename T>
at::Tensor toTensor(const std::vector<T> &v, at::ScalarType type) {
  at::Tensor t = at::empty({static_cast<int64_t>(v.size())},
                           at::TensorOptions().dtype(type));
  if (!v.empty())
    std::memcpy(t.data_ptr(), v.data(), v.size() * sizeof(T));
  return t;
}

/// A CPU int64 copy of an integer tensor, rejecting other dtypes.
std::vector<int64_t> hostIntegers(const at::Tensor &t, const char *what) {
  if (!t.defined())
    throw BundleError(std::string(what) + ": tensor is undefined");
  if (at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type()))
    throw BundleError(std::string(what) + ": expected an integer tensor, got " +
                      std::string(c10::toString(t.scalar_type())));
  at::Tensor c = t.to(at::kCPU, at::kLong).contiguous();
  const int64_t *p = c.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + c.numel());
}

std::string shapeOf(const at::Tensor &t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i)
    s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

} // namespace

PackedBatch::PackedBatch() { setLengths({}); }

PackedBatch::PackedBatch(const std::vector<int64_t> &lengths) {
  setLengths(lengths);
}

void PackedBatch::setLengths(const std::vector<int64_t> &lengths) {
  numSeqs_ = static_cast<int64_t>(lengths.size());
  if (numSeqs_ > kInt32Max)
    throw BundleError("batch: " + std::to_string(numSeqs_) +
                      " sequences do not fit the int32 structure arrays");
  std::vector<int32_t> offsets(lengths.size() + 1, 0);
  int64_t total = 0;
  maxLength_ = 0;
  firstEmptySeq_ = -1;
  for (size_t b = 0; b < lengths.size(); ++b) {
    if (lengths[b] < 0)
      throw BundleError("batch: sequence " + std::to_string(b) +
                        " has negative length " + std::to_string(lengths[b]));
    total += lengths[b];
    if (total > kInt32Max)
      throw BundleError("batch: more than 2^31-1 tokens do not fit the int32 "
                        "seq_offsets");
    offsets[b + 1] = static_cast<int32_t>(total);
    maxLength_ = std::max(maxLength_, lengths[b]);
    if (lengths[b] == 0 && firstEmptySeq_ < 0)
      firstEmptySeq_ = static_cast<int64_t>(b);
  }
  numTokens_ = total;
  seqOffsets_ = toTensor(offsets, at::kInt);
  lengths_ = toTensor(lengths, at::kLong);

  // One group holding every sequence (none for an empty batch).
  numGroups_ = numSeqs_ > 0 ? 1 : 0;
  hasGroups_ = false;
  seqGroup_ = at::zeros({numSeqs_}, at::kInt);
  groupOffsets_ =
      numSeqs_ > 0
          ? toTensor(std::vector<int32_t>{0, (int32_t)numSeqs_}, at::kInt)
          : at::zeros({1}, at::kInt);
  groupMembers_ = at::arange(numSeqs_, at::kInt);
  groupIds_ = at::zeros({numGroups_}, at::kLong);

  numNodes_ = 0;
  nodeParent_ = at::Tensor();
  tokenNode_ = at::Tensor();
  mask_ = at::Tensor();
}

PackedBatch PackedBatch::fromLengths(const std::vector<int64_t> &lengths) {
  return PackedBatch(lengths);
}

PackedBatch PackedBatch::fromLengths(const at::Tensor &lengths) {
  if (lengths.defined() && lengths.dim() != 1)
    throw BundleError("batch: lengths must be 1-D [B], got shape " +
                      shapeOf(lengths));
  PackedBatch batch = fromLengths(hostIntegers(lengths, "batch: lengths"));
  return batch.to(lengths.device());
}

PackedBatch PackedBatch::fromMask(const at::Tensor &mask) {
  if (!mask.defined() || mask.dim() != 2)
    throw BundleError("batch: the mask must be 2-D [B, T], got shape " +
                      (mask.defined() ? shapeOf(mask) : std::string("none")));
  at::Tensor boolMask = mask.scalar_type() == at::kBool ? mask : mask.ne(0);
  PackedBatch batch =
      fromLengths(hostIntegers(boolMask.sum(1), "batch: mask row sums"));
  batch.mask_ = boolMask.to(at::kCPU).contiguous();
  return batch.to(mask.device());
}

PackedBatch &PackedBatch::setGroups(const at::Tensor &groupIds) {
  if (!groupIds.defined() || groupIds.dim() != 1 ||
      groupIds.size(0) != numSeqs_)
    throw BundleError("batch: group ids must be [B] = [" +
                      std::to_string(numSeqs_) + "], got shape " +
                      (groupIds.defined() ? shapeOf(groupIds) : "none"));
  std::vector<int64_t> ids = hostIntegers(groupIds, "batch: group ids");
  std::vector<int64_t> distinct = ids;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  const int64_t g = static_cast<int64_t>(distinct.size());

  std::vector<int32_t> seqGroup(ids.size()), offsets(g + 1, 0),
      members(ids.size());
  for (size_t b = 0; b < ids.size(); ++b) {
    seqGroup[b] = static_cast<int32_t>(
        std::lower_bound(distinct.begin(), distinct.end(), ids[b]) -
        distinct.begin());
    ++offsets[seqGroup[b] + 1];
  }
  for (int64_t i = 0; i < g; ++i)
    offsets[i + 1] += offsets[i];
  // Counting sort, stable: members stay ascending inside a group.
  std::vector<int32_t> next(offsets.begin(), offsets.end() - 1);
  for (size_t b = 0; b < ids.size(); ++b)
    members[next[seqGroup[b]]++] = static_cast<int32_t>(b);

  at::Device dev = device();
  numGroups_ = g;
  hasGroups_ = true;
  seqGroup_ = toTensor(seqGroup, at::kInt).to(dev);
  groupOffsets_ = toTensor(offsets, at::kInt).to(dev);
  groupMembers_ = toTensor(members, at::kInt).to(dev);
  groupIds_ = toTensor(distinct, at::kLong).to(dev);
  return *this;
}

PackedBatch &PackedBatch::setTree(const at::Tensor &nodeParent,
                                  const at::Tensor &tokenNode) {
  if (!nodeParent.defined() || nodeParent.dim() != 1)
    throw BundleError("tree: node_parent must be 1-D [K], got shape " +
                      (nodeParent.defined() ? shapeOf(nodeParent) : "none"));
  std::vector<int64_t> parent = hostIntegers(nodeParent, "tree: node_parent");
  const int64_t k = static_cast<int64_t>(parent.size());
  if (k > kInt32Max)
    throw BundleError("tree: too many nodes for int32 indices");
  for (int64_t n = 0; n < k; ++n) {
    if (parent[n] < -1 || parent[n] >= k)
      throw BundleError("tree: node_parent[" + std::to_string(n) +
                        "] = " + std::to_string(parent[n]) +
                        " is outside [-1, " + std::to_string(k) + ")");
    if (parent[n] == n)
      throw BundleError("tree: node " + std::to_string(n) +
                        " is its own parent");
  }
  // Walk up from every node; meeting a node of the current walk is a cycle.
  std::vector<int8_t> state(k, 0); // 0 unseen, 1 on the current walk, 2 done
  std::vector<int64_t> walk;
  for (int64_t start = 0; start < k; ++start) {
    walk.clear();
    int64_t n = start;
    while (n >= 0 && state[n] == 0) {
      state[n] = 1;
      walk.push_back(n);
      n = parent[n];
    }
    if (n >= 0 && state[n] == 1) {
      std::string cycle = std::to_string(n);
      auto it = std::find(walk.begin(), walk.end(), n);
      int shown = 0;
      for (++it; it != walk.end() && shown < 8; ++it, ++shown)
        cycle += " -> " + std::to_string(*it);
      cycle += it == walk.end() ? " -> " + std::to_string(n) : " -> ...";
      throw BundleError("tree: node_parent has a cycle: " + cycle);
    }
    for (int64_t w : walk)
      state[w] = 2;
  }

  if (!tokenNode.defined())
    throw BundleError("tree: token_node is undefined");
  at::Tensor packedNodes = tokenNode;
  if (tokenNode.dim() == 2)
    packedNodes = pack(tokenNode.to(device()));
  if (packedNodes.dim() != 1 || packedNodes.size(0) != numTokens_)
    throw BundleError("tree: token_node must be packed [N] = [" +
                      std::to_string(numTokens_) + "] or padded [B, T], got " +
                      shapeOf(tokenNode));
  std::vector<int64_t> nodes = hostIntegers(packedNodes, "tree: token_node");
  at::Tensor offsetsCpu = seqOffsets_.to(at::kCPU);
  const int32_t *off = offsetsCpu.data_ptr<int32_t>();
  for (int64_t i = 0; i < numTokens_; ++i) {
    if (nodes[i] < 0 || nodes[i] >= k) {
      int64_t b =
          std::upper_bound(off, off + numSeqs_ + 1, (int32_t)i) - off - 1;
      throw BundleError("tree: token_node[" + std::to_string(i) +
                        "] (sequence " + std::to_string(b) + ", token " +
                        std::to_string(i - off[b]) +
                        ") = " + std::to_string(nodes[i]) + " is outside [0, " +
                        std::to_string(k) + ")");
    }
  }

  at::Device dev = device();
  std::vector<int32_t> parent32(parent.begin(), parent.end());
  std::vector<int32_t> nodes32(nodes.begin(), nodes.end());
  numNodes_ = k;
  nodeParent_ = toTensor(parent32, at::kInt).to(dev);
  tokenNode_ = toTensor(nodes32, at::kInt).to(dev);
  return *this;
}

PackedBatch PackedBatch::to(const at::Device &dev, bool nonBlocking) const {
  PackedBatch out = *this;
  const bool async = nonBlocking && dev.is_cuda();
  for (at::Tensor *t : {&out.seqOffsets_, &out.seqGroup_, &out.groupOffsets_,
                        &out.groupMembers_, &out.groupIds_, &out.nodeParent_,
                        &out.tokenNode_, &out.lengths_, &out.mask_}) {
    if (!t->defined() || t->device() == dev)
      continue;
    // An asynchronous copy needs pinned host memory; LibTorch's host
    // allocator keeps it until the copy has run.
    at::Tensor src = async && t->is_cpu() ? t->pin_memory() : *t;
    *t = src.to(dev, /*non_blocking=*/async);
  }
  return out;
}

at::Tensor PackedBatch::paddedMask(int64_t t) const {
  if (mask_.defined()) {
    if (t >= 0 && t != mask_.size(1))
      throw BundleError("batch: the padded width is fixed to " +
                        std::to_string(mask_.size(1)) +
                        " by the mask, asked for " + std::to_string(t));
    return mask_;
  }
  if (t >= 0 && t < maxLength_)
    throw BundleError("batch: padded width " + std::to_string(t) +
                      " is shorter than the longest sequence (" +
                      std::to_string(maxLength_) + ")");
  return maskFromLengths(lengths_, std::max(t, maxLength_));
}

at::Tensor PackedBatch::pack(const at::Tensor &padded) const {
  if (!padded.defined() || padded.dim() < 2 || padded.size(0) != numSeqs_)
    throw BundleError("batch: a padded tensor must be [B, T, ...] with B = " +
                      std::to_string(numSeqs_) + ", got shape " +
                      (padded.defined() ? shapeOf(padded) : "none"));
  return packPadded(
      padded,
      paddedMask(mask_.defined() ? -1 : padded.size(1)).to(padded.device()));
}

at::Tensor PackedBatch::unpack(const at::Tensor &packed, double fill,
                               int64_t t) const {
  if (!packed.defined() || packed.dim() < 1 || packed.size(0) != numTokens_)
    throw BundleError("batch: a packed tensor must be [N, ...] with N = " +
                      std::to_string(numTokens_) + ", got shape " +
                      (packed.defined() ? shapeOf(packed) : "none"));
  return unpackPacked(packed, paddedMask(t).to(packed.device()), fill);
}

std::vector<at::Tensor> PackedBatch::split(const at::Tensor &packed) const {
  if (!packed.defined() || packed.dim() < 1 || packed.size(0) != numTokens_)
    throw BundleError("batch: a packed tensor must be [N, ...] with N = " +
                      std::to_string(numTokens_) + ", got shape " +
                      (packed.defined() ? shapeOf(packed) : "none"));
  std::vector<int64_t> sizes = hostIntegers(lengths_, "batch: lengths");
  return packed.split_with_sizes(sizes, 0);
}

at::Tensor PackedBatch::tokenSeq() const {
  return at::repeat_interleave(
      at::arange(numSeqs_, lengths_.options().dtype(at::kLong)), lengths_);
}

at::Tensor packPadded(const at::Tensor &padded, const at::Tensor &mask) {
  if (!mask.defined() || mask.dim() != 2 || !padded.defined() ||
      padded.dim() < 2 || padded.size(0) != mask.size(0) ||
      padded.size(1) != mask.size(1))
    throw BundleError(
        "pack: padded tensor " + (padded.defined() ? shapeOf(padded) : "none") +
        " does not match mask " + (mask.defined() ? shapeOf(mask) : "none"));
  at::Tensor m = mask.scalar_type() == at::kBool ? mask : mask.ne(0);
  return padded.index({m.to(padded.device())});
}

at::Tensor unpackPacked(const at::Tensor &packed, const at::Tensor &mask,
                        double fill) {
  if (!mask.defined() || mask.dim() != 2)
    throw BundleError("unpack: the mask must be 2-D [B, T]");
  at::Tensor m =
      (mask.scalar_type() == at::kBool ? mask : mask.ne(0)).to(packed.device());
  std::vector<int64_t> shape = {m.size(0), m.size(1)};
  for (int64_t d = 1; d < packed.dim(); ++d)
    shape.push_back(packed.size(d));
  int64_t count = m.sum().item<int64_t>();
  if (packed.dim() < 1 || packed.size(0) != count)
    throw BundleError("unpack: packed tensor " + shapeOf(packed) + " has " +
                      (packed.dim() ? std::to_string(packed.size(0)) : "no") +
                      " rows but the mask selects " + std::to_string(count));
  at::Tensor out = at::full(shape, fill, packed.options());
  out.index_put_({m}, packed);
  return out;
}

at::Tensor maskFromLengths(const at::Tensor &lengths, int64_t maxLen) {
  if (!lengths.defined() || lengths.dim() != 1)
    throw BundleError("maskFromLengths: lengths must be 1-D [B]");
  at::Tensor len = lengths.to(at::kLong);
  if (maxLen < 0)
    maxLen = len.numel() ? len.max().item<int64_t>() : 0;
  return at::arange(maxLen, len.options()).unsqueeze(0) < len.unsqueeze(1);
}

at::Tensor packRagged(const std::vector<at::Tensor> &rows) {
  if (rows.empty())
    return at::empty({0});
  for (size_t i = 0; i < rows.size(); ++i)
    if (!rows[i].defined() || rows[i].dim() != 1)
      throw BundleError("packRagged: row " + std::to_string(i) +
                        " is not a 1-D tensor");
  return at::cat(rows, 0);
}

} // namespace cac::rt

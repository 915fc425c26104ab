//===- packed-batch-test.cpp - Batch structure and pack/unpack ------------===//

#include "cac/Runtime/Kernels/Manifest.h"
#include "cac/Runtime/Kernels/PackedBatch.h"

#include <gtest/gtest.h>

using namespace cac::rt;

namespace {

at::Tensor ints(std::vector<int64_t> v) { return at::tensor(v, at::kLong); }

std::vector<int64_t> vec(const at::Tensor &t) {
  at::Tensor c = t.to(at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(),
                              c.data_ptr<int64_t>() + c.numel());
}

std::string errorOf(const std::function<void()> &fn) {
  try {
    fn();
  } catch (const BundleError &e) {
    return e.what();
  }
  return "";
}

TEST(PackedBatch, FromLengths) {
  PackedBatch b = PackedBatch::fromLengths(ints({3, 0, 2}));
  EXPECT_EQ(b.numSeqs(), 3);
  EXPECT_EQ(b.numTokens(), 5);
  EXPECT_EQ(b.numGroups(), 1);
  EXPECT_EQ(b.numNodes(), 0);
  EXPECT_EQ(b.maxLength(), 3);
  EXPECT_FALSE(b.hasTree());
  EXPECT_EQ(b.seqOffsets().scalar_type(), at::kInt);
  EXPECT_EQ(vec(b.seqOffsets()), (std::vector<int64_t>{0, 3, 3, 5}));
  // Without groups, one group holds every sequence.
  EXPECT_EQ(vec(b.seqGroup()), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(vec(b.groupOffsets()), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(vec(b.groupMembers()), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(vec(b.tokenSeq()), (std::vector<int64_t>{0, 0, 0, 2, 2}));
  EXPECT_EQ(b.firstEmptySeq(), 1);
  EXPECT_EQ(PackedBatch::fromLengths(ints({0, 0, 1})).firstEmptySeq(), 0);
  EXPECT_EQ(PackedBatch::fromLengths(ints({4, 1, 2})).firstEmptySeq(), -1);
}

TEST(PackedBatch, EmptyBatch) {
  PackedBatch b = PackedBatch::fromLengths(std::vector<int64_t>{});
  EXPECT_EQ(b.numSeqs(), 0);
  EXPECT_EQ(b.numGroups(), 0);
  EXPECT_EQ(vec(b.seqOffsets()), (std::vector<int64_t>{0}));
  EXPECT_EQ(vec(b.groupOffsets()), (std::vector<int64_t>{0}));
  EXPECT_EQ(b.firstEmptySeq(), -1);
  EXPECT_EQ(vec(PackedBatch().seqOffsets()), (std::vector<int64_t>{0}));
}

TEST(PackedBatch, RejectsBadLengths) {
  EXPECT_EQ(errorOf([] {
              PackedBatch::fromLengths(ints({2, -1}));
            }),
            "batch: sequence 1 has negative length -1");
  EXPECT_NE(errorOf([] {
              PackedBatch::fromLengths(at::ones({2}, at::kFloat));
            }).find("expected an integer tensor"),
            std::string::npos);
  EXPECT_NE(errorOf([] {
              PackedBatch::fromLengths(at::ones({2, 2}, at::kLong));
            }).find("lengths must be 1-D"),
            std::string::npos);
}

TEST(PackedBatch, GroupsFromArbitraryIds) {
  PackedBatch b = PackedBatch::fromLengths(ints({1, 1, 1, 1, 1, 1}));
  b.setGroups(ints({42, 7, 42, -3, 7, 42}));
  EXPECT_TRUE(b.hasGroups());
  EXPECT_EQ(b.numGroups(), 3);
  EXPECT_EQ(vec(b.groupIds()), (std::vector<int64_t>{-3, 7, 42}));
  EXPECT_EQ(vec(b.seqGroup()), (std::vector<int64_t>{2, 1, 2, 0, 1, 2}));
  EXPECT_EQ(vec(b.groupOffsets()), (std::vector<int64_t>{0, 1, 3, 6}));
  // Ascending sequence indices inside each group.
  EXPECT_EQ(vec(b.groupMembers()), (std::vector<int64_t>{3, 1, 4, 0, 2, 5}));
  EXPECT_EQ(b.groupMembers().scalar_type(), at::kInt);
}

TEST(PackedBatch, RejectsGroupsOfWrongSize) {
  PackedBatch b = PackedBatch::fromLengths(ints({1, 2}));
  EXPECT_EQ(errorOf([&] {
              b.setGroups(ints({1, 2, 3}));
            }),
            "batch: group ids must be [B] = [2], got shape [3]");
  EXPECT_NE(errorOf([&] {
              b.setGroups(at::zeros({2}, at::kFloat));
            }).find("expected an integer tensor"),
            std::string::npos);
}

TEST(PackedBatch, FromMaskWithAnyPadding) {
  // Left padding in row 0, right padding in row 1, a hole in row 2.
  at::Tensor mask =
      at::tensor({0, 1, 1, 1, 0, 0, 1, 0, 1}, at::kInt).reshape({3, 3});
  PackedBatch b = PackedBatch::fromMask(mask);
  EXPECT_EQ(vec(b.seqOffsets()), (std::vector<int64_t>{0, 2, 3, 5}));
  at::Tensor padded =
      at::arange(9, at::kFloat).reshape({3, 3}); // 0..8 row-major
  at::Tensor packed = b.pack(padded);
  EXPECT_TRUE(packed.equal(at::tensor({1.f, 2.f, 3.f, 6.f, 8.f})));
  at::Tensor back = b.unpack(packed, -1.0);
  EXPECT_TRUE(
      back.equal(at::tensor({-1.f, 1.f, 2.f, 3.f, -1.f, -1.f, 6.f, -1.f, 8.f})
                     .reshape({3, 3})));
}

TEST(PackedBatch, PackUnpackFromLengths) {
  PackedBatch b = PackedBatch::fromLengths(ints({2, 3}));
  at::Tensor padded = at::arange(8, at::kFloat).reshape({2, 4});
  at::Tensor packed = b.pack(padded);
  EXPECT_TRUE(packed.equal(at::tensor({0.f, 1.f, 4.f, 5.f, 6.f})));
  at::Tensor back = b.unpack(packed);
  EXPECT_EQ(back.sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(
      back.equal(at::tensor({0.f, 1.f, 0.f, 4.f, 5.f, 6.f}).reshape({2, 3})));
  EXPECT_EQ(b.unpack(packed, 0.0, 5).size(1), 5);
  EXPECT_NE(errorOf([&] { b.unpack(packed, 0.0, 2); }).find("shorter"),
            std::string::npos);
  // Trailing dimensions ride along.
  at::Tensor padded3 = at::arange(16, at::kFloat).reshape({2, 4, 2});
  at::Tensor packed3 = b.pack(padded3);
  EXPECT_EQ(packed3.sizes(), (std::vector<int64_t>{5, 2}));
  EXPECT_TRUE(b.unpack(packed3, 0.0, 4)
                  .index({0, at::indexing::Slice(0, 2)})
                  .equal(padded3.index({0, at::indexing::Slice(0, 2)})));
  std::vector<at::Tensor> rows = b.split(packed);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(rows[1].equal(at::tensor({4.f, 5.f, 6.f})));
  EXPECT_TRUE(packRagged(rows).equal(packed));
}

TEST(PackedBatch, FreeHelpers) {
  at::Tensor mask = maskFromLengths(ints({1, 3}));
  EXPECT_EQ(mask.scalar_type(), at::kBool);
  EXPECT_TRUE(mask.equal(
      at::tensor({1, 0, 0, 1, 1, 1}, at::kInt).reshape({2, 3}).to(at::kBool)));
  at::Tensor padded = at::arange(6, at::kDouble).reshape({2, 3});
  at::Tensor packed = packPadded(padded, mask);
  EXPECT_TRUE(packed.equal(at::tensor({0.0, 3.0, 4.0, 5.0})));
  EXPECT_TRUE(
      unpackPacked(packed, mask, 9.0)
          .equal(at::tensor({0.0, 9.0, 9.0, 3.0, 4.0, 5.0}).reshape({2, 3})));
  EXPECT_NE(errorOf([&] {
              unpackPacked(packed.slice(0, 0, 3), mask);
            }).find("has 3 rows but the mask selects 4"),
            std::string::npos);
  EXPECT_NE(errorOf([&] {
              packPadded(padded, maskFromLengths(ints({1})));
            }).find("does not match mask"),
            std::string::npos);
}

TEST(PackedBatch, TreePassThrough) {
  // Two sequences sharing a root node 0; tokens of node 1 and 2 after it.
  PackedBatch b = PackedBatch::fromLengths(ints({3, 2}));
  b.setTree(ints({-1, 0, 0}), ints({0, 1, 1, 0, 2}));
  EXPECT_TRUE(b.hasTree());
  EXPECT_EQ(b.numNodes(), 3);
  EXPECT_EQ(b.nodeParent().scalar_type(), at::kInt);
  EXPECT_EQ(vec(b.nodeParent()), (std::vector<int64_t>{-1, 0, 0}));
  EXPECT_EQ(vec(b.tokenNode()), (std::vector<int64_t>{0, 1, 1, 0, 2}));
  // Padded token_node is packed with the batch layout.
  PackedBatch c = PackedBatch::fromLengths(ints({3, 2}));
  c.setTree(ints({-1, 0, 0}), ints({0, 1, 1, 0, 2, 9}).reshape({2, 3}));
  EXPECT_EQ(vec(c.tokenNode()), (std::vector<int64_t>{0, 1, 1, 0, 2}));
}

TEST(PackedBatch, TreeValidation) {
  PackedBatch b = PackedBatch::fromLengths(ints({2, 1}));
  EXPECT_EQ(errorOf([&] {
              b.setTree(ints({-1, 5}), ints({0, 1, 1}));
            }),
            "tree: node_parent[1] = 5 is outside [-1, 2)");
  EXPECT_EQ(errorOf([&] {
              b.setTree(ints({-1, 1}), ints({0, 1, 1}));
            }),
            "tree: node 1 is its own parent");
  EXPECT_EQ(errorOf([&] {
              b.setTree(ints({-1, 2, 3, 1}), ints({0, 1, 1}));
            }),
            "tree: node_parent has a cycle: 1 -> 2 -> 3 -> 1");
  EXPECT_EQ(errorOf([&] {
              b.setTree(ints({-1, 0}), ints({0, 1, 2}));
            }),
            "tree: token_node[2] (sequence 1, token 0) = 2 is outside [0, 2)");
  EXPECT_NE(errorOf([&] {
              b.setTree(ints({-1, 0}), ints({0, 1}));
            }).find("token_node must be packed [N] = [3]"),
            std::string::npos);
  EXPECT_FALSE(b.hasTree());
}

TEST(PackedBatch, ToDeviceKeepsEverything) {
  PackedBatch b = PackedBatch::fromMask(at::ones({2, 2}, at::kBool));
  b.setGroups(ints({5, 6})).setTree(ints({-1}), ints({0, 0, 0, 0}));
  PackedBatch c = b.to(at::kCPU);
  EXPECT_EQ(c.numGroups(), 2);
  EXPECT_EQ(c.numNodes(), 1);
  EXPECT_TRUE(c.mask().defined());
  EXPECT_EQ(c.device(), at::Device(at::kCPU));
}

} // namespace

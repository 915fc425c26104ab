//===- domain-test.cpp - The domain lattice and the argument table --------===//

#include "cac/Abi/Domain.h"
#include "cac/Abi/KernelArgs.h"

#include <gtest/gtest.h>

#include <string>

using namespace cac::abi;

namespace {

constexpr Domain kAll[] = {Domain::Scalar, Domain::Token, Domain::Seg,
                           Domain::Seq,    Domain::Group, Domain::Node,
                           Domain::Batch};

TEST(Domain, SpellingsParseBackExceptScalar) {
  for (Domain d : kAll) {
    std::optional<Domain> p = parseDomain(spelling(d));
    if (d == Domain::Scalar)
      EXPECT_FALSE(p);
    else
      EXPECT_EQ(p, d) << spelling(d);
  }
  EXPECT_FALSE(parseDomain("prompt"));
  EXPECT_FALSE(parseDomain(""));
}

TEST(Domain, BroadcastLattice) {
  // Each domain and the domains it broadcasts to (itself included).
  const std::pair<Domain, std::string> table[] = {
      {Domain::Scalar, "scalar token seg seq group node batch"},
      {Domain::Token, "token"},
      {Domain::Seg, "token seg"},
      {Domain::Seq, "token seg seq"},
      {Domain::Group, "token seg seq group"},
      {Domain::Node, "token node"},
      {Domain::Batch, "token seg seq group batch"},
  };
  for (const auto &[from, targets] : table)
    for (Domain to : kAll) {
      bool listed =
          (" " + targets + " ").find(std::string(" ") + spelling(to) + " ") !=
          std::string::npos;
      EXPECT_EQ(broadcastsTo(from, to), listed)
          << spelling(from) << " -> " << spelling(to);
    }
}

TEST(Domain, JoinIsTheFinerOrNone) {
  EXPECT_EQ(joinDomains(Domain::Seq, Domain::Token), Domain::Token);
  EXPECT_EQ(joinDomains(Domain::Token, Domain::Group), Domain::Token);
  EXPECT_EQ(joinDomains(Domain::Scalar, Domain::Node), Domain::Node);
  EXPECT_EQ(joinDomains(Domain::Seg, Domain::Seg), Domain::Seg);
  EXPECT_FALSE(joinDomains(Domain::Node, Domain::Seq));
  EXPECT_FALSE(joinDomains(Domain::Group, Domain::Node));
  EXPECT_EQ(joinDomains(Domain::Batch, Domain::Seq), Domain::Seq);
  EXPECT_FALSE(joinDomains(Domain::Batch, Domain::Node));
}

TEST(KernelArgs, FixedHeadIsSizesThenStructureArrays) {
  const char *names[] = {"unit_begin",    "unit_end",    "num_seqs",
                         "num_groups",    "num_tokens",  "num_nodes",
                         "seq_offsets",   "seq_group",   "group_offsets",
                         "group_members", "node_parent", "token_node"};
  static_assert(kNumFixed == 12);
  for (unsigned i = 0; i < kNumFixed; ++i) {
    EXPECT_STREQ(kFixedArgs[i].name, names[i]);
    bool size = i < kSeqOffsets;
    EXPECT_EQ(kFixedArgs[i].kind, size ? ArgKind::I64 : ArgKind::Ptr);
    EXPECT_EQ(fixedArgDType(FixedArg(i)), size ? DType::I64 : DType::I32);
  }
  EXPECT_STREQ(kFixedArgs[kTokenNode].name, "token_node");
}

TEST(KernelArgs, SpellingsParseBack) {
  for (DType t : {DType::I32, DType::I64, DType::F32, DType::F64})
    EXPECT_EQ(parseDType(spelling(t)), t);
  for (Grid g : {Grid::Seq, Grid::Group, Grid::Node, Grid::Batch}) {
    EXPECT_EQ(parseGrid(spelling(g)), g);
    EXPECT_EQ(gridOf(domainOf(g)), g);
  }
  for (BufferRole r :
       {BufferRole::Input, BufferRole::Output, BufferRole::Scratch})
    EXPECT_EQ(parseRole(spelling(r)), r);
  for (SegLayout l : {SegLayout::BySegment, SegLayout::ByToken})
    EXPECT_EQ(parseSegLayout(spelling(l)), l);
  EXPECT_FALSE(parseGrid("token"));
  EXPECT_FALSE(gridOf(Domain::Token));
  EXPECT_FALSE(parseDType("f16"));
}

} // namespace

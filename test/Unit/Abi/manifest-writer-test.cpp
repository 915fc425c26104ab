//===- manifest-writer-test.cpp - Manifest -> text -> Manifest ------------===//

#include "cac/Abi/ManifestReader.h"
#include "cac/Abi/ManifestWriter.h"

#include <gtest/gtest.h>

using namespace cac::abi;

namespace {

/// A manifest with every optional part: a source, both structures, an
/// objective, a seg buffer, a required and a defaulted parameter, a thread
/// and a block kernel.
Manifest fullManifest() {
  Manifest m;
  m.estimator = "est";
  m.source = "stdlib/est.cac";
  m.dtype = DType::F32;
  m.needsGroups = true;
  m.needsTree = true;
  m.objective = ObjectiveSpec{"logp", "grad_logp", Domain::Token};
  m.buffers = {
      {"logp", BufferRole::Input, Domain::Token, DType::F32},
      {"adv", BufferRole::Output, Domain::Seg, DType::F32, SegLayout::ByToken},
      {"_t0", BufferRole::Scratch, Domain::Node, DType::F32}};
  m.params = {{"lambda", 0.95}, {"clip", std::nullopt}, {"gamma", 1.0}};
  m.args = m.expectedArgs();
  KernelSpec tree{"est_tree", Grid::Node, 256};
  KernelSpec seq{"est_k0", Grid::Seq, 128, true, 4, "auto"};
  m.kernels = {tree, seq};
  return m;
}

TEST(ManifestWriter, RoundTrips) {
  Manifest m = fullManifest();
  std::string text = writeManifest(m);
  ManifestOrError r = readManifest(text, "est/manifest.json");
  ASSERT_TRUE(r) << r.error;
  const Manifest &back = *r.manifest;
  EXPECT_EQ(back.format, kBundleFormat);
  EXPECT_EQ(back.estimator, "est");
  EXPECT_EQ(back.source, "stdlib/est.cac");
  EXPECT_TRUE(back.needsGroups && back.needsTree);
  ASSERT_TRUE(back.objective);
  EXPECT_EQ(back.objective->wrt, "logp");
  EXPECT_EQ(back.objective->gradient, "grad_logp");
  EXPECT_EQ(back.objective->lossDomain, Domain::Token);
  ASSERT_EQ(back.buffers.size(), 3u);
  EXPECT_EQ(back.buffers[1].domain, Domain::Seg);
  EXPECT_EQ(back.buffers[1].layout, SegLayout::ByToken);
  EXPECT_EQ(back.buffers[2].role, BufferRole::Scratch);
  ASSERT_EQ(back.params.size(), 3u);
  EXPECT_EQ(back.params[0].defaultValue, 0.95);
  EXPECT_FALSE(back.params[1].defaultValue);
  ASSERT_EQ(back.args.size(), kNumFixed + 3 + 3);
  EXPECT_EQ(back.args[kNumFixed + 1].source, ArgSource::Buffer);
  EXPECT_EQ(back.args[kNumFixed + 1].index, 1);
  EXPECT_EQ(back.args.back().kind, ArgKind::Scalar);
  EXPECT_EQ(back.args.back().index, 2);
  ASSERT_EQ(back.kernels.size(), 2u);
  EXPECT_FALSE(back.kernels[0].perBlock);
  EXPECT_FALSE(back.kernels[0].items);
  EXPECT_EQ(back.kernels[0].block, 256);
  EXPECT_TRUE(back.kernels[1].perBlock);
  EXPECT_EQ(back.kernels[1].items, 4);
  EXPECT_EQ(back.kernels[1].layout, "auto");
  // What is read back writes the same text.
  EXPECT_EQ(writeManifest(back), text);
}

TEST(ManifestWriter, WritesTheLoweringsLayout) {
  // Sorted keys, two-space indents, integers as integers, other numbers
  // with 17 significant digits, empty arrays as [].
  Manifest m;
  m.estimator = "tiny";
  m.buffers = {{"r", BufferRole::Input, Domain::Seq, DType::F32},
               {"s", BufferRole::Output, Domain::Seg, DType::F32}};
  m.params = {{"lambda", 0.95}, {"gamma", 1.0}};
  m.args = m.expectedArgs();
  m.args.erase(m.args.begin() + 1, m.args.begin() + kNumFixed);
  m.kernels = {{"tiny_k0", Grid::Seq, 128}};
  EXPECT_EQ(writeManifest(m), R"({
  "args": [
    {
      "kind": "i64",
      "name": "unit_begin"
    },
    {
      "kind": "ptr",
      "name": "r"
    },
    {
      "kind": "ptr",
      "name": "s"
    },
    {
      "dtype": "f32",
      "kind": "param",
      "name": "lambda"
    },
    {
      "dtype": "f32",
      "kind": "param",
      "name": "gamma"
    }
  ],
  "buffers": [
    {
      "domain": "seq",
      "dtype": "f32",
      "name": "r",
      "role": "input"
    },
    {
      "domain": "seg",
      "dtype": "f32",
      "layout": "by-segment",
      "name": "s",
      "role": "output"
    }
  ],
  "dtype": "f32",
  "estimator": "tiny",
  "format": "cac-bundle-1",
  "kernels": [
    {
      "block": 128,
      "grid": "seq",
      "name": "tiny_k0",
      "unit": "thread"
    }
  ],
  "needs": [],
  "params": [
    {
      "default": 0.94999999999999996,
      "name": "lambda"
    },
    {
      "default": 1,
      "name": "gamma"
    }
  ]
})");
}

TEST(ManifestWriter, EscapesStrings) {
  Manifest m = fullManifest();
  m.source = "dir\\a \"b\"\t\x01.cac";
  std::string text = writeManifest(m);
  EXPECT_NE(text.find(R"("source": "dir\\a \"b\"\t\u0001.cac")"),
            std::string::npos)
      << text;
  ManifestOrError r = readManifest(text);
  ASSERT_TRUE(r) << r.error;
  EXPECT_EQ(r.manifest->source, m.source);
}

} // namespace

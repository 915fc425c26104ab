//===- manifest-test.cpp - Parsing and validating manifest.json -----------===//

#include "cac/Runtime/Kernels/Manifest.h"
#include "test-bundles.h"

#include <gtest/gtest.h>

#include <fstream>

using namespace cac::rt;
using namespace cac::rt::test;
using nlohmann::json;

namespace {

/// The message of the BundleError that parsing `m` throws ("" if none).
std::string parseError(const json &m, const std::string &origin = "m.json") {
  try {
    parseManifest(m.dump(), origin);
  } catch (const BundleError &e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR(m, text)                                                  \
  EXPECT_NE(parseError(m).find(text), std::string::npos)                       \
      << "error was: " << parseError(m)

TEST(Manifest, ParsesTheDocumentedFields) {
  Manifest m = parseManifest(gmeanManifest().dump(), "gmean/manifest.json");
  EXPECT_EQ(m.format, "cac-bundle-1");
  EXPECT_EQ(m.estimator, "gmean");
  EXPECT_EQ(m.source, "test/gmean.cac");
  EXPECT_EQ(m.dtype, DType::F32);
  EXPECT_TRUE(m.needsGroups);
  EXPECT_FALSE(m.needsTree);
  ASSERT_EQ(m.buffers.size(), 4u);
  EXPECT_EQ(m.buffers[0].name, "reward");
  EXPECT_EQ(m.buffers[0].role, BufferRole::Input);
  EXPECT_EQ(m.buffers[0].domain, Domain::Seq);
  EXPECT_EQ(m.buffers[2].domain, Domain::Group);
  EXPECT_EQ(m.buffers[3].role, BufferRole::Scratch);
  ASSERT_EQ(m.params.size(), 1u);
  EXPECT_EQ(m.params[0].name, "scale");
  EXPECT_FALSE(m.params[0].defaultValue.has_value());
  ASSERT_EQ(m.kernels.size(), 2u);
  EXPECT_EQ(m.kernels[0].name, "gmean_k0");
  EXPECT_EQ(m.kernels[0].grid, Grid::Group);
  EXPECT_EQ(m.kernels[0].block, 32);
  EXPECT_FALSE(m.kernels[0].perBlock);
  EXPECT_EQ(m.kernels[1].grid, Grid::Seq);
  EXPECT_EQ(m.bufferNames(BufferRole::Output),
            (std::vector<std::string>{"adv", "gsize"}));
  EXPECT_EQ(m.findBuffer("_mean"), 3);
  EXPECT_EQ(m.findParam("scale"), 0);
  EXPECT_EQ(m.findParam("nope"), -1);
}

TEST(Manifest, ResolvesTheArgumentList) {
  Manifest m = parseManifest(discManifest().dump());
  // 6 sizes + 6 structure arrays + 5 buffers + 1 parameter.
  ASSERT_EQ(m.args.size(), 18u);
  for (int i : {0, 5, 6, 11}) {
    EXPECT_EQ(m.args[i].source, ArgSource::Fixed);
    EXPECT_EQ(m.args[i].index, i);
  }
  EXPECT_EQ(m.args[5].name, "num_nodes");
  EXPECT_EQ(m.args[6].kind, ArgKind::Ptr);
  EXPECT_EQ(m.args[6].dtype, DType::I32);
  EXPECT_EQ(m.args[11].name, "token_node");
  EXPECT_EQ(m.args[12].source, ArgSource::Buffer);
  EXPECT_EQ(m.args[12].index, 0);
  EXPECT_EQ(m.args[16].name, "_seg_start");
  EXPECT_EQ(m.args[16].dtype, DType::I32);
  EXPECT_EQ(m.args[17].source, ArgSource::Param);
  EXPECT_EQ(m.args[17].kind, ArgKind::Scalar);
  EXPECT_EQ(m.args[17].dtype, DType::F32);
  ASSERT_TRUE(m.params[0].defaultValue.has_value());
  EXPECT_EQ(*m.params[0].defaultValue, 1.0);
}

TEST(Manifest, SynthesizesArgsWhenAbsent) {
  json j = discManifest("f64");
  j.erase("args");
  Manifest m = parseManifest(j.dump());
  ASSERT_EQ(m.args.size(), 18u);
  EXPECT_EQ(m.args[17].dtype, DType::F64);
  EXPECT_EQ(m.args[12].dtype, DType::F64);
}

TEST(Manifest, AcceptsScalarKindSpelledAsType) {
  json j = discManifest();
  j["args"][17] = {{"name", "gamma"}, {"kind", "f32"}};
  EXPECT_EQ(parseError(j), "");
  j["args"][6] = {{"name", "seq_offsets"}, {"kind", "ptr"}}; // dtype implied
  EXPECT_EQ(parseError(j), "");
}

TEST(Manifest, RejectsArgsOutOfOrder) {
  json j = discManifest();
  std::swap(j["args"][7], j["args"][8]);
  EXPECT_ERROR(j, "m.json: args[7]: expected 'seq_group' (ptr i32), got "
                  "'group_offsets' (ptr i32)");
}

TEST(Manifest, RejectsArgWithWrongType) {
  json j = discManifest();
  j["args"][17] = {{"name", "gamma"}, {"kind", "f64"}};
  EXPECT_ERROR(j, "args[17]: expected 'gamma' (scalar f32), got 'gamma' "
                  "(scalar f64)");
  j = discManifest();
  j["args"][12]["dtype"] = "f64";
  EXPECT_ERROR(j, "args[12]: expected 'x' (ptr f32)");
}

TEST(Manifest, RejectsTooFewOrTooManyArgs) {
  json j = discManifest();
  j["args"].erase(17);
  EXPECT_ERROR(j, "m.json: args: has 17 arguments, expected 18; missing "
                  "'gamma'");
  j = discManifest();
  j["args"].push_back({{"name", "extra"}, {"kind", "i64"}});
  EXPECT_ERROR(j, "args[18]: unexpected argument 'extra'");
}

TEST(Manifest, RejectsUnknownArgKind) {
  json j = discManifest();
  j["args"][0]["kind"] = "int";
  EXPECT_ERROR(j, "args[0].kind: unknown kind 'int'");
}

TEST(Manifest, ErrorsNameTheFileAndField) {
  json j = discManifest();
  j.erase("format");
  EXPECT_EQ(parseError(j, "dir/manifest.json"),
            "dir/manifest.json: missing field 'format'");

  j = discManifest();
  j["format"] = "cac-bundle-0";
  EXPECT_ERROR(j, "m.json: format: unsupported bundle format 'cac-bundle-0'");

  j = discManifest();
  j["dtype"] = "f16";
  EXPECT_ERROR(j, "m.json: dtype: expected 'f32' or 'f64', got 'f16'");

  j = discManifest();
  j["buffers"][1]["domain"] = "prompt";
  EXPECT_ERROR(j, "m.json: buffers[1].domain: unknown domain 'prompt'");

  j = discManifest();
  j["buffers"][0]["role"] = "in";
  EXPECT_ERROR(j, "buffers[0].role: unknown role 'in'");

  j = discManifest();
  j["buffers"][2].erase("name");
  EXPECT_ERROR(j, "buffers[2]: missing field 'name'");

  j = discManifest();
  j["buffers"][0]["name"] = 3;
  EXPECT_ERROR(j, "buffers[0].name: expected a string, got number");

  j = discManifest();
  j["kernels"][0]["grid"] = "token";
  EXPECT_ERROR(j, "kernels[0].grid: unknown grid 'token'");

  j = discManifest();
  j["kernels"][0]["block"] = 0;
  EXPECT_ERROR(j, "kernels[0].block: expected an integer in [1, 1024], got 0");

  j = discManifest();
  j["kernels"][0]["unit"] = "warp";
  EXPECT_ERROR(j, "kernels[0].unit: expected \"thread\" or \"block\", got \"warp\"");

  j = discManifest();
  j["kernels"][0]["unit"] = "block";
  j["kernels"][0]["block"] = 256;
  EXPECT_TRUE(parseManifest(j.dump(), "m.json").kernels[0].perBlock);

  j = discManifest();
  j["kernels"] = json::array();
  EXPECT_ERROR(j, "kernels: a bundle needs at least one kernel");

  j = discManifest();
  j["params"][0]["default"] = "0.9";
  EXPECT_ERROR(j, "params[0].default: expected a number or null, got string");

  j = discManifest();
  j["needs"] = {"graph"};
  EXPECT_ERROR(j, "needs[0]: unknown structure 'graph'");
}

TEST(Manifest, RejectsBuffersOutOfRoleOrder) {
  json j = discManifest();
  std::swap(j["buffers"][1], j["buffers"][2]);
  j.erase("args");
  EXPECT_ERROR(j, "buffers[2].role: buffer 'bonus' (input) comes after a "
                  "buffer of a later role");
}

TEST(Manifest, RejectsDuplicateAndReservedNames) {
  json j = discManifest();
  j["buffers"][1]["name"] = "x";
  EXPECT_ERROR(j, "buffers[1].name: duplicate or reserved name 'x'");
  j = discManifest();
  j["buffers"][1]["name"] = "seq_offsets";
  EXPECT_ERROR(j, "duplicate or reserved name 'seq_offsets'");
  j = discManifest();
  j["params"][0]["name"] = "ret";
  EXPECT_ERROR(j, "params[0].name: duplicate or reserved name 'ret'");
}

TEST(Manifest, RejectsNodeDomainWithoutTree) {
  json j = treeManifest();
  j["needs"] = json::array();
  EXPECT_ERROR(j, "kernels[0].grid: kernel 'tree_k0' runs over nodes but "
                  "\"needs\" does not list \"tree\"");
}

TEST(Manifest, RejectsInvalidJson) {
  try {
    parseManifest("{\"format\": ", "broken.json");
    FAIL() << "no error";
  } catch (const BundleError &e) {
    EXPECT_NE(std::string(e.what()).find("broken.json: not valid JSON"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parseManifest("[1, 2]"), BundleError);
}

TEST(Manifest, LoadNamesTheMissingFile) {
  try {
    loadManifest("/nonexistent/manifest.json");
    FAIL() << "no error";
  } catch (const BundleError &e) {
    EXPECT_EQ(std::string(e.what()),
              "/nonexistent/manifest.json: cannot open the manifest");
  }
}

} // namespace

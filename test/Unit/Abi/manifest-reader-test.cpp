//===- manifest-reader-test.cpp - Every error the manifest reader reports -===//

#include "cac/Abi/ManifestReader.h"
#include "cac/Abi/ManifestWriter.h"

#include <gtest/gtest.h>

#include <functional>

using namespace cac::abi;
using nlohmann::json;

namespace {

/// A valid manifest as JSON: f32, groups and a tree, an objective, a seg
/// buffer, two parameters, a tree and a block kernel.
json valid() {
  Manifest m;
  m.estimator = "est";
  m.source = "est.cac";
  m.needsGroups = true;
  m.needsTree = true;
  m.objective = ObjectiveSpec{"logp", "grad_logp", Domain::Token};
  m.buffers = {{"logp", BufferRole::Input, Domain::Token, DType::F32},
               {"mc", BufferRole::Input, Domain::Seg, DType::F32},
               {"adv", BufferRole::Output, Domain::Token, DType::F32},
               {"_t0", BufferRole::Scratch, Domain::Node, DType::F32}};
  m.params = {{"gamma", 1.0}, {"clip", std::nullopt}};
  m.args = m.expectedArgs();
  m.kernels = {{"est_tree", Grid::Node, 128},
               {"est_k0", Grid::Seq, 256, true, 2, "striped"}};
  return json::parse(writeManifest(m));
}

/// The error reading `j` gives ("" when it reads).
std::string errorOf(const json &j) {
  ManifestOrError r = readManifest(j.dump(), "m.json");
  EXPECT_EQ(bool(r), r.error.empty());
  return r.error;
}

TEST(ManifestReader, ReadsTheValidManifest) { EXPECT_EQ(errorOf(valid()), ""); }

TEST(ManifestReader, RejectsWhatIsNotAManifestObject) {
  ManifestOrError r = readManifest("{\"format\": ", "broken.json");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error.rfind("broken.json: not valid JSON: ", 0), 0u) << r.error;
  EXPECT_NE(r.error.find("unexpected end of input"), std::string::npos)
      << r.error;
  EXPECT_EQ(readManifest("[1, 2]", "m.json").error,
            "m.json: expected a JSON object at the top, got array");
}

struct Case {
  std::function<void(json &)> change;
  std::string error;
};

TEST(ManifestReader, NamesTheFieldOfEachError) {
  const Case cases[] = {
      // The header.
      {[](json &j) { j.erase("format"); }, "m.json: missing field 'format'"},
      {[](json &j) { j["format"] = "cac-bundle-0"; },
       "m.json: format: unsupported bundle format 'cac-bundle-0' (this "
       "reader reads 'cac-bundle-1')"},
      {[](json &j) { j["estimator"] = 1; },
       "m.json: estimator: expected a string, got number"},
      {[](json &j) { j["dtype"] = "i32"; },
       "m.json: dtype: expected 'f32' or 'f64', got 'i32'"},
      {[](json &j) { j["needs"] = "tree"; },
       "m.json: needs: expected an array, got string"},
      {[](json &j) { j["needs"] = {1}; },
       "m.json: needs[0]: expected a string, got number"},
      {[](json &j) {
         j["needs"] = {"groups", "graph"};
       },
       "m.json: needs[1]: unknown structure 'graph' (expected 'groups' or "
       "'tree')"},
      {[](json &j) { j["objective"] = {1}; },
       "m.json: objective: expected an object, got array"},
      {[](json &j) { j["objective"].erase("gradient"); },
       "m.json: objective: missing field 'gradient'"},
      {[](json &j) { j["objective"]["loss_domain"] = "prompt"; },
       "m.json: objective.loss_domain: unknown domain 'prompt' (expected "
       "token, seg, seq, group or node)"},
      // The buffers.
      {[](json &j) { j.erase("buffers"); }, "m.json: missing field 'buffers'"},
      {[](json &j) { j["buffers"] = json::object(); },
       "m.json: buffers: expected an array, got object"},
      {[](json &j) { j["buffers"][0] = "logp"; },
       "m.json: buffers[0]: expected an object, got string"},
      {[](json &j) { j["buffers"][1].erase("name"); },
       "m.json: buffers[1]: missing field 'name'"},
      {[](json &j) { j["buffers"][1]["name"] = "2x"; },
       "m.json: buffers[1].name: '2x' is not an identifier"},
      {[](json &j) { j["buffers"][1]["name"] = "logp"; },
       "m.json: buffers[1].name: duplicate or reserved name 'logp'"},
      {[](json &j) { j["buffers"][1]["name"] = "num_seqs"; },
       "m.json: buffers[1].name: duplicate or reserved name 'num_seqs'"},
      {[](json &j) { j["buffers"][0]["role"] = "in"; },
       "m.json: buffers[0].role: unknown role 'in' (expected input, output "
       "or scratch)"},
      {[](json &j) { j["buffers"][3]["role"] = "input"; },
       "m.json: buffers[3].role: buffer '_t0' (input) comes after a buffer "
       "of a later role; buffers must list inputs, then outputs, then "
       "scratch"},
      {[](json &j) { j["buffers"][2]["domain"] = "prompt"; },
       "m.json: buffers[2].domain: unknown domain 'prompt' (expected token, "
       "seg, seq, group, node or batch)"},
      {[](json &j) { j["buffers"][2]["dtype"] = "i64"; },
       "m.json: buffers[2].dtype: expected 'f32', 'f64' or 'i32', got "
       "'i64'"},
      {[](json &j) { j["buffers"][1]["layout"] = "packed"; },
       "m.json: buffers[1].layout: expected 'by-segment' or 'by-token', got "
       "'packed'"},
      {[](json &j) { j["buffers"][0]["layout"] = "by-token"; },
       "m.json: buffers[0].layout: only seg buffers have a layout ('logp' is "
       "token)"},
      {[](json &j) {
         j["needs"] = {"groups"};
         j["kernels"].erase(0);
       },
       "m.json: buffers: buffer '_t0' lives on nodes but \"needs\" does not "
       "list \"tree\""},
      // The parameters.
      {[](json &j) { j["params"] = 1; },
       "m.json: params: expected an array, got number"},
      {[](json &j) { j["params"][0] = json::array(); },
       "m.json: params[0]: expected an object, got array"},
      {[](json &j) { j["params"][1]["name"] = "adv"; },
       "m.json: params[1].name: duplicate or reserved name 'adv'"},
      {[](json &j) { j["params"][0]["default"] = "0.9"; },
       "m.json: params[0].default: expected a number or null, got string"},
      // The argument list.
      {[](json &j) { j["args"] = "all"; },
       "m.json: args: expected an array, got string"},
      {[](json &j) { j["args"][2] = 2; },
       "m.json: args[2]: expected an object, got number"},
      {[](json &j) { j["args"][2].erase("kind"); },
       "m.json: args[2]: missing field 'kind'"},
      {[](json &j) { j["args"][0]["kind"] = "int"; },
       "m.json: args[0].kind: unknown kind 'int' (expected i64, ptr, f32, "
       "f64 or param)"},
      {[](json &j) { j["args"][6]["type"] = "u8"; },
       "m.json: args[6].type: unknown type 'u8'"},
      {[](json &j) { j["args"][16]["dtype"] = "i32"; },
       "m.json: args[16]: a parameter scalar must be f32 or f64"},
      {[](json &j) { std::swap(j["args"][7], j["args"][8]); },
       "m.json: args[7]: expected 'seq_group' (ptr i32), got "
       "'group_offsets' (ptr i32) (docs/bundle.md: unit range, sizes, "
       "structure arrays, buffers, parameters)"},
      {[](json &j) { j["args"][12]["dtype"] = "f64"; },
       "m.json: args[12]: expected 'logp' (ptr f32), got 'logp' (ptr f64) "
       "(docs/bundle.md: unit range, sizes, structure arrays, buffers, "
       "parameters)"},
      {[](json &j) {
         j["args"].push_back({{"name", "x"}, {"kind", "i64"}});
       },
       "m.json: args[18]: unexpected argument 'x' (i64): docs/bundle.md "
       "prescribes 18 arguments for these buffers and parameters"},
      {[](json &j) { j["args"].erase(17); },
       "m.json: args: has 17 arguments, expected 18; missing 'clip' (scalar "
       "f32)"},
      // The kernels.
      {[](json &j) { j.erase("kernels"); }, "m.json: missing field 'kernels'"},
      {[](json &j) { j["kernels"] = json::array(); },
       "m.json: kernels: a bundle needs at least one kernel"},
      {[](json &j) { j["kernels"][1] = nullptr; },
       "m.json: kernels[1]: expected an object, got null"},
      {[](json &j) { j["kernels"][1]["name"] = "est-k0"; },
       "m.json: kernels[1].name: 'est-k0' is not a symbol name"},
      {[](json &j) { j["kernels"][1]["name"] = "est_tree"; },
       "m.json: kernels[1].name: duplicate kernel 'est_tree'"},
      {[](json &j) { j["kernels"][1]["grid"] = "token"; },
       "m.json: kernels[1].grid: unknown grid 'token' (expected seq, group, "
       "node or batch)"},
      {[](json &j) { j["kernels"][1]["block"] = 2048; },
       "m.json: kernels[1].block: expected an integer in [1, 1024], got "
       "2048"},
      {[](json &j) { j["kernels"][1]["block"] = 1.5; },
       "m.json: kernels[1].block: expected an integer in [1, 1024], got 1.5"},
      {[](json &j) { j["kernels"][1]["unit"] = "warp"; },
       "m.json: kernels[1].unit: expected \"thread\" or \"block\", got "
       "\"warp\""},
      {[](json &j) { j["kernels"][1]["items"] = 0; },
       "m.json: kernels[1].items: expected a positive integer, got 0"},
      {[](json &j) { j["kernels"][1]["layout"] = 1; },
       "m.json: kernels[1].layout: expected a string, got number"},
      {[](json &j) { j["kernels"][1]["split"] = 0; },
       "m.json: kernels[1].split: expected a positive integer, got 0"},
      {[](json &j) { j["kernels"][1]["carries"] = 1; },
       "m.json: kernels[1].carries: expected true or false, got 1"},
      {[](json &j) { j["kernels"][1]["carries"] = true; },
       "m.json: kernels[1].carries: a carries kernel must have \"split\""},
      {[](json &j) {
         j["needs"] = {"groups"};
         j["buffers"].erase(3);
         j["args"].erase(15);
       },
       "m.json: kernels[0].grid: kernel 'est_tree' runs over nodes but "
       "\"needs\" does not list \"tree\""},
  };
  for (const Case &c : cases) {
    json j = valid();
    c.change(j);
    EXPECT_EQ(errorOf(j), c.error);
  }
}

TEST(ManifestReader, SplitKernelsLaunchSeveralBlocksPerSequence) {
  // "split": N (docs/bundle.md): min(ceil(N / B), 64) blocks per sequence
  // on the GPU, one unit per sequence where a unit is a thread.
  json j = valid();
  j["kernels"][1]["split"] = 1024;
  ManifestOrError r = readManifest(j.dump());
  ASSERT_TRUE(r) << r.error;
  KernelSpec k = r.manifest->kernels[1];
  ASSERT_EQ(k.split, 1024);
  EXPECT_EQ(launchUnits(k, 256, 256), 256 * 4);
  EXPECT_EQ(launchUnits(k, 300, 300), 300 * 4);
  EXPECT_EQ(launchUnits(k, 1024, 1024), 1024);
  EXPECT_EQ(launchUnits(k, 4096, 4096), 4096);
  EXPECT_EQ(launchUnits(k, 3, 3), 3 * 64);
  EXPECT_EQ(launchUnits(k, 0, 0), 0);
  EXPECT_FALSE(r.manifest->kernels[0].split);
  EXPECT_EQ(launchUnits(r.manifest->kernels[0], 5, 256), 5);
  k.perBlock = false;
  EXPECT_EQ(launchUnits(k, 256, 256), 256);
  // The writer writes it back.
  EXPECT_EQ(json::parse(writeManifest(*r.manifest))["kernels"][1]["split"],
            1024);
}

TEST(ManifestReader, CarriesKernelIsSkippedWhereEachSequenceIsOnePart) {
  // NAME_carries composes what a part hands the later parts of its
  // sequence: with one part per sequence (B >= N) there is none, and the
  // launch rule that the runtime and gpu-sim share launches no block.
  json j = valid();
  j["kernels"][1]["split"] = 1024;
  j["kernels"][1]["carries"] = true;
  ManifestOrError r = readManifest(j.dump());
  ASSERT_TRUE(r) << r.error;
  KernelSpec k = r.manifest->kernels[1];
  ASSERT_TRUE(k.carries);
  EXPECT_EQ(launchUnits(k, 256, 256), 256 * 4);
  EXPECT_EQ(launchUnits(k, 1023, 1023), 1023 * 2);
  EXPECT_EQ(launchUnits(k, 1024, 1024), 0);
  EXPECT_EQ(launchUnits(k, 4096, 4096), 0);
  // The kernel it precedes still runs, one block per sequence.
  k.carries = false;
  EXPECT_EQ(launchUnits(k, 4096, 4096), 4096);
  EXPECT_EQ(json::parse(writeManifest(*r.manifest))["kernels"][1]["carries"],
            true);
  EXPECT_FALSE(json::parse(writeManifest(*r.manifest))["kernels"][0].contains(
      "carries"));
}

TEST(ManifestReader, AcceptsWhatTheRuntimeAlwaysAccepted) {
  // "args" may be absent (then it is the prescribed list), a scalar's kind
  // may be its type, a pointer's type may be left out or spelled "type".
  json j = valid();
  j.erase("args");
  ManifestOrError r = readManifest(j.dump());
  ASSERT_TRUE(r) << r.error;
  EXPECT_EQ(r.manifest->args.size(), kNumFixed + 4 + 2);
  j = valid();
  j["args"][16] = {{"name", "gamma"}, {"kind", "f32"}};
  j["args"][17] = {{"name", "clip"}, {"kind", "scalar"}};
  j["args"][6] = {{"name", "seq_offsets"}, {"kind", "ptr"}};
  j["args"][12] = {{"name", "logp"}, {"kind", "ptr"}, {"type", "f32"}};
  EXPECT_EQ(errorOf(j), "");
  // Optional fields may be null.
  j = valid();
  j["needs"] = nullptr;
  j["params"] = nullptr;
  j["args"] = nullptr;
  j["estimator"] = nullptr;
  j["kernels"][0]["block"] = nullptr;
  j["buffers"].erase(3);
  j["kernels"].erase(0);
  EXPECT_EQ(errorOf(j), "");
}

} // namespace

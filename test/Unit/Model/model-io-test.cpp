//===- model-io-test.cpp - Loading and saving Hugging Face folders --------===//

#include "test-util.h"

#include "cac/Runtime/Model/ModelIO.h"
#include "cac/Runtime/Model/Tokenizer.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

namespace fs = std::filesystem;
using nlohmann::json;
using namespace cac::rt;
using namespace cac::rt::test;

namespace {

at::Tensor sampleIds() {
  return at::tensor({3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8}, at::kLong)
      .view({2, 6});
}

at::Tensor logitsOf(TransformerLM m) {
  torch::NoGradGuard noGrad;
  return m->forward(sampleIds());
}

} // namespace

TEST(ModelIO, SaveLoadRoundTripIsExact) {
  TempDir dir;
  for (const char *type : {"llama", "qwen2"}) {
    SCOPED_TRACE(type);
    TransformerLM m = tinyModel(tinyConfig(32, type), 51);
    fs::path folder = dir / type;
    savePretrained(*m, folder);
    EXPECT_TRUE(fs::exists(folder / "config.json"));
    EXPECT_TRUE(fs::exists(folder / "model.safetensors"));
    auto config = json::parse(readFile(folder / "config.json"));
    EXPECT_EQ(config["model_type"], type);
    EXPECT_EQ(config["torch_dtype"], "float32");

    LoadReport report;
    TransformerLM back = loadPretrained(folder, {}, &report);
    EXPECT_TRUE(report.ok()) << report.summary();
    EXPECT_EQ(report.loaded.size(), m->named_parameters().size());
    EXPECT_EQ(back->config(), m->config());
    EXPECT_FALSE(back->hasValueHead());
    EXPECT_TRUE(at::equal(logitsOf(back), logitsOf(m)));
  }
}

TEST(ModelIO, Bfloat16Folders) {
  TempDir dir;
  TransformerLM m = tinyModel(tinyConfig(), 53);
  savePretrained(*m, dir.path(), at::kBFloat16);
  EXPECT_EQ(json::parse(readFile(dir / "config.json"))["torch_dtype"],
            "bfloat16");
  SafetensorsReader r(dir / "model.safetensors");
  EXPECT_EQ(r.entry("lm_head.weight").dtypeName, "BF16");
  TransformerLM back = loadPretrained(dir.path());
  // Weights were rounded to bf16 (8 bits of mantissa): close, not equal.
  at::Tensor a = logitsOf(back), b = logitsOf(m);
  EXPECT_FALSE(at::equal(a, b));
  EXPECT_LT(maxAbsDiff(a, b), 0.1);
  // Asked for a dtype, the model is cast after loading.
  LoadOptions o;
  o.dtype = at::kDouble;
  TransformerLM dbl = loadPretrained(dir.path(), o);
  EXPECT_EQ(dbl->model->embed_tokens->weight.scalar_type(), at::kDouble);
}

TEST(ModelIO, ShardedFoldersWithAnIndex) {
  TempDir dir;
  TransformerLM m = tinyModel(tinyConfig(), 55);
  NamedTensors all = stateDict(*m);
  NamedTensors shard1, shard2;
  json weightMap = json::object();
  for (const auto &[name, t] : all) {
    bool first = name.find("layers.1.") == std::string::npos;
    (first ? shard1 : shard2)[name] = t;
    weightMap[name] = first ? "model-00001-of-00002.safetensors"
                            : "model-00002-of-00002.safetensors";
  }
  saveSafetensors(dir / "model-00001-of-00002.safetensors", shard1);
  saveSafetensors(dir / "model-00002-of-00002.safetensors", shard2);
  writeFile(dir / "model.safetensors.index.json",
            json{{"metadata", {{"total_size", 1234}}},
                 {"weight_map", weightMap}}
                .dump());
  writeFile(dir / "config.json", m->config().toJson().dump());
  auto files = weightFiles(dir.path());
  EXPECT_EQ(files.size(), all.size());
  EXPECT_EQ(files.at("model.layers.1.mlp.up_proj.weight").filename().string(),
            "model-00002-of-00002.safetensors");
  TransformerLM back = loadPretrained(dir.path());
  EXPECT_TRUE(at::equal(logitsOf(back), logitsOf(m)));

  // An index naming a tensor its shard lacks.
  json bad = {{"weight_map", weightMap}};
  bad["weight_map"]["model.extra.weight"] = "model-00001-of-00002.safetensors";
  writeFile(dir / "model.safetensors.index.json", bad.dump());
  EXPECT_ERROR([&] { loadPretrained(dir.path()); },
               {"model.extra.weight", "model-00001-of-00002.safetensors",
                "no such tensor"});
  // A missing shard.
  bad["weight_map"].erase("model.extra.weight");
  bad["weight_map"]["model.norm.weight"] = "model-00003-of-00002.safetensors";
  writeFile(dir / "model.safetensors.index.json", bad.dump());
  EXPECT_ERROR([&] { loadPretrained(dir.path()); },
               {"model.safetensors.index.json",
                "model-00003-of-00002.safetensors", "does not exist"});
  writeFile(dir / "model.safetensors.index.json", "{\"weight_map\": [");
  EXPECT_ERROR([&] { loadPretrained(dir.path()); },
               {"model.safetensors.index.json", "invalid JSON"});
  writeFile(dir / "model.safetensors.index.json", "{\"weights\": {}}");
  EXPECT_ERROR([&] { loadPretrained(dir.path()); }, {"'weight_map'"});

  // Saving a single-file model into the folder retires the stale index.
  savePretrained(*m, dir.path());
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  EXPECT_TRUE(at::equal(logitsOf(loadPretrained(dir.path())), logitsOf(m)));
}

TEST(ModelIO, ReportsMissingUnexpectedAndMismatchedTensors) {
  TempDir dir;
  TransformerLM m = tinyModel(tinyConfig(), 57);
  NamedTensors t = stateDict(*m);
  t.erase("model.layers.0.mlp.up_proj.weight");
  t["model.layers.0.mlp.extra.weight"] = at::zeros({2});
  t["model.norm.weight"] = at::ones({17});
  saveSafetensors(dir / "model.safetensors", t);
  writeFile(dir / "config.json", m->config().toJson().dump());
  EXPECT_ERROR([&] { loadPretrained(dir.path()); },
               {dir.path().string(), "1 missing",
                "model.layers.0.mlp.up_proj.weight", "1 unexpected",
                "model.layers.0.mlp.extra.weight", "1 shape mismatch",
                "model.norm.weight: file [17] vs model [16]"});
  LoadOptions lenient;
  lenient.strict = false;
  LoadReport report;
  loadPretrained(dir.path(), lenient, &report);
  EXPECT_FALSE(report.ok());
  EXPECT_EQ(report.missing,
            std::vector<std::string>{"model.layers.0.mlp.up_proj.weight"});
  EXPECT_EQ(report.unexpected.size(), 1u);
  EXPECT_EQ(report.mismatched.size(), 1u);

  // In-memory state dicts report the same way.
  TransformerLM other = tinyModel(tinyConfig(), 58);
  EXPECT_ERROR([&] { loadWeights(*other, t, true, "my dict"); },
               {"my dict", "missing"});
  EXPECT_TRUE(loadWeights(*other, stateDict(*m)).ok());
  EXPECT_TRUE(at::equal(logitsOf(other), logitsOf(m)));
}

TEST(ModelIO, HuggingFaceConventions) {
  // A tied model ignores a stored lm_head.weight and HF's rotary buffers.
  TempDir dir;
  ModelConfig c = tinyConfig();
  c.tieWordEmbeddings = true;
  TransformerLM m = tinyModel(c, 59);
  NamedTensors t = stateDict(*m);
  t["lm_head.weight"] = t["model.embed_tokens.weight"].clone();
  t["model.layers.0.self_attn.rotary_emb.inv_freq"] = at::ones({2});
  for (auto &[n, x] : t)
    x = x.to(at::kBFloat16);
  saveSafetensors(dir / "model.safetensors", t, {{"format", "pt"}});
  json config = json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 32,
    "rms_norm_eps": 1e-06, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "transformers_version": "4.45.0"})");
  writeFile(dir / "config.json", config.dump());
  LoadReport report;
  TransformerLM back = loadPretrained(dir.path(), {}, &report);
  EXPECT_TRUE(report.ok()) << report.summary();
  EXPECT_EQ(report.ignored.size(), 2u);
  EXPECT_LT(maxAbsDiff(logitsOf(back), logitsOf(m)), 0.1);
}

TEST(ModelIO, ValueHeads) {
  TempDir dir;
  TransformerLM policy = tinyModel(tinyConfig(), 61);
  savePretrained(*policy, dir / "policy");
  EXPECT_FALSE(loadPretrained(dir / "policy")->hasValueHead());
  LoadOptions with;
  with.valueHead = ValueHeadMode::With;
  LoadReport report;
  TransformerLM critic = loadPretrained(dir / "policy", with, &report);
  EXPECT_TRUE(critic->hasValueHead());
  EXPECT_TRUE(report.ok()) << report.summary();
  EXPECT_EQ(report.initialized,
            (std::vector<std::string>{"value_head.weight", "value_head.bias"}));

  savePretrained(*critic, dir / "critic");
  TransformerLM back = loadPretrained(dir / "critic");
  ASSERT_TRUE(back->hasValueHead());
  torch::NoGradGuard noGrad;
  EXPECT_TRUE(at::equal(back->valueHead(back->forwardHidden(sampleIds())),
                        critic->valueHead(critic->forwardHidden(sampleIds()))));
  LoadOptions without;
  without.valueHead = ValueHeadMode::Without;
  EXPECT_ERROR([&] { loadPretrained(dir / "critic", without); },
               {"unexpected", "value_head.weight"});
}

TEST(ModelIO, BrokenFolders) {
  TempDir dir;
  EXPECT_ERROR([&] { loadPretrained(dir.path()); }, {"config.json"});
  TransformerLM m = tinyModel(tinyConfig(), 63);
  writeFile(dir / "config.json", m->config().toJson().dump());
  EXPECT_ERROR([&] { loadPretrained(dir.path()); },
               {dir.path().string(), "neither model.safetensors"});
  savePretrained(*m, dir.path());
  truncateFile(dir / "model.safetensors", 100);
  EXPECT_ERROR([&] { loadPretrained(dir.path()); },
               {"model.safetensors", "truncated"});
  // A config that disagrees with the weights.
  savePretrained(*m, dir.path());
  json c = m->config().toJson();
  c["intermediate_size"] = 20;
  writeFile(dir / "config.json", c.dump());
  EXPECT_ERROR([&] { loadPretrained(dir.path()); },
               {"shape mismatch", "mlp.up_proj.weight"});
}

TEST(ModelIO, CopyTokenizerFiles) {
  TempDir src, dst;
  writeFile(src / "tokenizer.json", "{}");
  writeFile(src / "tokenizer_config.json", "{\"eos_token\": \"x\"}");
  copyTokenizerFiles(src.path(), dst / "out");
  EXPECT_EQ(readFile(dst / "out" / "tokenizer.json"), "{}");
  EXPECT_TRUE(fs::exists(dst / "out" / "tokenizer_config.json"));
  EXPECT_FALSE(fs::exists(dst / "out" / "generation_config.json"));
}

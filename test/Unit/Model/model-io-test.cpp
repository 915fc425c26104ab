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

namespace {

/// A model large enough that its tensors, not LibTorch's bookkeeping,
/// decide what the host holds: about 0.3 M parameters, the largest tensor
/// the 2000 x 64 embedding.
ModelConfig loadTestConfig() {
  ModelConfig c = tinyConfig(2000, "qwen2");
  c.hiddenSize = 64;
  c.intermediateSize = 128;
  c.numAttentionHeads = 4;
  c.numKeyValueHeads = 2;
  return c;
}

int64_t paramBytes(const TransformerLMImpl &m) {
  int64_t n = 0;
  for (const auto &p : m.parameters())
    n += p.numel() * p.element_size();
  return n;
}

/// Every parameter of \p a equals \p b's, bit for bit, in the same dtype.
void expectSameParameters(const TransformerLMImpl &a,
                          const TransformerLMImpl &b) {
  auto pb = b.named_parameters();
  for (const auto &p : a.named_parameters()) {
    SCOPED_TRACE(p.key());
    ASSERT_NE(pb.find(p.key()), nullptr);
    EXPECT_EQ(p.value().scalar_type(), pb[p.key()].scalar_type());
    EXPECT_TRUE(at::equal(p.value(), pb[p.key()]));
  }
  EXPECT_EQ(a.named_parameters().size(), b.named_parameters().size());
}

/// The bytes the host holds above what it held before, at most, while
/// \p fn runs.
int64_t peakHostBytes(const std::function<void()> &fn) {
  CpuAllocationCounter counter;
  fn();
  return counter.peakBytes();
}

} // namespace

TEST(ModelLoad, TargetDtypeEqualsLoadingInFloat32ThenCasting) {
  TempDir dir;
  TransformerLM m = tinyModel(loadTestConfig(), 71, /*valueHead=*/true);
  for (at::ScalarType stored : {at::kFloat, at::kBFloat16, at::kHalf}) {
    SCOPED_TRACE(c10::toString(stored));
    fs::path folder = dir / c10::toString(stored);
    savePretrained(*m, folder, stored);
    LoadOptions o;
    o.dtype = at::kBFloat16;
    TransformerLM direct = loadPretrained(folder, o);
    EXPECT_EQ(direct->dtype(), at::kBFloat16);
    for (const auto &p : direct->parameters())
      EXPECT_EQ(p.scalar_type(), at::kBFloat16);
    TransformerLM cast = loadPretrained(folder);
    EXPECT_EQ(cast->dtype(), at::kFloat);
    cast->to(at::kBFloat16);
    expectSameParameters(*direct, *cast);
    torch::NoGradGuard noGrad;
    EXPECT_TRUE(at::equal(direct->forward(sampleIds()),
                          cast->forward(sampleIds())));
  }
}

TEST(ModelLoad, ShardedFoldersLoadTensorByTensor) {
  TempDir dir;
  TransformerLM m = tinyModel(loadTestConfig(), 73);
  NamedTensors shard1, shard2;
  json weightMap = json::object();
  for (const auto &[name, t] : stateDict(*m)) {
    bool first = name.find("layers.1.") == std::string::npos;
    (first ? shard1 : shard2)[name] = t.to(at::kBFloat16);
    weightMap[name] = first ? "a.safetensors" : "b.safetensors";
  }
  saveSafetensors(dir / "a.safetensors", shard1);
  saveSafetensors(dir / "b.safetensors", shard2);
  writeFile(dir / "model.safetensors.index.json",
            json{{"weight_map", weightMap}}.dump());
  writeFile(dir / "config.json", m->config().toJson().dump());
  LoadOptions o;
  o.dtype = at::kBFloat16;
  LoadReport report;
  TransformerLM direct = loadPretrained(dir.path(), o, &report);
  EXPECT_TRUE(report.ok()) << report.summary();
  EXPECT_EQ(report.largestStagingBytes, 0u);
  TransformerLM cast = loadPretrained(dir.path());
  cast->to(at::kBFloat16);
  expectSameParameters(*direct, *cast);
}

TEST(ModelLoad, TheHostHoldsTheParametersAndOneTensor) {
  TempDir dir;
  TransformerLM m = tinyModel(loadTestConfig(), 75);
  savePretrained(*m, dir / "bf16", at::kBFloat16);
  savePretrained(*m, dir / "f32", at::kFloat);
  // Its once-per-process probe is not part of a load.
  checkModelDtype(at::kBFloat16, torch::kCPU);
  const int64_t bf16Bytes = paramBytes(*m) / 2;
  const int64_t largestF32 = 2000 * 64 * 4;
  // LibTorch's own small tensors (the rotary frequencies, views).
  const int64_t slack = 64 << 10;
  LoadOptions o;
  o.dtype = at::kBFloat16;

  // The stored dtype: read in place, nothing staged.
  LoadReport report;
  TransformerLM a{nullptr};
  int64_t direct =
      peakHostBytes([&] { a = loadPretrained(dir / "bf16", o, &report); });
  EXPECT_EQ(report.largestStagingBytes, 0u);
  EXPECT_GE(direct, bf16Bytes);
  EXPECT_LE(direct, bf16Bytes + slack);

  // Converted: one tensor's stored bytes at a time.
  TransformerLM b{nullptr};
  int64_t converted =
      peakHostBytes([&] { b = loadPretrained(dir / "f32", o, &report); });
  EXPECT_EQ(report.largestStagingBytes, uint64_t(largestF32));
  EXPECT_LE(converted, bf16Bytes + largestF32 + slack);
  expectSameParameters(*a, *b);

  // Loading in float32 (and casting) holds the float32 copy.
  int64_t viaFloat32 = peakHostBytes([&] {
    TransformerLM c = loadPretrained(dir / "bf16");
    c->to(at::kBFloat16);
  });
  EXPECT_GE(viaFloat32, 2 * bf16Bytes);
  std::printf("host bytes to load %lld parameters in bfloat16: %lld from "
              "BF16, %lld from F32; %lld loading float32 then casting\n",
              static_cast<long long>(m->numParameters()),
              static_cast<long long>(direct),
              static_cast<long long>(converted),
              static_cast<long long>(viaFloat32));
}

TEST(ModelLoad, RefusesWhatDoesNotFitBeforeAllocating) {
  TempDir dir;
  TransformerLM m = tinyModel(loadTestConfig(), 77);
  savePretrained(*m, dir.path());
  double needed = parameterBytes(m->config(), false, at::kBFloat16);
  EXPECT_EQ(needed, double(paramBytes(*m) / 2));
  EXPECT_EQ(parameterBytes(m->config(), true, at::kFloat),
            double(paramBytes(*m) + 4 * (64 + 1)));
  LoadOptions o;
  o.dtype = at::kBFloat16;
  std::vector<std::string> asked;
  o.availableMemory = [&](const torch::Device &d) {
    asked.push_back(d.str());
    return needed - 1;
  };
  int64_t peak = peakHostBytes([&] {
    EXPECT_ERROR([&] { loadPretrained(dir.path(), o); },
                 {"model folder '" + dir.path().string() + "'", "bfloat16",
                  std::to_string(int64_t(needed)) + " bytes",
                  std::to_string(int64_t(needed) - 1) + " bytes) available",
                  "on cpu"});
  });
  EXPECT_EQ(peak, 0) << "allocated before refusing";
  EXPECT_EQ(asked, std::vector<std::string>{"cpu"});
  // Exactly enough is enough.
  o.availableMemory = [&](const torch::Device &) { return needed; };
  EXPECT_EQ(loadPretrained(dir.path(), o)->dtype(), at::kBFloat16);
  // A CUDA target is checked against what the caller says it has, before
  // anything touches the device (none is needed to be refused).
  o.device = torch::Device(torch::kCUDA, 0);
  o.availableMemory = [&](const torch::Device &) { return 1000.0; };
  EXPECT_ERROR([&] { loadPretrained(dir.path(), o); },
               {dir.path().string(), "on cuda:0",
                "(1000 bytes) available"});
  // Unknown memory (-1) is not a refusal.
  o.device.reset();
  o.availableMemory = [](const torch::Device &) { return -1.0; };
  EXPECT_EQ(loadPretrained(dir.path(), o)->dtype(), at::kBFloat16);
}

TEST(ModelLoad, FreshValueHeadAndMissingTensorsAreInitialized) {
  TempDir dir;
  TransformerLM m = tinyModel(tinyConfig(), 79);
  savePretrained(*m, dir.path(), at::kBFloat16);
  LoadOptions o;
  o.dtype = at::kBFloat16;
  o.valueHead = ValueHeadMode::With;
  LoadReport report;
  TransformerLM critic = loadPretrained(dir.path(), o, &report);
  EXPECT_EQ(critic->value_head->weight.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(critic->value_head->bias,
                        at::zeros({1}, at::kBFloat16)));
  at::Tensor w = critic->value_head->weight.to(at::kFloat);
  EXPECT_TRUE(at::isfinite(w).all().item<bool>());
  EXPECT_GT(w.abs().max().item<float>(), 0.0f);
  EXPECT_LT(w.abs().max().item<float>(), 0.2f); // normal(0, 0.02)
  // Non-strict: what no file has is initialized as a fresh model's is
  // (norms to one), never left as uninitialized memory.
  NamedTensors partial = stateDict(*m);
  partial.erase("model.norm.weight");
  saveSafetensors(dir / "model.safetensors", partial);
  o.strict = false;
  o.valueHead = ValueHeadMode::Without;
  TransformerLM part = loadPretrained(dir.path(), o, &report);
  EXPECT_EQ(report.missing, std::vector<std::string>{"model.norm.weight"});
  EXPECT_TRUE(at::equal(part->model->norm->weight,
                        at::ones({16}, at::kBFloat16)));
}

TEST(ModelLoad, Float16WhereTheDeviceRunsIt) {
  TempDir dir;
  TransformerLM m = tinyModel(tinyConfig(), 81);
  savePretrained(*m, dir.path(), at::kHalf);
  LoadOptions o;
  o.dtype = at::kHalf;
  std::string cpuError =
      errorOf([] { checkModelDtype(at::kHalf, torch::kCPU); });
  if (cpuError != "<no exception>") {
    // Refused before anything is read, naming the folder.
    o.availableMemory = [](const torch::Device &) -> double {
      ADD_FAILURE() << "the memory was asked for";
      return -1;
    };
    EXPECT_ERROR([&] { loadPretrained(dir.path(), o); },
                 {"model folder '" + dir.path().string() + "'",
                  "a float16 model cannot run on the CPU"});
    return;
  }
  TransformerLM half = loadPretrained(dir.path(), o);
  TransformerLM cast = loadPretrained(dir.path());
  cast->to(at::kHalf);
  expectSameParameters(*half, *cast);
}

TEST(ModelLoad, FreshModulesDrawWhatLibTorchsDraw) {
  // A seed gives the model it always gave: Linear and Embedding take the
  // parameters of LibTorch's own modules.
  torch::manual_seed(5);
  torch::nn::Linear ref(torch::nn::LinearOptions(6, 3).bias(true));
  torch::nn::Embedding refEmb(7, 3);
  torch::manual_seed(5);
  Linear lin(6, 3, true);
  Embedding emb(7, 3);
  EXPECT_TRUE(at::equal(lin->weight, ref->weight));
  EXPECT_TRUE(at::equal(lin->bias, ref->bias));
  EXPECT_TRUE(at::equal(emb->weight, refEmb->weight));
  at::Tensor x = at::randn({2, 6});
  EXPECT_TRUE(at::equal(lin(x), ref(x)));
  at::Tensor ids = at::tensor({0, 6, 3}, at::kLong);
  EXPECT_TRUE(at::equal(emb(ids), refEmb(ids)));
  // Uninitialized ones are allocated as asked and drawn from nothing.
  at::Tensor before = at::detail::getDefaultCPUGenerator().get_state();
  Linear u(6, 3, false, at::TensorOptions().dtype(at::kBFloat16));
  EXPECT_EQ(u->weight.scalar_type(), at::kBFloat16);
  EXPECT_FALSE(u->bias.defined());
  EXPECT_TRUE(at::equal(before,
                        at::detail::getDefaultCPUGenerator().get_state()));
}

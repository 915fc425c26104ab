//===- config-test.cpp - HF config.json parsing ---------------------------===//

#include "test-util.h"

#include "cac/Runtime/Model/Architectures.h"
#include "cac/Runtime/Model/Config.h"
#include "cac/Runtime/Model/Transformer.h"

#include <map>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;
using nlohmann::json;
using namespace cac::rt;
using namespace cac::rt::test;

namespace {

/// The config.json of Qwen2.5-0.5B-Instruct, as published.
json qwen25Config() {
  return json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "hidden_act": "silu",
    "hidden_size": 896, "initializer_range": 0.02, "intermediate_size": 4864,
    "max_position_embeddings": 32768, "max_window_layers": 21,
    "model_type": "qwen2", "num_attention_heads": 14,
    "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 32768,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.1", "use_cache": true,
    "use_sliding_window": false, "vocab_size": 151936})");
}

/// The config.json of Llama 3.2 1B.
json llama32Config() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009], "head_dim": 64,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 8192, "max_position_embeddings": 131072,
    "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 16, "num_key_value_heads": 8, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0,
                     "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192,
                     "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 128256})");
}

} // namespace

TEST(Config, ParsesQwen2) {
  ModelConfig c = ModelConfig::fromJson(qwen25Config());
  EXPECT_EQ(c.modelType, "qwen2");
  EXPECT_EQ(c.vocabSize, 151936);
  EXPECT_EQ(c.hiddenSize, 896);
  EXPECT_EQ(c.numAttentionHeads, 14);
  EXPECT_EQ(c.numKeyValueHeads, 2);
  EXPECT_EQ(c.headDimension(), 64);
  EXPECT_TRUE(c.attentionBias) << "Qwen2 always has q/k/v biases";
  EXPECT_FALSE(c.mlpBias);
  EXPECT_TRUE(c.tieWordEmbeddings);
  EXPECT_DOUBLE_EQ(c.ropeTheta, 1e6);
  EXPECT_DOUBLE_EQ(c.rmsNormEps, 1e-6);
  EXPECT_EQ(c.ropeScaling.type, "none");
  EXPECT_EQ(c.bosTokenId, std::optional<int64_t>(151643));
  EXPECT_EQ(c.eosTokenIds, std::vector<int64_t>{151645});
}

TEST(Config, ParsesLlama3WithRopeScaling) {
  ModelConfig c = ModelConfig::fromJson(llama32Config());
  EXPECT_EQ(c.modelType, "llama");
  EXPECT_EQ(c.headDimension(), 64);
  EXPECT_FALSE(c.attentionBias);
  EXPECT_EQ(c.ropeScaling.type, "llama3");
  EXPECT_DOUBLE_EQ(c.ropeScaling.factor, 32.0);
  EXPECT_EQ(c.ropeScaling.originalMaxPositionEmbeddings, 8192);
  EXPECT_EQ(c.eosTokenIds, (std::vector<int64_t>{128001, 128008, 128009}));
  // Defaults: no num_key_value_heads means multi-head attention.
  json j = llama32Config();
  j.erase("num_key_value_heads");
  j.erase("head_dim");
  EXPECT_EQ(ModelConfig::fromJson(j).numKeyValueHeads, 32);
  EXPECT_EQ(ModelConfig::fromJson(j).headDimension(), 64);
}

TEST(Config, JsonRoundTrip) {
  for (const json &j : {qwen25Config(), llama32Config()}) {
    ModelConfig c = ModelConfig::fromJson(j);
    ModelConfig back = ModelConfig::fromJson(c.toJson());
    EXPECT_EQ(back, c);
    EXPECT_EQ(back.toJson(), c.toJson());
  }
  ModelConfig small = ModelConfig::builtinSmall(99);
  EXPECT_EQ(ModelConfig::fromJson(small.toJson()), small);
  EXPECT_EQ(small.numAttentionHeads % small.numKeyValueHeads, 0);
  EXPECT_NE(small, ModelConfig::builtinSmall(100));
}

TEST(Config, FromFile) {
  TempDir dir;
  writeFile(dir / "config.json", qwen25Config().dump(2));
  EXPECT_EQ(ModelConfig::fromFile(dir / "config.json").hiddenSize, 896);
  writeFile(dir / "config.json", "{\"model_type\": \"llama\",");
  EXPECT_ERROR([&] { ModelConfig::fromFile(dir / "config.json"); },
               {(dir / "config.json").string(), "invalid JSON"});
  EXPECT_ERROR([&] { ModelConfig::fromFile(dir / "absent.json"); },
               {"absent.json"});
}

TEST(Config, ErrorsNameTheFileAndTheField) {
  auto expectBad = [](json j, std::initializer_list<std::string> parts) {
    SCOPED_TRACE(j.dump().substr(0, 100));
    std::string msg =
        errorOf([&] { ModelConfig::fromJson(j, "some/config.json"); });
    EXPECT_NE(msg.find("some/config.json"), std::string::npos) << msg;
    for (const std::string &p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << msg << "\nwants: " << p;
  };
  json j = qwen25Config();
  j.erase("hidden_size");
  expectBad(j, {"missing required field 'hidden_size'"});
  j = qwen25Config();
  j["model_type"] = "gpt2";
  expectBad(j, {"model_type 'gpt2'", "not supported"});
  j = qwen25Config();
  j.erase("model_type");
  expectBad(j, {"model_type"});
  j = qwen25Config();
  j["vocab_size"] = "many";
  expectBad(j, {"'vocab_size'", "integer"});
  j = qwen25Config();
  j["num_hidden_layers"] = 0;
  expectBad(j, {"'num_hidden_layers'", "positive"});
  j = qwen25Config();
  j["num_key_value_heads"] = 4; // 14 heads
  expectBad(j, {"not divisible by num_key_value_heads 4"});
  j = qwen25Config();
  j["hidden_size"] = 900; // 900 / 14
  expectBad(j, {"hidden_size 900", "num_attention_heads 14"});
  j = qwen25Config();
  j["head_dim"] = 63;
  expectBad(j, {"head dimension 63", "even"});
  j = qwen25Config();
  j["hidden_act"] = "gelu";
  expectBad(j, {"hidden_act 'gelu'"});
  j = qwen25Config();
  j["hidden_act"] = 3;
  expectBad(j, {"malformed field"});
  j = qwen25Config();
  j["use_sliding_window"] = true;
  expectBad(j, {"use_sliding_window"});
  j = qwen25Config();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expectBad(j, {"rope_scaling type 'yarn'"});
  j = qwen25Config();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", -1.0}};
  expectBad(j, {"rope_scaling.factor"});
  j = qwen25Config();
  j["rms_norm_eps"] = "small";
  expectBad(j, {"'rms_norm_eps'", "number"});
  j = qwen25Config();
  j["tie_word_embeddings"] = 1;
  expectBad(j, {"'tie_word_embeddings'", "true or false"});
  expectBad(json::array({1, 2}), {"not a JSON object"});
}

// A config whose weights cannot fit in memory (1e9 layers) is refused with
// the estimate before any tensor is allocated.
TEST(Config, WeightsThatCannotFitAreRefusedUpFront) {
  json j = qwen25Config();
  j["num_hidden_layers"] = 1000000000;
  std::string msg =
      errorOf([&] { ModelConfig::fromJson(j, "some/config.json"); });
  EXPECT_NE(msg.find("some/config.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the model's weights alone need about"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("num_hidden_layers 1000000000"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("GiB of memory"), std::string::npos) << msg;
  j = qwen25Config();
  EXPECT_NO_THROW(ModelConfig::fromJson(j, "some/config.json"));
}

TEST(Architectures, PublicShapesHaveThePublishedParameterCounts) {
  // The totals of the public checkpoints' safetensors (tied embeddings).
  std::map<std::string, double> published = {{"qwen2.5-0.5b", 494032768.0},
                                             {"qwen2.5-1.5b", 1543714304.0},
                                             {"llama-3.2-1b", 1235814400.0}};
  ASSERT_EQ(publicArchitectureNames().size(), published.size());
  for (const std::string &name : publicArchitectureNames()) {
    std::optional<ModelConfig> c = publicArchitecture(name);
    ASSERT_TRUE(c) << name;
    EXPECT_NO_THROW(c->validate(name));
    EXPECT_EQ(c->numParameters(), published.at(name)) << name;
    // The config.json form reads back as the same config.
    EXPECT_EQ(ModelConfig::fromJson(c->toJson()), *c) << name;
  }
  EXPECT_FALSE(publicArchitecture("qwen2.5-7b"));
}

TEST(Architectures, TheModulesHaveTheCountedParameters) {
  // One layer of Qwen2.5-0.5B (its 136M embedding included) and of a
  // llama with MLP biases: what numParameters counts is what is built.
  ModelConfig c = *publicArchitecture("qwen2.5-0.5b");
  c.numHiddenLayers = 1;
  TransformerLM qwen(c);
  EXPECT_EQ(double(qwen->numParameters()), c.numParameters());
  ModelConfig l = ModelConfig::builtinSmall(50);
  l.mlpBias = true;
  l.attentionBias = true;
  l.tieWordEmbeddings = false;
  TransformerLM llama(l);
  EXPECT_EQ(double(llama->numParameters()), l.numParameters());
}

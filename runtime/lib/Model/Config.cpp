//===- Config.cpp - Transformer configuration (HF config.json) ------------===//

#include "cac/Runtime/Model/Config.h"
#include "cac/Runtime/Support/FileUtil.h"

#include <cstdio>
#include <stdexcept>
#include <unistd.h>

using nlohmann::json;

namespace cac::rt {

namespace {

[[noreturn]] void fail(const std::string &source, const std::string &what) {
  throw std::runtime_error(source + ": " + what);
}

int64_t requireInt(const json &j, const char *key, const std::string &src) {
  if (!j.contains(key))
    fail(src, std::string("missing required field '") + key + "'");
  const json &v = j[key];
  if (!v.is_number_integer())
    fail(src, std::string("field '") + key + "' must be an integer, got " +
                  v.dump());
  int64_t x = v.get<int64_t>();
  if (x <= 0)
    fail(src, std::string("field '") + key + "' must be positive, got " +
                  std::to_string(x));
  return x;
}

double optNumber(const json &j, const char *key, double dflt,
                 const std::string &src) {
  if (!j.contains(key) || j[key].is_null())
    return dflt;
  if (!j[key].is_number())
    fail(src, std::string("field '") + key + "' must be a number, got " +
                  j[key].dump());
  return j[key].get<double>();
}

bool optBool(const json &j, const char *key, bool dflt,
             const std::string &src) {
  if (!j.contains(key) || j[key].is_null())
    return dflt;
  if (!j[key].is_boolean())
    fail(src, std::string("field '") + key + "' must be true or false, got " +
                  j[key].dump());
  return j[key].get<bool>();
}

std::optional<int64_t> optId(const json &j, const char *key) {
  if (j.contains(key) && j[key].is_number_integer())
    return j[key].get<int64_t>();
  return std::nullopt;
}

} // namespace

namespace {
ModelConfig parseConfig(const json &j, const std::string &src);
} // namespace

ModelConfig ModelConfig::fromJson(const json &j, const std::string &src) {
  // Fields of an unexpected JSON type that slip past the checks below (a
  // number where a string is expected, say) surface as json exceptions; give
  // them the file name too.
  try {
    return parseConfig(j, src);
  } catch (const json::exception &e) {
    fail(src, std::string("malformed field: ") + e.what());
  }
}

namespace {
ModelConfig parseConfig(const json &j, const std::string &src) {
  if (!j.is_object())
    fail(src, "not a JSON object");
  ModelConfig c;
  if (!j.contains("model_type") || !j["model_type"].is_string())
    fail(src, "missing required string field 'model_type' (llama or qwen2)");
  c.modelType = j["model_type"].get<std::string>();
  if (c.modelType != "llama" && c.modelType != "qwen2")
    fail(src, "model_type '" + c.modelType +
                  "' is not supported (llama or qwen2)");
  c.vocabSize = requireInt(j, "vocab_size", src);
  c.hiddenSize = requireInt(j, "hidden_size", src);
  c.intermediateSize = requireInt(j, "intermediate_size", src);
  c.numHiddenLayers = requireInt(j, "num_hidden_layers", src);
  c.numAttentionHeads = requireInt(j, "num_attention_heads", src);
  c.numKeyValueHeads = j.contains("num_key_value_heads") &&
                               !j["num_key_value_heads"].is_null()
                           ? requireInt(j, "num_key_value_heads", src)
                           : c.numAttentionHeads;
  if (j.contains("head_dim") && !j["head_dim"].is_null())
    c.headDim = requireInt(j, "head_dim", src);
  if (j.contains("max_position_embeddings"))
    c.maxPositionEmbeddings = requireInt(j, "max_position_embeddings", src);
  c.rmsNormEps = optNumber(j, "rms_norm_eps", 1e-6, src);
  c.ropeTheta = optNumber(j, "rope_theta", 10000.0, src);
  if (c.rmsNormEps <= 0)
    fail(src, "field 'rms_norm_eps' must be positive");
  if (c.ropeTheta <= 0)
    fail(src, "field 'rope_theta' must be positive");
  c.tieWordEmbeddings = optBool(j, "tie_word_embeddings", false, src);
  c.attentionBias = c.modelType == "qwen2"
                        ? true
                        : optBool(j, "attention_bias", false, src);
  c.mlpBias = optBool(j, "mlp_bias", false, src);

  std::string act = j.value("hidden_act", std::string("silu"));
  if (act != "silu" && act != "swish")
    fail(src, "hidden_act '" + act + "' is not supported (silu)");
  if (optBool(j, "use_sliding_window", false, src))
    fail(src, "use_sliding_window is not supported");

  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const json &r = j["rope_scaling"];
    if (!r.is_object())
      fail(src, "field 'rope_scaling' must be an object or null");
    std::string type = r.value("rope_type", r.value("type", std::string()));
    if (type == "default" || type.empty()) {
      // Nothing to do.
    } else if (type == "linear" || type == "llama3") {
      c.ropeScaling.type = type;
      c.ropeScaling.factor = optNumber(r, "factor", 1.0, src);
      if (c.ropeScaling.factor <= 0)
        fail(src, "rope_scaling.factor must be positive");
      if (type == "llama3") {
        c.ropeScaling.lowFreqFactor = optNumber(r, "low_freq_factor", 1.0, src);
        c.ropeScaling.highFreqFactor =
            optNumber(r, "high_freq_factor", 4.0, src);
        c.ropeScaling.originalMaxPositionEmbeddings = static_cast<int64_t>(
            optNumber(r, "original_max_position_embeddings", 8192, src));
        if (c.ropeScaling.highFreqFactor <= c.ropeScaling.lowFreqFactor)
          fail(src, "rope_scaling: high_freq_factor must exceed "
                    "low_freq_factor");
      }
    } else {
      fail(src, "rope_scaling type '" + type +
                    "' is not supported (linear, llama3)");
    }
  }
  c.bosTokenId = optId(j, "bos_token_id");
  c.padTokenId = optId(j, "pad_token_id");
  if (j.contains("eos_token_id")) {
    const json &e = j["eos_token_id"];
    if (e.is_number_integer())
      c.eosTokenIds.push_back(e.get<int64_t>());
    else if (e.is_array())
      for (const json &x : e)
        if (x.is_number_integer())
          c.eosTokenIds.push_back(x.get<int64_t>());
  }
  c.validate(src);
  return c;
}
} // namespace

ModelConfig ModelConfig::fromFile(const std::filesystem::path &path) {
  std::string text = readFileToString(path);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception &e) {
    fail(path.string(), std::string("invalid JSON: ") + e.what());
  }
  return fromJson(j, path.string());
}

ModelConfig ModelConfig::builtinSmall(int64_t vocabSize) {
  ModelConfig c;
  c.modelType = "llama";
  c.vocabSize = vocabSize;
  c.hiddenSize = 128;
  c.intermediateSize = 384;
  c.numHiddenLayers = 4;
  c.numAttentionHeads = 4;
  c.numKeyValueHeads = 2;
  c.maxPositionEmbeddings = 512;
  c.rmsNormEps = 1e-5;
  c.ropeTheta = 10000.0;
  c.tieWordEmbeddings = true;
  c.validate("builtin small config");
  return c;
}

namespace {

/// Refuses a config whose float32 weights alone exceed this machine's
/// memory (a config.json of 1e9 layers), before anything is allocated;
/// training needs several times the weights, so this never refuses a model
/// that could train.
void checkWeightsFit(const ModelConfig &c, const std::string &src) {
  double params = c.numParameters();
  double bytes = 4 * params;
  double memory = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
                  static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (memory > 0 && bytes > memory) {
    char what[200];
    std::snprintf(what, sizeof what,
                  "the model's weights alone need about %.3g GiB (%.3g "
                  "parameters in float32, num_hidden_layers %lld), more "
                  "than this machine's %.3g GiB of memory",
                  bytes / (1 << 30), params,
                  static_cast<long long>(c.numHiddenLayers),
                  memory / (1 << 30));
    fail(src, what);
  }
}

} // namespace

double ModelConfig::numParameters() const {
  // In doubles: a config.json's products can overflow int64.
  double hidden = static_cast<double>(hiddenSize);
  double q = static_cast<double>(numAttentionHeads * headDimension());
  double kv = static_cast<double>(numKeyValueHeads * headDimension());
  double ffn = static_cast<double>(intermediateSize);
  double attention = hidden * (2 * q + 2 * kv) + (attentionBias ? q + 2 * kv : 0);
  double mlp = 3 * hidden * ffn + (mlpBias ? 2 * ffn + hidden : 0);
  double perLayer = attention + mlp + 2 * hidden; // two RMSNorms
  return static_cast<double>(numHiddenLayers) * perLayer + hidden +
         static_cast<double>(vocabSize) * hidden * (tieWordEmbeddings ? 1 : 2);
}

void ModelConfig::validate(const std::string &src) const {
  auto positive = [&](int64_t v, const char *name) {
    if (v <= 0)
      fail(src, std::string(name) + " must be positive, got " +
                    std::to_string(v));
  };
  positive(vocabSize, "vocab_size");
  positive(hiddenSize, "hidden_size");
  positive(intermediateSize, "intermediate_size");
  positive(numHiddenLayers, "num_hidden_layers");
  positive(numAttentionHeads, "num_attention_heads");
  positive(numKeyValueHeads, "num_key_value_heads");
  positive(maxPositionEmbeddings, "max_position_embeddings");
  if (headDim == 0 && hiddenSize % numAttentionHeads != 0)
    fail(src, "hidden_size " + std::to_string(hiddenSize) +
                  " is not divisible by num_attention_heads " +
                  std::to_string(numAttentionHeads));
  if (numAttentionHeads % numKeyValueHeads != 0)
    fail(src, "num_attention_heads " + std::to_string(numAttentionHeads) +
                  " is not divisible by num_key_value_heads " +
                  std::to_string(numKeyValueHeads));
  if (headDimension() % 2 != 0)
    fail(src, "the head dimension " + std::to_string(headDimension()) +
                  " must be even for RoPE");
  checkWeightsFit(*this, src);
}

json ModelConfig::toJson() const {
  json j = {
      {"architectures", {modelType == "qwen2" ? "Qwen2ForCausalLM"
                                              : "LlamaForCausalLM"}},
      {"model_type", modelType},
      {"vocab_size", vocabSize},
      {"hidden_size", hiddenSize},
      {"intermediate_size", intermediateSize},
      {"num_hidden_layers", numHiddenLayers},
      {"num_attention_heads", numAttentionHeads},
      {"num_key_value_heads", numKeyValueHeads},
      {"max_position_embeddings", maxPositionEmbeddings},
      {"rms_norm_eps", rmsNormEps},
      {"rope_theta", ropeTheta},
      {"tie_word_embeddings", tieWordEmbeddings},
      {"hidden_act", "silu"},
      {"torch_dtype", "float32"},
  };
  if (headDim > 0)
    j["head_dim"] = headDim;
  if (modelType == "llama") {
    j["attention_bias"] = attentionBias;
    j["mlp_bias"] = mlpBias;
  }
  if (ropeScaling.type == "none") {
    j["rope_scaling"] = nullptr;
  } else {
    json r = {{"rope_type", ropeScaling.type}, {"factor", ropeScaling.factor}};
    if (ropeScaling.type == "llama3") {
      r["low_freq_factor"] = ropeScaling.lowFreqFactor;
      r["high_freq_factor"] = ropeScaling.highFreqFactor;
      r["original_max_position_embeddings"] =
          ropeScaling.originalMaxPositionEmbeddings;
    }
    j["rope_scaling"] = r;
  }
  if (bosTokenId)
    j["bos_token_id"] = *bosTokenId;
  if (eosTokenIds.size() == 1)
    j["eos_token_id"] = eosTokenIds[0];
  else if (!eosTokenIds.empty())
    j["eos_token_id"] = eosTokenIds;
  if (padTokenId)
    j["pad_token_id"] = *padTokenId;
  return j;
}

} // namespace cac::rt

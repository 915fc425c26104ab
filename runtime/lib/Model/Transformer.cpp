//===- Transformer.cpp - Llama/Qwen2 decoder ------------------------------===//

#include "cac/Runtime/Model/Transformer.h"
#include "cac/Runtime/Model/LayerCheckpoint.h"
#include "cac/Runtime/Model/ShapeString.h"

#include <torch/nn/init.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <ATen/ATen.h>
#endif

#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>

namespace cac::rt {

namespace {

at::Tensor rotateHalf(const at::Tensor &x) {
  int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

/// \p w in \p x's dtype: itself when they agree (so a model computing in
/// its weights' dtype runs the same operations as ever), else a
/// differentiable cast, whose backward brings the gradient back to the
/// weight's dtype (a bfloat16 compute over float32 master weights).
at::Tensor inDtypeOf(const at::Tensor &w, const at::Tensor &x) {
  if (!w.defined() || w.scalar_type() == x.scalar_type())
    return w;
  return w.to(x.scalar_type());
}

} // namespace

//===----------------------------------------------------------------------===//
// Modules
//===----------------------------------------------------------------------===//

LinearImpl::LinearImpl(int64_t in, int64_t out, bool withBias,
                       const Uninitialized &uninit) {
  if (uninit) {
    weight = register_parameter("weight", at::empty({out, in}, *uninit));
    if (withBias)
      bias = register_parameter("bias", at::empty({out}, *uninit));
    return;
  }
  // torch::nn::Linear's own initialization, so that fresh models draw what
  // they always drew.
  torch::nn::Linear fresh(torch::nn::LinearOptions(in, out).bias(withBias));
  weight = register_parameter("weight", fresh->weight);
  if (withBias)
    bias = register_parameter("bias", fresh->bias);
}

at::Tensor LinearImpl::forward(const at::Tensor &x) {
  return at::linear(x, inDtypeOf(weight, x), inDtypeOf(bias, x));
}

EmbeddingImpl::EmbeddingImpl(int64_t rows, int64_t dim,
                             const Uninitialized &uninit) {
  if (uninit) {
    weight = register_parameter("weight", at::empty({rows, dim}, *uninit));
    return;
  }
  torch::nn::Embedding fresh(rows, dim);
  weight = register_parameter("weight", fresh->weight);
}

at::Tensor EmbeddingImpl::forward(const at::Tensor &ids) {
  return at::embedding(weight, ids.contiguous());
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps, const Uninitialized &uninit)
    : eps(eps) {
  weight = register_parameter(
      "weight", uninit ? at::empty({dim}, *uninit) : at::ones({dim}));
}

at::Tensor RMSNormImpl::forward(const at::Tensor &x) {
  at::Tensor h = x.to(at::kFloat);
  h = h * at::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return inDtypeOf(weight, x) * h.to(x.scalar_type());
}

AttentionImpl::AttentionImpl(const ModelConfig &c, int64_t layerIndex,
                             const Uninitialized &uninit)
    : layer_(layerIndex), numHeads_(c.numAttentionHeads),
      numKvHeads_(c.numKeyValueHeads), headDim_(c.headDimension()) {
  fused = fusedAttentionAvailable();
  int64_t q = numHeads_ * headDim_, kv = numKvHeads_ * headDim_;
  q_proj = register_module(
      "q_proj", Linear(c.hiddenSize, q, c.attentionBias, uninit));
  k_proj = register_module(
      "k_proj", Linear(c.hiddenSize, kv, c.attentionBias, uninit));
  v_proj = register_module(
      "v_proj", Linear(c.hiddenSize, kv, c.attentionBias, uninit));
  o_proj = register_module("o_proj", Linear(q, c.hiddenSize, false, uninit));
}

at::Tensor AttentionImpl::forward(const at::Tensor &x, const at::Tensor &cos,
                                  const at::Tensor &sin, const at::Tensor &bias,
                                  KVCache *cache) {
  int64_t B = x.size(0), T = x.size(1);
  int64_t G = numHeads_ / numKvHeads_;
  at::Tensor q = q_proj(x).view({B, T, numHeads_, headDim_}).transpose(1, 2);
  at::Tensor k = k_proj(x).view({B, T, numKvHeads_, headDim_}).transpose(1, 2);
  at::Tensor v = v_proj(x).view({B, T, numKvHeads_, headDim_}).transpose(1, 2);
  q = q * cos + rotateHalf(q) * sin;
  k = k * cos + rotateHalf(k) * sin;
  if (cache)
    std::tie(k, v) = cache->write(layer_, k, v);
  int64_t S = k.size(2);
  // Query heads h = kv * G + g share kv head `kv` (HF's repeat_kv order);
  // grouping the queries as G * T rows of their KV head avoids
  // materializing repeated keys, on both paths.
  at::Tensor out;
#if TORCH_VERSION_MAJOR >= 2
  if (fused) {
    at::Tensor qg = q.reshape({B, numKvHeads_, G * T, headDim_});
    at::Tensor mask = bias.expand({B, 1, G, T, S}).reshape({B, 1, G * T, S});
    // The default scale is 1/sqrt(head_dim); softmax accumulates in float32.
    out = at::scaled_dot_product_attention(qg, k, v, mask, /*dropout_p=*/0.0,
                                           /*is_causal=*/false);
  }
#endif
  if (!out.defined()) {
    at::Tensor qg = (q * (1.0 / std::sqrt(static_cast<double>(headDim_))))
                        .reshape({B, numKvHeads_, G * T, headDim_});
    at::Tensor scores =
        at::matmul(qg, k.transpose(-1, -2)).view({B, numKvHeads_, G, T, S});
    scores = scores + bias;
    at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(x.scalar_type());
    out = at::matmul(probs.view({B, numKvHeads_, G * T, S}), v);
  }
  // reshape, not view: the fused kernels may return the heads' rows in
  // another memory order (a mask makes SDPA pick such a kernel).
  out = out.reshape({B, numHeads_, T, headDim_})
            .transpose(1, 2)
            .reshape({B, T, numHeads_ * headDim_});
  return o_proj(out);
}

MlpImpl::MlpImpl(const ModelConfig &c, const Uninitialized &uninit) {
  int64_t h = c.hiddenSize, f = c.intermediateSize;
  gate_proj = register_module("gate_proj", Linear(h, f, c.mlpBias, uninit));
  up_proj = register_module("up_proj", Linear(h, f, c.mlpBias, uninit));
  down_proj = register_module("down_proj", Linear(f, h, c.mlpBias, uninit));
}

at::Tensor MlpImpl::forward(const at::Tensor &x) {
  return down_proj(at::silu(gate_proj(x)) * up_proj(x));
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig &c, int64_t layerIndex,
                                   const Uninitialized &uninit) {
  self_attn = register_module("self_attn", Attention(c, layerIndex, uninit));
  mlp = register_module("mlp", Mlp(c, uninit));
  input_layernorm = register_module(
      "input_layernorm", RMSNorm(c.hiddenSize, c.rmsNormEps, uninit));
  post_attention_layernorm = register_module(
      "post_attention_layernorm", RMSNorm(c.hiddenSize, c.rmsNormEps, uninit));
}

at::Tensor DecoderLayerImpl::forward(const at::Tensor &x, const at::Tensor &cos,
                                     const at::Tensor &sin,
                                     const at::Tensor &bias, KVCache *cache) {
  at::Tensor h = x + self_attn(input_layernorm(x), cos, sin, bias, cache);
  return h + mlp(post_attention_layernorm(h));
}

DecoderStackImpl::DecoderStackImpl(const ModelConfig &c,
                                   const Uninitialized &uninit) {
  embed_tokens = register_module(
      "embed_tokens", Embedding(c.vocabSize, c.hiddenSize, uninit));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.numHiddenLayers; ++i) {
    blocks.push_back(DecoderLayer(c, i, uninit));
    layers->push_back(blocks.back());
  }
  norm = register_module("norm", RMSNorm(c.hiddenSize, c.rmsNormEps, uninit));
}

//===----------------------------------------------------------------------===//
// TransformerLM
//===----------------------------------------------------------------------===//

TransformerLMImpl::TransformerLMImpl(ModelConfig config, bool valueHead)
    : config_(std::move(config)) {
  build(valueHead, std::nullopt);
}

TransformerLMImpl::TransformerLMImpl(ModelConfig config, bool valueHead,
                                     const at::TensorOptions &options)
    : config_(std::move(config)) {
  build(valueHead, options);
}

void TransformerLMImpl::build(bool valueHead, const Uninitialized &uninit) {
  config_.validate("model config");
  model = register_module("model", DecoderStack(config_, uninit));
  if (!config_.tieWordEmbeddings)
    lm_head = register_module(
        "lm_head",
        Linear(config_.hiddenSize, config_.vocabSize, false, uninit));
  if (uninit) {
    if (valueHead)
      value_head = register_module(
          "value_head", Linear(config_.hiddenSize, 1, true, uninit));
  } else {
    initWeights();
    if (valueHead)
      addValueHead();
  }

  // Rotary inverse frequencies, in float32 as HF computes them.
  int64_t D = config_.headDimension();
  at::Tensor idx = at::arange(0, D, 2, at::kLong).to(at::kFloat) /
                   static_cast<double>(D);
  at::Tensor inv = 1.0 / at::pow(config_.ropeTheta, idx);
  const RopeScaling &rs = config_.ropeScaling;
  if (rs.type == "linear") {
    inv = inv / rs.factor;
  } else if (rs.type == "llama3") {
    double oldCtx = static_cast<double>(rs.originalMaxPositionEmbeddings);
    double lowWavelen = oldCtx / rs.lowFreqFactor;
    double highWavelen = oldCtx / rs.highFreqFactor;
    constexpr double kPi = 3.14159265358979323846;
    at::Tensor wavelen = 2 * kPi / inv;
    at::Tensor scaled = at::where(wavelen > lowWavelen, inv / rs.factor, inv);
    at::Tensor smooth = (oldCtx / wavelen - rs.lowFreqFactor) /
                        (rs.highFreqFactor - rs.lowFreqFactor);
    at::Tensor smoothed =
        (1 - smooth) * scaled / rs.factor + smooth * scaled;
    at::Tensor medium = (wavelen >= highWavelen) & (wavelen <= lowWavelen);
    inv = at::where(medium, smoothed, scaled);
  }
  invFreq_ = inv;
}

namespace {

/// initWeights' rule for one parameter: ones for norms, zeros for biases,
/// normal(0, std) for the rest.
void initParameter(const std::string &name, at::Tensor t, double std,
                   const c10::optional<at::Generator> &g) {
  bool isNorm = name.find("norm.weight") != std::string::npos;
  bool isBias =
      name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
  if (isNorm)
    t.fill_(1.0);
  else if (isBias)
    t.zero_();
  else
    t.normal_(0.0, std, g);
}

} // namespace

void TransformerLMImpl::initWeights(double std,
                                    std::optional<at::Generator> gen) {
  torch::NoGradGuard noGrad;
  c10::optional<at::Generator> g;
  if (gen)
    g = *gen;
  for (auto &p : named_parameters())
    initParameter(p.key(), p.value(), std, g);
}

void TransformerLMImpl::initParameters(const std::vector<std::string> &names,
                                       double std) {
  torch::NoGradGuard noGrad;
  auto params = named_parameters();
  for (const std::string &name : names) {
    at::Tensor *p = params.find(name);
    if (!p)
      throw std::runtime_error("TransformerLM: no parameter named '" + name +
                               "'");
    initParameter(name, *p, std, c10::nullopt);
  }
}

void TransformerLMImpl::addValueHead(double std) {
  if (hasValueHead())
    return;
  value_head =
      register_module("value_head", Linear(config_.hiddenSize, 1, true));
  torch::NoGradGuard noGrad;
  auto p = model->embed_tokens->weight;
  value_head->to(p.device(), p.scalar_type());
  value_head->weight.normal_(0.0, std);
  value_head->bias.zero_();
}

int64_t TransformerLMImpl::numParameters() const {
  int64_t n = 0;
  for (const auto &p : parameters())
    n += p.numel();
  return n;
}

torch::Device TransformerLMImpl::device() const {
  return model->embed_tokens->weight.device();
}

at::ScalarType TransformerLMImpl::dtype() const {
  return model->embed_tokens->weight.scalar_type();
}

void TransformerLMImpl::setComputeDtype(at::ScalarType dtype) {
  if (dtype != at::ScalarType::Undefined && !at::isFloatingType(dtype))
    throw std::runtime_error(
        "TransformerLM: a compute dtype must be floating point, not " +
        modelDtypeName(dtype));
  computeDtype_ = dtype;
}

at::ScalarType TransformerLMImpl::computeDtype() const {
  return computeDtype_ == at::ScalarType::Undefined ? dtype() : computeDtype_;
}

void TransformerLMImpl::setFusedAttention(bool fused) {
  if (fused && !fusedAttentionAvailable())
    throw std::runtime_error("TransformerLM: fused attention needs LibTorch 2 "
                             "or later (at::scaled_dot_product_attention)");
  for (auto &block : model->blocks)
    block->self_attn->fused = fused;
}

bool fusedAttentionAvailable() {
#if TORCH_VERSION_MAJOR >= 2
  return true;
#else
  return false;
#endif
}

at::ScalarType parseModelDtype(const std::string &name) {
  std::string canonical = canonicalModelDtype(name);
  if (canonical == "bfloat16")
    return at::kBFloat16;
  if (canonical == "float16")
    return at::kHalf;
  return at::kFloat;
}

std::string modelDtypeName(at::ScalarType dtype) {
  if (dtype == at::kFloat)
    return "float32";
  if (dtype == at::kBFloat16)
    return "bfloat16";
  if (dtype == at::kHalf)
    return "float16";
  return c10::toString(dtype);
}

namespace {

/// Why a forward of a tiny model in \p dtype fails on the CPU ("" when it
/// runs): the kernel LibTorch lacks.
std::string cpuForwardError(at::ScalarType dtype) {
  ModelConfig c;
  c.modelType = "llama";
  c.vocabSize = 4;
  c.hiddenSize = 4;
  c.intermediateSize = 4;
  c.numHiddenLayers = 1;
  c.numAttentionHeads = 1;
  c.numKeyValueHeads = 1;
  c.maxPositionEmbeddings = 4;
  try {
    TransformerLM m(c, /*valueHead=*/false,
                    at::TensorOptions().dtype(dtype));
    torch::NoGradGuard noGrad;
    for (auto &p : m->parameters())
      p.fill_(0.5);
    m->forward(at::zeros({1, 2}, at::kLong));
    return "";
  } catch (const std::exception &e) {
    std::string what = e.what();
    return what.substr(0, what.find('\n'));
  }
}

} // namespace

void checkModelDtype(at::ScalarType dtype, const torch::Device &device) {
  if (!at::isFloatingType(dtype))
    throw std::runtime_error("a model's dtype must be floating point, not " +
                             modelDtypeName(dtype));
  if (!device.is_cpu() || dtype == at::kFloat || dtype == at::kDouble)
    return;
  static std::mutex mutex;
  static std::map<at::ScalarType, std::string> errors;
  std::string error;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = errors.find(dtype);
    if (it == errors.end())
      it = errors.emplace(dtype, cpuForwardError(dtype)).first;
    error = it->second;
  }
  if (!error.empty())
    throw std::runtime_error(
        "a " + modelDtypeName(dtype) + " model cannot run on the CPU with "
        "this LibTorch (" + error + "); use float32 or bfloat16 on the CPU, " +
        modelDtypeName(dtype) + " on a CUDA device");
}

std::pair<at::Tensor, at::Tensor>
TransformerLMImpl::rope(const at::Tensor &positions, at::ScalarType dtype) {
  if (invFreq_.device() != positions.device())
    invFreq_ = invFreq_.to(positions.device());
  at::Tensor freqs = positions.to(at::kFloat).unsqueeze(-1) * invFreq_;
  at::Tensor emb = at::cat({freqs, freqs}, -1).unsqueeze(1); // [B,1,T,D]
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

at::Tensor attentionBias(const at::Tensor &keyMask, int64_t past, int64_t T,
                         at::ScalarType dtype) {
  int64_t B = keyMask.size(0), S = keyMask.size(1);
  auto dev = keyMask.device();
  at::Tensor q = at::arange(T, at::TensorOptions().dtype(at::kLong).device(dev))
                     .unsqueeze(1) +
                 past;                                                 // [T,1]
  at::Tensor s = at::arange(S, at::TensorOptions().dtype(at::kLong).device(dev))
                     .unsqueeze(0);                                    // [1,S]
  at::Tensor causal = s <= q;                                          // [T,S]
  at::Tensor self = s == q;                                            // [T,S]
  at::Tensor allowed =
      (keyMask.to(at::kBool).view({B, 1, S}) & causal.unsqueeze(0)) |
      self.unsqueeze(0); // [B,T,S]
  at::Tensor bias = at::zeros({B, T, S}, at::TensorOptions().dtype(dtype).device(dev));
  bias.masked_fill_(allowed.logical_not(),
                    -std::numeric_limits<float>::infinity());
  return bias.view({B, 1, 1, T, S});
}

at::Tensor TransformerLMImpl::forwardHidden(const at::Tensor &inputIds,
                                            const at::Tensor &attentionMask,
                                            KVCache *cache,
                                            const at::Tensor &positionsIn) {
  if (inputIds.dim() != 2)
    throw std::runtime_error("TransformerLM: input ids must be [B, T], got " +
                             shapeString(inputIds.sizes()));
  int64_t B = inputIds.size(0), T = inputIds.size(1);
  auto dev = model->embed_tokens->weight.device();
  at::Tensor ids = inputIds.to(dev, at::kLong);
  at::Tensor mask = attentionMask.defined()
                        ? attentionMask.to(dev, at::kBool)
                        : at::ones({B, T}, at::TensorOptions()
                                               .dtype(at::kBool)
                                               .device(dev));
  if (mask.sizes() != ids.sizes())
    throw std::runtime_error(
        "TransformerLM: attention mask " + shapeString(mask.sizes()) +
        " does not match input ids " + shapeString(ids.sizes()));
  if (T > 0) {
    int64_t lo = ids.min().item<int64_t>(), hi = ids.max().item<int64_t>();
    if (lo < 0 || hi >= config_.vocabSize)
      throw std::runtime_error("TransformerLM: token id out of range [0, " +
                               std::to_string(config_.vocabSize) + "): " +
                               std::to_string(lo < 0 ? lo : hi));
  }
  at::Tensor positions;
  if (positionsIn.defined()) {
    positions = positionsIn.to(dev, at::kLong);
    if (positions.sizes() != ids.sizes())
      throw std::runtime_error("TransformerLM: positions " +
                               shapeString(positions.sizes()) +
                               " do not match " + shapeString(ids.sizes()));
  } else {
    positions = mask.to(at::kLong).cumsum(1) - 1;
    if (cache && cache->batchSize() > 0)
      positions = positions + cache->nextPositions().unsqueeze(1);
    positions = positions.clamp_min(0);
  }

  // A KV cache holds the weights' dtype: cached passes compute in it.
  at::ScalarType dtype = cache ? this->dtype() : computeDtype();
  int64_t past = cache ? cache->length() : 0;
  at::Tensor keyMask = cache ? cache->beginStep(mask) : mask;
  at::Tensor bias = attentionBias(keyMask, past, T, dtype);
  auto [cos, sin] = rope(positions, dtype);
  at::Tensor h = model->embed_tokens(ids);
  if (h.scalar_type() != dtype)
    h = h.to(dtype);
  // Checkpoints only where a backward pass will follow (a graph is being
  // recorded); a cached pass never trains.
  bool checkpoint =
      checkpointing_ && !cache && at::GradMode::is_enabled();
  for (auto &block : model->blocks)
    h = checkpoint ? checkpointedLayer(block, h, cos, sin, bias)
                   : block(h, cos, sin, bias, cache);
  if (cache)
    cache->endStep(mask);
  return model->norm(h);
}

at::Tensor TransformerLMImpl::lmHead(const at::Tensor &hidden) {
  if (config_.tieWordEmbeddings)
    return at::matmul(hidden,
                      inDtypeOf(model->embed_tokens->weight, hidden).t());
  return lm_head(hidden);
}

at::Tensor TransformerLMImpl::headWeight() const {
  return config_.tieWordEmbeddings ? model->embed_tokens->weight
                                   : lm_head->weight;
}

at::Tensor TransformerLMImpl::headLogProbs(const at::Tensor &hidden,
                                           const at::Tensor &targets,
                                           double temperature,
                                           int64_t chunkBytes) {
  return chunkedTokenLogProbs(
      hidden, inDtypeOf(headWeight(), hidden), targets, temperature,
      logProbChunkRows(config_.vocabSize, chunkBytes));
}

at::Tensor TransformerLMImpl::valueHead(const at::Tensor &hidden) {
  if (!hasValueHead())
    throw std::runtime_error("TransformerLM: the model has no value head");
  // float32 whatever the compute dtype: the estimator and the value loss
  // read the values in float32.
  at::Tensor v = value_head(hidden).squeeze(-1);
  return v.scalar_type() == at::kFloat ? v : v.to(at::kFloat);
}

at::Tensor TransformerLMImpl::forward(const at::Tensor &inputIds,
                                      const at::Tensor &attentionMask,
                                      KVCache *cache,
                                      const at::Tensor &positions) {
  return lmHead(forwardHidden(inputIds, attentionMask, cache, positions));
}

at::Tensor tokenLogProbs(const at::Tensor &logits, const at::Tensor &inputIds,
                         double temperature) {
  if (logits.dim() != 3 || inputIds.dim() != 2 ||
      logits.size(0) != inputIds.size(0) ||
      logits.size(1) != inputIds.size(1))
    throw std::runtime_error(
        "tokenLogProbs: logits " + shapeString(logits.sizes()) +
        " do not match input ids " + shapeString(inputIds.sizes()));
  int64_t T = logits.size(1);
  if (T < 2)
    return at::zeros({logits.size(0), 0},
                     logits.options().dtype(at::kFloat));
  at::Tensor l = logits.narrow(1, 0, T - 1).to(at::kFloat);
  if (temperature > 0 && temperature != 1.0)
    l = l / temperature;
  at::Tensor next = inputIds.narrow(1, 1, T - 1).to(logits.device(), at::kLong);
  return at::log_softmax(l, -1).gather(-1, next.unsqueeze(-1)).squeeze(-1);
}

} // namespace cac::rt

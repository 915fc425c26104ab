//===- Transformer.h - Llama/Qwen2 decoder ----------------------*- C++ -*-===//
//
// A decoder-only transformer of the Llama/Qwen2 family as a torch::nn::Module:
// token embedding, N blocks of (RMSNorm, grouped-query attention with RoPE,
// RMSNorm, SwiGLU MLP), a final RMSNorm and an LM head (optionally tied to the
// embedding), plus an optional scalar value head for token-level critics.
//
// Submodules are registered under the Hugging Face names, so
// named_parameters() yields exactly the keys of a HF checkpoint:
// `model.embed_tokens.weight`, `model.layers.{i}.self_attn.q_proj.weight`,
// ..., `model.norm.weight`, `lm_head.weight` (absent when tied), and
// `value_head.weight` / `value_head.bias` when the value head is enabled.
//
// Batches are padded [B, T] tensors with a boolean attention mask. Padding may
// be anywhere (left, right, or holes): positions are per row (the number of
// real tokens before each one), padding keys are masked out, and every query
// also attends to its own slot so that a padding query's row of the softmax
// is never empty (no NaN; its output is meaningless and ignored). The same
// convention holds with a KV cache (KVCache.h), which keeps a key mask and the
// next position of every row, so rows of one batch may hold prefixes of
// different lengths.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_MODEL_TRANSFORMER_H
#define CAC_RUNTIME_MODEL_TRANSFORMER_H

#include "cac/Runtime/Model/ChunkedLogProbs.h"
#include "cac/Runtime/Model/Config.h"
#include "cac/Runtime/Model/KVCache.h"
#include "cac/Runtime/Model/ModelDtype.h"

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <optional>
#include <string>
#include <vector>

namespace cac::rt {

/// Where a model's parameters are allocated when they are to be filled by a
/// load (loadPretrained): uninitialized, directly in these options' dtype and
/// device, with no float32 copy and no draw from any generator. Absent, a
/// module is fresh: float32 on the CPU, drawn as LibTorch's own modules draw.
using Uninitialized = std::optional<at::TensorOptions>;

/// y = x W^T + b. Fresh, its parameters are those of a torch::nn::Linear of
/// the same shape (the same draws, in the same order), so a seed gives the
/// same model as it always has.
class LinearImpl : public torch::nn::Module {
public:
  LinearImpl(int64_t in, int64_t out, bool bias,
             const Uninitialized &uninit = std::nullopt);
  at::Tensor forward(const at::Tensor &x);
  at::Tensor weight, bias;
};
TORCH_MODULE(Linear);

/// A lookup table of rows; fresh, the weight of a torch::nn::Embedding.
class EmbeddingImpl : public torch::nn::Module {
public:
  EmbeddingImpl(int64_t rows, int64_t dim,
                const Uninitialized &uninit = std::nullopt);
  at::Tensor forward(const at::Tensor &ids);
  at::Tensor weight;
};
TORCH_MODULE(Embedding);

/// Root-mean-square layer norm, computed in float32 (as HF does).
class RMSNormImpl : public torch::nn::Module {
public:
  RMSNormImpl(int64_t dim, double eps,
              const Uninitialized &uninit = std::nullopt);
  at::Tensor forward(const at::Tensor &x);
  at::Tensor weight;
  double eps;
};
TORCH_MODULE(RMSNorm);

/// Grouped-query self-attention with rotary position embeddings.
class AttentionImpl : public torch::nn::Module {
public:
  AttentionImpl(const ModelConfig &config, int64_t layerIndex,
                const Uninitialized &uninit = std::nullopt);
  /// \p x [B, T, H]; \p cos, \p sin [B, 1, T, D]; \p bias [B, 1, 1, T, S]
  /// additive mask; \p cache may be null.
  at::Tensor forward(const at::Tensor &x, const at::Tensor &cos,
                     const at::Tensor &sin, const at::Tensor &bias,
                     KVCache *cache);
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  /// Whether forward() calls at::scaled_dot_product_attention (only where
  /// fusedAttentionAvailable()) instead of matmul and softmax.
  bool fused = false;

private:
  int64_t layer_, numHeads_, numKvHeads_, headDim_;
};
TORCH_MODULE(Attention);

/// SwiGLU feed-forward: down(silu(gate(x)) * up(x)).
class MlpImpl : public torch::nn::Module {
public:
  explicit MlpImpl(const ModelConfig &config,
                   const Uninitialized &uninit = std::nullopt);
  at::Tensor forward(const at::Tensor &x);
  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(Mlp);

/// One pre-norm transformer block.
class DecoderLayerImpl : public torch::nn::Module {
public:
  DecoderLayerImpl(const ModelConfig &config, int64_t layerIndex,
                   const Uninitialized &uninit = std::nullopt);
  at::Tensor forward(const at::Tensor &x, const at::Tensor &cos,
                     const at::Tensor &sin, const at::Tensor &bias,
                     KVCache *cache);
  Attention self_attn{nullptr};
  Mlp mlp{nullptr};
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};
TORCH_MODULE(DecoderLayer);

/// The `model.` part of a HF causal LM: embedding, blocks, final norm.
class DecoderStackImpl : public torch::nn::Module {
public:
  explicit DecoderStackImpl(const ModelConfig &config,
                            const Uninitialized &uninit = std::nullopt);
  Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};
  std::vector<DecoderLayer> blocks;
};
TORCH_MODULE(DecoderStack);

/// The causal language model (Llama/Qwen2 family), optionally with a value
/// head. A fresh model's parameters are created in float32 on the CPU (use
/// to() to move or cast it); a model to be loaded is allocated in its target
/// dtype and device (Uninitialized).
class TransformerLMImpl : public torch::nn::Module {
public:
  /// A randomly initialized model (initWeights with std 0.02 and the global
  /// generator); \p valueHead adds the critic head.
  explicit TransformerLMImpl(ModelConfig config, bool valueHead = false);
  /// A model whose parameters are allocated uninitialized in \p options
  /// (dtype and device) for a load to fill; nothing is drawn.
  TransformerLMImpl(ModelConfig config, bool valueHead,
                    const at::TensorOptions &options);

  /// Final-norm hidden states [B, T, hidden] of \p inputIds [B, T] (int64).
  ///
  /// \p attentionMask [B, T] (bool or integer; 1 = real token) defaults to
  /// all ones. \p positions [B, T] defaults to the count of real tokens
  /// before each token in the row (plus the cache's next position). With a
  /// \p cache the T tokens are appended to it and attend to everything the
  /// cache holds; without one they attend causally among themselves.
  at::Tensor forwardHidden(const at::Tensor &inputIds,
                           const at::Tensor &attentionMask = {},
                           KVCache *cache = nullptr,
                           const at::Tensor &positions = {});
  /// Logits [B, T, vocab] (forwardHidden followed by lmHead).
  at::Tensor forward(const at::Tensor &inputIds,
                     const at::Tensor &attentionMask = {},
                     KVCache *cache = nullptr,
                     const at::Tensor &positions = {});
  /// Logits of hidden states [..., hidden] (the tied embedding or lm_head).
  at::Tensor lmHead(const at::Tensor &hidden);
  /// The LM head's weight [vocab, hidden]: the tied embedding's or
  /// lm_head's (the parameter itself, so gradients reach it).
  at::Tensor headWeight() const;
  /// Log-probabilities [N] (float32) of \p targets [N] under the head's
  /// logits of \p hidden [N, hidden] divided by \p temperature: the values
  /// of tokenLogProbs(lmHead(hidden)) without the [N, vocab] logits, in
  /// chunks of logProbChunkRows(vocab, \p chunkBytes) rows
  /// (chunkedTokenLogProbs). Differentiable in \p hidden and the head.
  at::Tensor headLogProbs(const at::Tensor &hidden, const at::Tensor &targets,
                          double temperature = 1.0,
                          int64_t chunkBytes = kLogProbChunkBytes);
  /// Scalar values [...] (float32) of hidden states [..., hidden]; throws
  /// if the model has no value head.
  at::Tensor valueHead(const at::Tensor &hidden);

  bool hasValueHead() const { return !value_head.is_empty(); }
  /// Adds a value head (normal(0, std) weight, zero bias) if absent.
  void addValueHead(double std = 0.02);
  /// Re-initializes every parameter: normal(0, std) for linear and embedding
  /// weights, zeros for biases, ones for norms.
  void initWeights(double std = 0.02,
                   std::optional<at::Generator> generator = std::nullopt);
  /// initWeights' rule for the parameters named \p names only (the global
  /// generator); throws naming a name the model does not have.
  void initParameters(const std::vector<std::string> &names,
                      double std = 0.02);

  const ModelConfig &config() const { return config_; }
  /// The floating-point type of the weights (and so of the activations and
  /// the KV cache): float32 unless the model was cast, e.g. with
  /// to(at::kBFloat16).
  at::ScalarType dtype() const;
  /// The dtype forwardHidden computes in without a KV cache (the update,
  /// whole-sequence scoring): each weight is cast to it where it is used,
  /// differentiably, so gradients reach the weights in their own dtype
  /// (bfloat16 compute over float32 master weights, as FSDP's param_dtype);
  /// the norms' statistics, the attention's softmax and the LM head's
  /// log-softmax stay float32. at::ScalarType::Undefined (the default):
  /// the weights' dtype, the operations of a model without the setting.
  /// A pass with a KV cache computes in the weights' dtype.
  void setComputeDtype(at::ScalarType dtype);
  /// The dtype forwardHidden computes in without a cache.
  at::ScalarType computeDtype() const;
  /// Whether forwardHidden, while autograd records (grad mode on, no
  /// cache), keeps only each decoder layer's input for the backward pass
  /// and runs the layer again there (checkpointedLayer): the activations
  /// of one layer instead of all of them, for a second forward's time.
  void setActivationCheckpointing(bool on) { checkpointing_ = on; }
  bool activationCheckpointing() const { return checkpointing_; }
  /// Selects the attention kernel of every layer: at::scaled_dot_product_
  /// attention (the default where fusedAttentionAvailable()) or the plain
  /// matmul/softmax path. Throws if \p fused is asked for where this
  /// LibTorch has no fused attention.
  void setFusedAttention(bool fused);
  /// Number of scalar parameters.
  int64_t numParameters() const;
  /// The device of the parameters.
  torch::Device device() const;

  DecoderStack model{nullptr};
  Linear lm_head{nullptr};
  Linear value_head{nullptr};

private:
  void build(bool valueHead, const Uninitialized &uninit);
  /// cos/sin [B, 1, T, D] of \p positions, in \p dtype.
  std::pair<at::Tensor, at::Tensor> rope(const at::Tensor &positions,
                                         at::ScalarType dtype);
  ModelConfig config_;
  at::Tensor invFreq_; // float32, on the parameters' device
  at::ScalarType computeDtype_ = at::ScalarType::Undefined;
  bool checkpointing_ = false;
};
TORCH_MODULE(TransformerLM);

/// Whether this LibTorch has at::scaled_dot_product_attention (LibTorch 2
/// and later; 1.13 has not).
bool fusedAttentionAvailable();

/// The model dtype named \p name (canonicalModelDtype's names: "float32",
/// "f32", "fp32", "bfloat16", "bf16", "float16", "f16", "fp16"). Throws
/// std::runtime_error naming the accepted names otherwise.
at::ScalarType parseModelDtype(const std::string &name);
/// The name of a model dtype: "float32", "bfloat16", "float16" (or c10's
/// name).
std::string modelDtypeName(at::ScalarType dtype);
/// Throws std::runtime_error, naming the dtype, the device and what to use
/// instead, where a model in \p dtype cannot run on \p device: a
/// non-floating dtype anywhere, and on the CPU a dtype this LibTorch has no
/// CPU kernels for (LibTorch 1.13 has no float16 matmul; a two-token forward
/// of a tiny model is tried once per dtype to find out).
void checkModelDtype(at::ScalarType dtype, const torch::Device &device);

/// The additive attention mask [B, 1, 1, T, S] for T queries appended after
/// \p past cached slots: query t of row b sees key s when keyMask[b, s] and
/// s <= past + t, and always sees itself. -inf elsewhere.
at::Tensor attentionBias(const at::Tensor &keyMask, int64_t past, int64_t T,
                         at::ScalarType dtype);

/// Log-probabilities [B, T-1] of each next token in \p inputIds under
/// \p logits [B, T, V] divided by \p temperature (the training loop's
/// per-token logp, on the same footing as Decoder's recorded logprobs).
at::Tensor tokenLogProbs(const at::Tensor &logits, const at::Tensor &inputIds,
                         double temperature = 1.0);

} // namespace cac::rt

#endif // CAC_RUNTIME_MODEL_TRANSFORMER_H

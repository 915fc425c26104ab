//===- Generation.h - Batched sampling with a KV cache ----------*- C++ -*-===//
//
// Decoder samples continuations for a batch of prompts, one token per row per
// step, recording for every generated token its log-probability and the
// entropy of the distribution it was drawn from (softmax(logits /
// temperature), before top-k/top-p truncation, which is the distribution the
// training loop recomputes). Rows stop on a stop token, a stop string or
// max_new_tokens. fork() copies rows and shares their KV cache (KVCache.h:
// the forks read one stored copy of their common prefix). With a tool
// (SamplingOptions::tool), a row whose token closes a tool call gets the tool's
// reply appended as observation tokens, fed through the model like a prompt
// (they extend the KV cache; no log-probability, never sampled), and samples on
// after them.
//
// Randomness comes only from the at::Generator passed to step() (a CPU
// generator; one uniform number per row per step, turned into a token by
// inverse-CDF sampling on the logits' device), so a run is reproducible from
// the generator's seed on any device.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_MODEL_GENERATION_H
#define CAC_RUNTIME_MODEL_GENERATION_H

#include "cac/Runtime/Model/Tokenizer.h"
#include "cac/Runtime/Model/Transformer.h"

#include <ATen/core/Generator.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace cac::rt {

/// Why a row stopped generating.
enum class FinishReason {
  /// Still generating.
  None,
  /// A stop token or stop string.
  Stop,
  /// max_new_tokens, or the model's maximum position.
  Length,
};

/// "none", "stop" or "length".
const char *finishReasonName(FinishReason reason);

struct GeneratedSequence;

/// A tool's answer to a call that a row has just closed.
struct ToolReply {
  /// The observation tokens appended to the row; empty: the call is not
  /// answered (past the tool's turn limit).
  std::vector<int64_t> observation;
  /// Whether the call parsed and evaluated.
  bool ok = false;
  /// Whether the tool itself failed on the call (a tool program that timed
  /// out, exited or wrote too much; the observation says so).
  bool failed = false;
};

/// Called after every token an unfinished row samples: a reply when that
/// token closes a tool call, else nothing. An exception it throws ends
/// generation with an error naming the row and the call.
using ToolHook =
    std::function<std::optional<ToolReply>(const GeneratedSequence &row)>;

/// How to sample.
struct SamplingOptions {
  /// Softmax temperature; 0 means greedy (argmax), and the recorded logprobs
  /// and entropies are then those of temperature 1.
  double temperature = 1.0;
  /// Nucleus sampling: keep the smallest set of most likely tokens whose
  /// probability reaches topP (1 disables). Applied after topK.
  double topP = 1.0;
  /// Keep only the topK most likely tokens (0 disables).
  int64_t topK = 0;
  /// Tokens generated per row at most (counted from the prompt).
  int64_t maxNewTokens = 128;
  /// Token ids that end a row; the stop token is kept as the row's last
  /// generated token (with its logprob).
  std::vector<int64_t> stopTokens;
  /// Strings that end a row once the decoded completion contains one (needs
  /// a tokenizer). The token completing it is kept; `text` is cut before it.
  std::vector<std::string> stopStrings;
  /// Recompute the whole prefix every step instead of using the KV cache
  /// (slow; a reference for tests and benchmarks).
  bool useCache = true;
  /// Keep finished rows in the KV cache (masked, never compacted away) so
  /// that forkAt() can branch from any of their earlier positions without
  /// running the prefix again (chain Monte Carlo from a finished rollout).
  /// Costs the memory of those rows. Read by step() and forkAt().
  bool retainFinished = false;
  /// The id fed in padding slots (never attended to).
  int64_t padId = 0;
  /// The tool of multi-turn rollouts (empty: none). Observation tokens count
  /// toward maxNewTokens and the model's positions; a reply that does not
  /// fit is cut and the row finishes with FinishReason::Length.
  ToolHook tool;
};

/// One row: its prompt and what was generated after it.
struct GeneratedSequence {
  std::vector<int64_t> prompt;
  /// Generated token ids, including a final stop token.
  std::vector<int64_t> tokens;
  /// log p(token) under softmax(logits / temperature), one per token.
  std::vector<float> logprobs;
  /// Entropy of softmax(logits / temperature) at each step, one per token.
  std::vector<float> entropies;
  FinishReason finish = FinishReason::None;
  /// The decoded completion (special tokens skipped), cut before a matched
  /// stop string; set when the row finishes (needs a tokenizer).
  std::string text;
  /// The stop string that ended the row, if any.
  std::string stopString;
  /// Per token, 1 for an observation token (a tool's reply; its logprob
  /// and entropy are 0); empty while the row has none.
  std::vector<uint8_t> observation;
  /// Tool calls the row closed, the ones answered with an observation (its
  /// turns), the ones that parsed and evaluated, and the ones the tool
  /// itself failed on (ToolReply::failed).
  int64_t toolCalls = 0, toolTurns = 0, toolOk = 0, toolFailed = 0;

  bool finished() const { return finish != FinishReason::None; }
  /// Whether token \p t is an observation token.
  bool isObservation(size_t t) const {
    return t < observation.size() && observation[t] != 0;
  }
};

/// Tokens sampled for a batch of rows (CPU tensors of length B).
struct SampledTokens {
  at::Tensor tokens;    // int64
  at::Tensor logprobs;  // float32, under softmax(logits / temperature)
  at::Tensor entropies; // float32, of softmax(logits / temperature)
};

/// Samples one token per row from \p logits [B, V] with \p options
/// (temperature, topK, topP) and the CPU generator \p gen. \p siblings
/// (optional, one entry per row): rows with the same value >= 0 sample
/// without replacement, in row order: each draws, with its own uniform, from
/// the (filtered) distribution with the tokens of the earlier rows of its
/// group removed, while any mass is left (TreeAdv's distinct tokens at a
/// branch point). The recorded log-probability stays the policy's, log p of
/// the token. Greedy rows ignore it.
SampledTokens sampleTokens(const at::Tensor &logits,
                           const SamplingOptions &options, at::Generator &gen,
                           const std::vector<int64_t> *siblings = nullptr);

/// The same with the uniforms given: \p uniforms [B] in [0, 1), one per row
/// (unused when greedy).
SampledTokens sampleTokens(const at::Tensor &logits,
                           const SamplingOptions &options,
                           const at::Tensor &uniforms,
                           const std::vector<int64_t> *siblings = nullptr);

/// Sampling uniforms by position: the uniform in [0, 1) that draws the
/// \p tokenIndex-th generated token (0-based) of decoder row \p row. A
/// counter-based source (a hash of a seed and the position) makes each row's
/// tokens independent of which other rows share the batch, which is how
/// data-parallel workers sample the same rollouts as one process.
using RowUniforms = std::function<float(int64_t row, int64_t tokenIndex)>;

/// The text of \p ids, special tokens skipped; ids \p tokenizer does not
/// know (a model vocabulary is often padded beyond the tokenizer's) are
/// dropped.
std::string decodeKnown(const Tokenizer &tokenizer,
                        const std::vector<int64_t> &ids);

/// A CPU generator seeded with \p seed.
at::Generator makeGenerator(uint64_t seed);

/// Batched, stepwise generation for one model.
class Decoder {
public:
  /// \p tokenizer (may be null) is needed for stop strings and `text`; it
  /// must outlive the decoder.
  Decoder(TransformerLM model, SamplingOptions options,
          const Tokenizer *tokenizer = nullptr);

  /// Adds one row per prompt and runs the prompts through the model (the
  /// prefill). Prompts must be non-empty, hold valid ids, and fit in the
  /// model's positions. Only once per decoder.
  void start(const std::vector<std::vector<int64_t>> &prompts);
  /// Samples one token for every unfinished row; returns how many rows are
  /// still unfinished.
  int64_t step(at::Generator &gen);
  /// step() where the rows with the same \p siblings[row] >= 0 (one entry
  /// per decoder row) sample distinct tokens (sampleTokens).
  int64_t step(at::Generator &gen, const std::vector<int64_t> &siblings);
  /// step() until every row has finished or \p maxSteps steps ran (< 0: no
  /// limit).
  void run(at::Generator &gen, int64_t maxSteps = -1);
  /// step() and run() with the uniforms taken from \p uniforms by row and
  /// token position instead of a generator's stream.
  int64_t step(const RowUniforms &uniforms);
  int64_t step(const RowUniforms &uniforms,
               const std::vector<int64_t> &siblings);
  void run(const RowUniforms &uniforms, int64_t maxSteps = -1);
  /// A new decoder whose row i continues row \p rows[i] of this one (rows may
  /// repeat). Generated tokens so far and logprobs are copied and the KV
  /// cache is shared (the prefix's keys and values are stored once), so the
  /// forks share the prefix but sample independently from here.
  Decoder fork(const std::vector<int64_t> &rows) const;
  /// A new decoder whose row i continues row \p rows[i] of this one after
  /// only its first \p numTokens[i] generated tokens (0 <= numTokens[i] <=
  /// tokens generated so far; finished rows may be forked too): the later
  /// tokens, logprobs and entropies are dropped and the row is unfinished
  /// again. This is how a rollout tree branches at an earlier point (or
  /// VinePPO resamples from the middle of a finished rollout). When every
  /// source row still has its KV cache the prefixes are taken from it
  /// (KVCache::selectPrefix); otherwise the prefixes are run through the
  /// model again.
  Decoder forkAt(const std::vector<int64_t> &rows,
                 const std::vector<int64_t> &numTokens) const;

  /// Number of rows.
  size_t size() const { return rows_.size(); }
  const GeneratedSequence &sequence(size_t row) const { return rows_.at(row); }
  const std::vector<GeneratedSequence> &sequences() const { return rows_; }
  /// Number of rows still generating.
  int64_t numUnfinished() const;
  /// Logits [size(), V] (float32) of every row's next token; zeros for
  /// finished rows. Useful to branch where the entropy is high.
  at::Tensor nextTokenLogits();

  const SamplingOptions &options() const { return options_; }
  /// Options may change between steps (e.g. maxNewTokens between segments),
  /// except useCache, which is fixed when the decoder is made.
  SamplingOptions &options() { return options_; }
  const KVCache &cache() const { return cache_; }
  TransformerLM model() const { return model_; }

private:
  using Sampler = std::function<SampledTokens(
      const at::Tensor &logits, const std::vector<int64_t> &activeRows)>;
  /// One step, the tokens of the unfinished rows drawn by \p sample.
  int64_t stepWith(const Sampler &sample);
  /// step() with positional uniforms and, when given, sibling groups.
  int64_t stepUniforms(const RowUniforms &uniforms,
                       const std::vector<int64_t> *siblings);
  /// Logits of the next token for \p rows (unfinished), [rows, V] float32.
  at::Tensor logitsFor(const std::vector<int64_t> &rows);
  void finishChecks(int64_t row);
  /// Runs the tool on \p row's last token and appends its reply (cut to
  /// what fits); returns the observation tokens appended.
  int64_t answerTool(int64_t row);
  /// Feeds each row of \p rows its last \p counts[i] tokens (the sampled
  /// token and any observation after it) into the cache and sets their
  /// next-token logits.
  void feedTokens(const std::vector<int64_t> &rows,
                  const std::vector<int64_t> &counts);
  /// Tokens \p row may still feed into the cache (all it has left to sample
  /// but the last), which its fork reserves room for.
  int64_t tokensToFeed(const GeneratedSequence &row) const;
  /// decodeKnown with the decoder's tokenizer.
  std::string decodeText(const std::vector<int64_t> &ids) const;
  /// Runs every row's prompt and tokens through the model into a fresh
  /// cache and sets the next-token logits (cached mode only).
  void prefillAll();

  TransformerLM model_;
  SamplingOptions options_;
  const Tokenizer *tokenizer_;
  std::vector<GeneratedSequence> rows_;
  /// Row → its batch index in cache_ / nextLogits_, or -1 once finished.
  std::vector<int64_t> cacheRow_;
  /// Per row: bytes of decoded text already searched for stop strings.
  std::vector<size_t> textSearched_;
  KVCache cache_;
  at::Tensor nextLogits_; // [cache batch, V] float32
  bool cached_ = true;
  bool started_ = false;
};

/// Samples completions of \p prompts: each prompt is prefilled once and
/// forked into \p samplesPerPrompt rows, which are returned consecutively
/// (prompt 0's samples, then prompt 1's, ...).
std::vector<GeneratedSequence>
generate(TransformerLM model, const std::vector<std::vector<int64_t>> &prompts,
         const SamplingOptions &options, at::Generator &gen,
         const Tokenizer *tokenizer = nullptr, int64_t samplesPerPrompt = 1);
/// The same with the uniforms taken from \p uniforms (row i of the result is
/// decoder row i: prompt i / samplesPerPrompt).
std::vector<GeneratedSequence>
generate(TransformerLM model, const std::vector<std::vector<int64_t>> &prompts,
         const SamplingOptions &options, const RowUniforms &uniforms,
         const Tokenizer *tokenizer = nullptr, int64_t samplesPerPrompt = 1);

} // namespace cac::rt

#endif // CAC_RUNTIME_MODEL_GENERATION_H

//===- KVCache.h - Decoding rows' keys and values, shared ------*- C++ -*-===//
//
// A KVCache holds the keys and values of every layer for a batch of rows.
// Its storage is a pool of token slots shared by every cache forked from it
// (select(), selectPrefix()): a fork copies the rows' slot tables, not their
// keys and values, so the rows of a rollout tree read one copy of each
// prefix and the pool grows with the tree's distinct tokens, not with its
// paths. The slot granularity is one token (pages of one token, as in
// SGLang's token pool): a fork may happen after any token (tree depths,
// entropy branch points, chain continuations from an earlier position)
// without copying a partly filled page.
//
// Every row sees the same sequence of length() logical slots; keyMask() says
// which hold real tokens. A real slot maps to a pool slot holding that
// token's keys and values; a padding slot maps to pool slot 0, which holds
// zeros and is never written (attention masks it). Pool slots are reference
// counted by the rows that read them and reused once no row does. Attention
// reads a layer's keys and values as [B, Hkv, S, D] gathered from the pool
// for the step (write()); the gathered tensors are the step's temporaries,
// freed after the layer, so no row keeps a copy of a shared prefix.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_MODEL_KVCACHE_H
#define CAC_RUNTIME_MODEL_KVCACHE_H

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace cac::rt {

class KVPool;

/// Keys and values of every layer for a batch of rows, plus which slots hold
/// real tokens. Slot s of every row is written by the same forward call, so
/// all rows have length() slots; keyMask() says which are real. Forking a
/// rollout tree is select() with repeated row indices; the forks share the
/// storage of the tokens they have in common.
///
/// A cache belongs to one model (layer count, head shapes, dtype, device are
/// fixed by the first forward). Caches are meant for inference: forward under
/// torch::NoGradGuard.
class KVCache {
public:
  /// An empty cache (bind it to a model by passing it to forward()).
  KVCache() = default;
  /// A copy shares the storage of every token (select() of all rows).
  KVCache(const KVCache &other);
  KVCache &operator=(const KVCache &other);
  KVCache(KVCache &&other) noexcept;
  KVCache &operator=(KVCache &&other) noexcept;
  ~KVCache();

  /// Number of rows; 0 before the first forward.
  int64_t batchSize() const { return batch_; }
  /// Number of slots written so far.
  int64_t length() const { return length_; }
  /// Slots each row's table holds (grows geometrically; see reserve()).
  int64_t capacity() const { return capacity_; }
  /// [B, length()] bool: which slots hold real tokens.
  at::Tensor keyMask() const;
  /// [B] int64: real tokens per row, i.e. the position of each row's next
  /// token.
  const at::Tensor &nextPositions() const { return nextPos_; }
  /// Keys of layer \p layer, [B, num_kv_heads, length(), head_dim] (a copy
  /// gathered from the shared storage; zeros in padding slots).
  at::Tensor keys(int64_t layer) const;
  /// Values of layer \p layer, [B, num_kv_heads, length(), head_dim].
  at::Tensor values(int64_t layer) const;

  /// Bytes of one token's keys and values over all layers (0 before the
  /// first forward).
  int64_t bytesPerToken() const;
  /// Tokens whose keys and values the shared storage holds for some live
  /// cache (each shared token once).
  int64_t storedTokens() const;
  /// The most tokens the shared storage has held at once.
  int64_t peakStoredTokens() const;
  /// Bytes allocated for the shared storage (its capacity, not what is used;
  /// the same for every cache forked from the same one).
  int64_t memoryBytes() const;

  /// Makes room for \p slots slots in total per row so later forwards do not
  /// grow the rows' tables.
  void reserve(int64_t slots);
  /// Makes room in the shared storage for \p tokens more tokens, so that
  /// forwards of that many new tokens do not grow it.
  void reserveTokens(int64_t tokens);
  /// A new cache whose row i is row \p rows[i] of this one (rows may repeat:
  /// that is a fork). It shares this cache's storage; \p extraCapacity slots
  /// are reserved in its tables beyond length().
  KVCache select(const at::Tensor &rows, int64_t extraCapacity = 0) const;
  /// select() with a list of row indices.
  KVCache select(const std::vector<int64_t> &rows,
                 int64_t extraCapacity = 0) const;
  /// A fork at an earlier position: like select(), but row i keeps only the
  /// first \p keep[i] real tokens of row \p rows[i] (token positions below
  /// keep[i]); its later slots become padding, and its next token goes to
  /// position keep[i]. Each keep[i] must lie in [0, nextPositions() of that
  /// row]. Trailing slots that no row keeps are dropped.
  KVCache selectPrefix(const std::vector<int64_t> &rows,
                       const std::vector<int64_t> &keep,
                       int64_t extraCapacity = 0) const;

  /// Called by the model: starts a forward of \p inputMask ([B, T] bool),
  /// taking a storage slot for every real input token and recording the new
  /// slots in the key mask. Returns the key mask over the first length() + T
  /// slots.
  at::Tensor beginStep(const at::Tensor &inputMask);
  /// Called by each attention layer: stores the new keys and values
  /// ([B, Hkv, T, D]) of the real input tokens and returns the layer's keys
  /// and values of all length() + T slots, [B, Hkv, S, D], gathered from the
  /// storage for this step.
  std::pair<at::Tensor, at::Tensor> write(int64_t layer, const at::Tensor &k,
                                          const at::Tensor &v);
  /// Called by the model after the last layer: commits the T slots.
  void endStep(const at::Tensor &inputMask);

private:
  /// Grows the rows' tables and key mask to \p slots slots.
  void grow(int64_t slots);
  /// Gives every row's storage slots back to the pool and empties the cache.
  void release();
  /// [B * n] storage slots of the first \p n slots of every row.
  at::Tensor gatherIndex(int64_t n) const;

  std::shared_ptr<KVPool> pool_;
  at::Tensor table_;   // [B, capacity] int64: storage slot of each slot
  at::Tensor mask_;    // [B, capacity] bool
  at::Tensor nextPos_; // [B] int64
  /// Per row, the storage slots of its real tokens in position order (the
  /// references it holds).
  std::vector<std::vector<int64_t>> rowSlots_;
  int64_t batch_ = 0, length_ = 0, capacity_ = 0, reserved_ = 0;
  int64_t pending_ = 0; // T of the forward in progress
  /// The forward in progress: which of its B * T inputs are real and the
  /// storage slots they go to, and the storage slots of every row's
  /// length() + T slots.
  at::Tensor writeFrom_, writeTo_, gather_;
};

} // namespace cac::rt

#endif // CAC_RUNTIME_MODEL_KVCACHE_H

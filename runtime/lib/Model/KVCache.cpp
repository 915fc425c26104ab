//===- KVCache.cpp - Decoding rows' keys and values, shared --------------===//

#include "cac/Runtime/Model/KVCache.h"
#include "cac/Runtime/Model/ShapeString.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace cac::rt {

/// The token slots behind a family of caches: per layer, keys and values
/// [capacity, Hkv, D]. Slot 0 is the zero slot of padding; the others are
/// reference counted by the cache rows that read them.
class KVPool {
public:
  std::vector<at::Tensor> keys, values;
  int64_t capacity = 1;

  /// Makes sure \p n more slots can be taken without growing; grows to
  /// exactly what is missing when \p exact, else by half at least.
  void ensure(int64_t n, bool exact) {
    int64_t available = capacity - next_ + static_cast<int64_t>(free_.size());
    if (available >= n)
      return;
    int64_t want = capacity + (n - available);
    if (!exact)
      want = std::max(want, capacity + capacity / 2);
    for (auto *list : {&keys, &values})
      for (at::Tensor &t : *list) {
        if (!t.defined())
          continue;
        std::vector<int64_t> shape = t.sizes().vec();
        shape[0] = want;
        at::Tensor grown = at::zeros(shape, t.options());
        grown.narrow(0, 0, next_).copy_(t.narrow(0, 0, next_));
        t = grown;
      }
    refs_.resize(static_cast<size_t>(want), 0);
    capacity = want;
  }
  /// A free slot, held once (ensure() made room for it).
  int64_t take() {
    int64_t slot;
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    } else {
      slot = next_++;
    }
    refs_[static_cast<size_t>(slot)] = 1;
    peak = std::max(peak, ++used);
    return slot;
  }
  void retain(const std::vector<int64_t> &slots) {
    for (int64_t s : slots)
      ++refs_[static_cast<size_t>(s)];
  }
  void release(const std::vector<int64_t> &slots) {
    for (int64_t s : slots)
      if (--refs_[static_cast<size_t>(s)] == 0) {
        free_.push_back(s);
        --used;
      }
  }
  /// The layer's storage, created on its first write.
  void bind(int64_t layer, const at::Tensor &k, const at::Tensor &v) {
    if (layer >= static_cast<int64_t>(keys.size())) {
      keys.resize(layer + 1);
      values.resize(layer + 1);
    }
    at::Tensor &K = keys[layer];
    if (!K.defined()) {
      K = at::zeros({capacity, k.size(1), k.size(3)}, k.options());
      values[layer] = at::zeros({capacity, v.size(1), v.size(3)}, v.options());
    } else if (K.size(1) != k.size(1) || K.size(2) != k.size(3)) {
      throw std::runtime_error("KV cache: layer " + std::to_string(layer) +
                               " holds keys of " + std::to_string(K.size(1)) +
                               " heads x " + std::to_string(K.size(2)) +
                               ", cannot append " + shapeString(k.sizes()) +
                               " (a cache of another model?)");
    }
  }
  int64_t bytesPerToken() const {
    int64_t n = 0;
    for (auto *list : {&keys, &values})
      for (const at::Tensor &t : *list)
        if (t.defined())
          n += t[0].numel() * t.element_size();
    return n;
  }

  int64_t used = 0, peak = 0; // slots held by some row

private:
  std::vector<int32_t> refs_ = {0}; // per slot; slot 0 is never counted
  std::vector<int64_t> free_;       // slots no row holds
  int64_t next_ = 1;                // slots from here were never taken
};

KVCache::KVCache(const KVCache &other) { *this = other; }

KVCache &KVCache::operator=(const KVCache &other) {
  if (this == &other)
    return *this;
  KVCache copy;
  if (other.batch_ > 0)
    copy = other.select(at::arange(other.batch_, at::kLong),
                        other.capacity_ - other.length_);
  else
    copy.pool_ = other.pool_;
  return *this = std::move(copy);
}

KVCache::KVCache(KVCache &&other) noexcept { *this = std::move(other); }

KVCache &KVCache::operator=(KVCache &&other) noexcept {
  if (this == &other)
    return *this;
  release();
  pool_ = std::move(other.pool_);
  table_ = std::move(other.table_);
  mask_ = std::move(other.mask_);
  nextPos_ = std::move(other.nextPos_);
  rowSlots_ = std::move(other.rowSlots_);
  batch_ = other.batch_;
  length_ = other.length_;
  capacity_ = other.capacity_;
  reserved_ = other.reserved_;
  pending_ = other.pending_;
  writeFrom_ = std::move(other.writeFrom_);
  writeTo_ = std::move(other.writeTo_);
  gather_ = std::move(other.gather_);
  other.rowSlots_.clear();
  other.pool_.reset();
  other.batch_ = other.length_ = other.capacity_ = other.reserved_ = 0;
  other.pending_ = 0;
  return *this;
}

KVCache::~KVCache() { release(); }

void KVCache::release() {
  if (pool_)
    for (const auto &slots : rowSlots_)
      pool_->release(slots);
  rowSlots_.clear();
}

at::Tensor KVCache::keyMask() const {
  if (!mask_.defined())
    return at::zeros({0, 0}, at::kBool);
  return mask_.narrow(1, 0, length_);
}

at::Tensor KVCache::gatherIndex(int64_t n) const {
  return table_.narrow(1, 0, n).reshape({-1});
}

/// The pool's keys or values of \p layer, which must have been written.
static const at::Tensor &stored(const std::shared_ptr<KVPool> &pool, bool keys,
                                int64_t layer) {
  if (!pool || layer < 0 || layer >= static_cast<int64_t>(pool->keys.size()) ||
      !pool->keys[layer].defined())
    throw std::runtime_error("KV cache: layer " + std::to_string(layer) +
                             " holds no keys and values");
  return keys ? pool->keys[layer] : pool->values[layer];
}

at::Tensor KVCache::keys(int64_t layer) const {
  const at::Tensor &K = stored(pool_, true, layer);
  return K.index_select(0, gatherIndex(length_))
      .view({batch_, length_, K.size(1), K.size(2)})
      .transpose(1, 2);
}

at::Tensor KVCache::values(int64_t layer) const {
  const at::Tensor &V = stored(pool_, false, layer);
  return V.index_select(0, gatherIndex(length_))
      .view({batch_, length_, V.size(1), V.size(2)})
      .transpose(1, 2);
}

int64_t KVCache::bytesPerToken() const {
  return pool_ ? pool_->bytesPerToken() : 0;
}

int64_t KVCache::storedTokens() const { return pool_ ? pool_->used : 0; }

int64_t KVCache::peakStoredTokens() const { return pool_ ? pool_->peak : 0; }

int64_t KVCache::memoryBytes() const {
  return pool_ ? pool_->capacity * pool_->bytesPerToken() : 0;
}

void KVCache::reserve(int64_t slots) {
  reserved_ = std::max(reserved_, slots);
  if (batch_ > 0 && slots > capacity_)
    grow(slots);
}

void KVCache::reserveTokens(int64_t tokens) {
  if (!pool_)
    pool_ = std::make_shared<KVPool>();
  pool_->ensure(std::max<int64_t>(tokens, 0), /*exact=*/true);
}

void KVCache::grow(int64_t slots) {
  if (slots <= capacity_)
    return;
  auto regrow = [&](at::Tensor &t) {
    at::Tensor n = at::zeros({batch_, slots}, t.options());
    n.narrow(1, 0, length_).copy_(t.narrow(1, 0, length_));
    t = n;
  };
  regrow(table_);
  regrow(mask_);
  capacity_ = slots;
}

at::Tensor KVCache::beginStep(const at::Tensor &inputMask) {
  int64_t B = inputMask.size(0), T = inputMask.size(1);
  if (batch_ == 0) {
    if (!pool_)
      pool_ = std::make_shared<KVPool>();
    batch_ = B;
    mask_ = at::zeros({B, 0}, inputMask.options().dtype(at::kBool));
    table_ = at::zeros({B, 0}, inputMask.options().dtype(at::kLong));
    nextPos_ = at::zeros({B}, inputMask.options().dtype(at::kLong));
    rowSlots_.assign(static_cast<size_t>(B), {});
  } else if (B != batch_) {
    throw std::runtime_error("KV cache holds " + std::to_string(batch_) +
                             " rows but the input has " + std::to_string(B));
  }
  int64_t need = length_ + T;
  if (need > capacity_)
    grow(std::max({need, reserved_, capacity_ + capacity_ / 2}));
  mask_.narrow(1, length_, T).copy_(inputMask);

  // A storage slot for every real input token, in row-major order.
  at::Tensor real = inputMask.to(at::kCPU, at::kBool).contiguous();
  const bool *isReal = real.data_ptr<bool>();
  pool_->ensure(real.sum().item<int64_t>(), /*exact=*/false);
  std::vector<int64_t> slots(static_cast<size_t>(B * T), 0), from, to;
  for (int64_t i = 0; i < B * T; ++i) {
    if (!isReal[i])
      continue;
    int64_t slot = pool_->take();
    slots[static_cast<size_t>(i)] = slot;
    rowSlots_[static_cast<size_t>(i / T)].push_back(slot);
    from.push_back(i);
    to.push_back(slot);
  }
  auto dev = inputMask.device();
  table_.narrow(1, length_, T)
      .copy_(at::tensor(slots, at::kLong).view({B, T}).to(dev));
  writeFrom_ = at::tensor(from, at::kLong).to(dev);
  writeTo_ = at::tensor(to, at::kLong).to(dev);
  gather_ = gatherIndex(need);
  pending_ = T;
  return mask_.narrow(1, 0, need);
}

std::pair<at::Tensor, at::Tensor>
KVCache::write(int64_t layer, const at::Tensor &k, const at::Tensor &v) {
  int64_t B = k.size(0), Hkv = k.size(1), T = k.size(2);
  if (T != pending_ || B != batch_)
    throw std::runtime_error("KV cache: write of " + shapeString(k.sizes()) +
                             " outside beginStep");
  pool_->bind(layer, k, v);
  at::Tensor &K = pool_->keys[layer];
  at::Tensor &V = pool_->values[layer];
  if (writeFrom_.numel() > 0) {
    auto rows = [&](const at::Tensor &x) { // [B * T, Hkv, D], real ones
      return x.transpose(1, 2)
          .reshape({B * T, Hkv, x.size(3)})
          .index_select(0, writeFrom_);
    };
    K.index_copy_(0, writeTo_, rows(k));
    V.index_copy_(0, writeTo_, rows(v));
  }
  int64_t S = length_ + T;
  auto gather = [&](const at::Tensor &store) {
    return store.index_select(0, gather_)
        .view({B, S, Hkv, store.size(2)})
        .transpose(1, 2);
  };
  return {gather(K), gather(V)};
}

void KVCache::endStep(const at::Tensor &inputMask) {
  length_ += pending_;
  nextPos_ = nextPos_ + inputMask.sum(1).to(at::kLong);
  pending_ = 0;
  writeFrom_ = writeTo_ = gather_ = at::Tensor();
}

KVCache KVCache::select(const at::Tensor &rowsIn, int64_t extraCapacity) const {
  KVCache out;
  if (batch_ == 0)
    throw std::runtime_error("KV cache: select from an empty cache");
  at::Tensor rows = rowsIn.to(at::kCPU, at::kLong).reshape({-1}).contiguous();
  if (rows.numel() > 0) {
    int64_t lo = rows.min().item<int64_t>(), hi = rows.max().item<int64_t>();
    if (lo < 0 || hi >= batch_)
      throw std::runtime_error("KV cache: row index out of range [0, " +
                               std::to_string(batch_) + ")");
  }
  int64_t cap = length_ + std::max<int64_t>(extraCapacity, 0);
  out.pool_ = pool_;
  out.batch_ = rows.numel();
  out.length_ = length_;
  out.capacity_ = cap;
  out.reserved_ = cap;
  at::Tensor onDevice = rows.to(nextPos_.device());
  auto take = [&](const at::Tensor &t) {
    at::Tensor n = at::zeros({out.batch_, cap}, t.options());
    n.narrow(1, 0, length_)
        .copy_(t.narrow(1, 0, length_).index_select(0, onDevice));
    return n;
  };
  out.table_ = take(table_);
  out.mask_ = take(mask_);
  out.nextPos_ = nextPos_.index_select(0, onDevice);
  const int64_t *r = rows.data_ptr<int64_t>();
  for (int64_t i = 0; i < out.batch_; ++i) {
    out.rowSlots_.push_back(rowSlots_[static_cast<size_t>(r[i])]);
    pool_->retain(out.rowSlots_.back());
  }
  return out;
}

KVCache KVCache::select(const std::vector<int64_t> &rows,
                        int64_t extraCapacity) const {
  return select(at::tensor(rows, at::kLong), extraCapacity);
}

KVCache KVCache::selectPrefix(const std::vector<int64_t> &rows,
                              const std::vector<int64_t> &keep,
                              int64_t extraCapacity) const {
  if (rows.size() != keep.size())
    throw std::runtime_error("KV cache: selectPrefix got " +
                             std::to_string(rows.size()) + " rows but " +
                             std::to_string(keep.size()) + " prefix lengths");
  KVCache out = select(rows, extraCapacity);
  if (out.batch_ == 0)
    return out;
  for (size_t i = 0; i < keep.size(); ++i) {
    std::vector<int64_t> &slots = out.rowSlots_[i];
    if (keep[i] < 0 || keep[i] > static_cast<int64_t>(slots.size()))
      throw std::runtime_error("KV cache: cannot keep " +
                               std::to_string(keep[i]) + " tokens of row " +
                               std::to_string(rows[i]) + ", which holds " +
                               std::to_string(slots.size()));
  }
  at::Tensor keepT =
      at::tensor(keep, at::kLong).to(out.nextPos_.device()).view({-1, 1});
  at::Tensor mask = out.mask_.narrow(1, 0, length_);
  at::Tensor position = mask.to(at::kLong).cumsum(1) - 1; // of real slots
  at::Tensor kept = mask & (position < keepT);
  mask.copy_(kept);
  at::Tensor table = out.table_.narrow(1, 0, length_);
  table.masked_fill_(kept.logical_not(), 0);
  for (size_t i = 0; i < keep.size(); ++i) {
    std::vector<int64_t> &slots = out.rowSlots_[i];
    std::vector<int64_t> dropped(slots.begin() + keep[i], slots.end());
    pool_->release(dropped);
    slots.resize(static_cast<size_t>(keep[i]));
  }
  out.nextPos_ = keepT.view({-1}).clone();
  // Slots past the last kept one are never attended again: reuse them.
  at::Tensor used = kept.any(0).nonzero();
  out.length_ = used.numel() == 0 ? 0 : used.max().item<int64_t>() + 1;
  return out;
}

} // namespace cac::rt

//===- ReplayBuffer.cpp - SPO-tree's replay buffer of node samples --------===//

#include "cac/Runtime/Train/ReplayBuffer.h"

#include "cac/Runtime/Support/Random.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace cac::rt::train {

namespace {

uint64_t entryKey(uint64_t seed, int64_t step, const ReplayEntry &e) {
  uint64_t h = splitmix64(seed ^ 0x6361632d7265706cULL); // "cac-repl"
  for (int64_t v : {step, e.step, e.slot, e.ordinal})
    h = splitmix64(h ^ static_cast<uint64_t>(v));
  return h;
}

bool trainOrder(const ReplayEntry &a, const ReplayEntry &b) {
  return std::tie(a.slot, a.step, a.ordinal) <
         std::tie(b.slot, b.step, b.ordinal);
}

} // namespace

ReplayBuffer::ReplayBuffer(int64_t steps, int64_t take)
    : steps_(steps), take_(take) {
  if (steps < 0 || take < 0)
    throw std::invalid_argument("ReplayBuffer: steps and take must be >= 0");
}

void ReplayBuffer::add(std::vector<ReplayEntry> entries) {
  std::map<std::pair<int64_t, int64_t>, int64_t> count;
  for (ReplayEntry &e : entries) {
    e.ordinal = count[{e.step, e.slot}]++;
    entries_.push_back(std::move(e));
  }
}

ReplayBuffer::Taken ReplayBuffer::take(int64_t step, uint64_t seed) {
  Taken out;
  // 2. Drop the stale entries (an entry of step s lives through the steps
  // s .. s + steps - 1).
  if (steps_ > 0) {
    auto stale = [&](const ReplayEntry &e) { return step - e.step >= steps_; };
    out.dropped = std::count_if(entries_.begin(), entries_.end(), stale);
    entries_.erase(std::remove_if(entries_.begin(), entries_.end(), stale),
                   entries_.end());
  }
  // 3. Up to `take` entries of each question: the smallest keys.
  std::vector<char> chosen(entries_.size(), 1);
  if (take_ > 0) {
    std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<uint64_t, size_t>>>
        byQuestion;
    for (size_t i = 0; i < entries_.size(); ++i)
      byQuestion[{entries_[i].step, entries_[i].slot}].push_back(
          {entryKey(seed, step, entries_[i]), i});
    for (auto &[question, keys] : byQuestion) {
      if (static_cast<int64_t>(keys.size()) <= take_)
        continue;
      std::nth_element(keys.begin(), keys.begin() + take_, keys.end());
      for (size_t k = static_cast<size_t>(take_); k < keys.size(); ++k)
        chosen[keys[k].second] = 0;
    }
  }
  // 4. Remove and return them, in training order.
  std::vector<ReplayEntry> keep;
  for (size_t i = 0; i < entries_.size(); ++i)
    (chosen[i] ? out.entries : keep).push_back(std::move(entries_[i]));
  entries_ = std::move(keep);
  std::stable_sort(out.entries.begin(), out.entries.end(), trainOrder);
  return out;
}

void ReplayBuffer::load(std::vector<ReplayEntry> entries, int64_t slotBegin,
                        int64_t slotEnd) {
  entries_.clear();
  for (ReplayEntry &e : entries)
    if (e.slot >= slotBegin && e.slot < slotEnd)
      entries_.push_back(std::move(e));
}

std::vector<double> ReplayBuffer::pack(const std::vector<ReplayEntry> &entries) {
  std::vector<double> v;
  for (const ReplayEntry &e : entries) {
    const Rollout &r = e.sample;
    v.insert(v.end(), {double(e.step), double(e.slot), double(e.ordinal),
                       r.reward, r.correct ? 1.0 : 0.0, double(r.prompt.size()),
                       double(r.response.size()), double(e.weight.size())});
    v.insert(v.end(), r.prompt.begin(), r.prompt.end());
    v.insert(v.end(), r.response.begin(), r.response.end());
    v.insert(v.end(), r.logp.begin(), r.logp.end());
    v.insert(v.end(), r.entropy.begin(), r.entropy.end());
    v.insert(v.end(), e.adv.begin(), e.adv.end());
    v.insert(v.end(), e.weight.begin(), e.weight.end());
  }
  return v;
}

std::vector<ReplayEntry> ReplayBuffer::unpack(const std::vector<double> &v) {
  std::vector<ReplayEntry> out;
  size_t at = 0;
  auto need = [&](size_t n) {
    if (v.size() - at < n)
      throw std::runtime_error("replay buffer: a packed entry is truncated");
  };
  while (at < v.size()) {
    need(8);
    ReplayEntry e;
    e.step = static_cast<int64_t>(v[at]);
    e.slot = static_cast<int64_t>(v[at + 1]);
    e.ordinal = static_cast<int64_t>(v[at + 2]);
    e.sample.reward = v[at + 3];
    e.sample.correct = v[at + 4] != 0.0;
    for (int k = 5; k < 8; ++k)
      if (!(v[at + k] >= 0 && v[at + k] < 1e12))
        throw std::runtime_error("replay buffer: a packed entry has an "
                                 "invalid length");
    size_t P = static_cast<size_t>(v[at + 5]), T = static_cast<size_t>(v[at + 6]),
           W = static_cast<size_t>(v[at + 7]);
    if (W != 0 && W != T)
      throw std::runtime_error("replay buffer: a packed entry's weight "
                               "differs in length from its tokens");
    at += 8;
    need(P + 4 * T + W);
    auto ints = [&](std::vector<int64_t> &dst, size_t n) {
      for (size_t i = 0; i < n; ++i)
        dst.push_back(static_cast<int64_t>(v[at++]));
    };
    auto floats = [&](std::vector<float> &dst, size_t n) {
      for (size_t i = 0; i < n; ++i)
        dst.push_back(static_cast<float>(v[at++]));
    };
    ints(e.sample.prompt, P);
    ints(e.sample.response, T);
    floats(e.sample.logp, T);
    floats(e.sample.entropy, T);
    floats(e.adv, T);
    floats(e.weight, W);
    e.sample.group = e.slot;
    out.push_back(std::move(e));
  }
  return out;
}

} // namespace cac::rt::train

//===- Checkpointing.cpp - Checkpoints and --resume -----------------------===//

#include "Phases.h"

#include "cac/Runtime/Model/CpuKernels.h"

#include <cstdio>

namespace fs = std::filesystem;

namespace cac::rt::train {

namespace {

CheckpointState checkpointState(TrainerState &s, bool rlPhase) {
  CheckpointState st;
  ModelSet &m = s.models;
  st.models.push_back({"policy", m.policy});
  if (rlPhase && m.needReference)
    st.models.push_back({"reference", m.reference});
  if (m.critic)
    st.models.push_back({"critic", m.critic});
  st.optimizer = m.optimizer.get();
  st.generators = {{"sampling", s.sampleGen}, {"shuffle", s.shuffleGen}};
  return st;
}

/// This worker's share of the checkpoint's replay buffer (its prompts'
/// slots).
void loadReplay(TrainerState &s, const CheckpointState &st,
                const fs::path &dir) {
  if (!s.replay.enabled() || !st.tensors.count("replay"))
    return;
  at::Tensor t = st.tensors.at("replay").to(at::kDouble).contiguous();
  auto [lo, hi] = s.world.shard(s.cfg.prompts);
  try {
    s.replay.load(ReplayBuffer::unpack(std::vector<double>(
                      t.data_ptr<double>(), t.data_ptr<double>() + t.numel())),
                  lo, hi);
  } catch (const std::exception &e) {
    throw TrainError("--resume: checkpoint '" + dir.string() +
                     "': " + e.what());
  }
}

} // namespace

fs::path checkpointDir(const TrainerState &s) {
  return s.cfg.out / "checkpoint";
}

void saveCheckpointNow(TrainerState &s) {
  // Every worker's replay buffer entries, packed, in rank order.
  std::vector<double> replayPacked;
  if (s.replay.enabled())
    replayPacked = s.world.gather(ReplayBuffer::pack(s.replay.entries()));
  if (!s.world.writer())
    return;
  bool rl = s.step >= s.cfg.sft.steps;
  CheckpointState st = checkpointState(s, rl);
  st.step = s.step;
  st.extra = {{"run", s.cfg.name},          {"sft_steps", s.cfg.sft.steps},
              {"elapsed_s", s.elapsed()},   {"cpu_kernels", cpuKernelSet()},
              {"device", s.device().str()}, {"kl_coef", s.klCoef}};
  if (s.replay.enabled()) // numbers, exactly (tokens, floats, counters)
    st.tensors["replay"] = at::tensor(replayPacked, at::kDouble).reshape({-1});
  if (!std::isnan(s.evalStart))
    st.extra["eval_acc_rl_start"] = s.evalStart;
  try {
    saveCheckpoint(checkpointDir(s), st);
  } catch (const std::exception &e) {
    throw TrainError(std::string("writing the checkpoint failed: ") + e.what());
  }
}

int64_t resume(TrainerState &s) {
  const TrainConfig &cfg = s.cfg;
  fs::path dir = checkpointDir(s);
  if (!fs::exists(dir))
    throw TrainError("--resume: no checkpoint in '" + dir.string() +
                     "' (start without --resume)");
  try {
    CheckpointInfo info = readCheckpointInfo(dir);
    int64_t sftSaved = info.extra.value("sft_steps", int64_t(-1));
    if (sftSaved != cfg.sft.steps)
      throw TrainError("--resume: checkpoint '" + dir.string() +
                       "' was written with " + std::to_string(sftSaved) +
                       " SFT steps, this run has " +
                       std::to_string(cfg.sft.steps));
    if (info.step > cfg.sft.steps + cfg.steps)
      throw TrainError("--resume: checkpoint '" + dir.string() +
                       "' is at step " + std::to_string(info.step) +
                       ", beyond this run's " +
                       std::to_string(cfg.sft.steps + cfg.steps) + " steps");
    bool rl = info.step >= cfg.sft.steps;
    if (rl)
      enterRl(s);
    else
      buildOptimizer(s, false);
    CheckpointState st = checkpointState(s, rl);
    loadCheckpoint(dir, st);
    if (st.extra.contains("eval_acc_rl_start"))
      s.evalStart = st.extra["eval_acc_rl_start"].get<double>();
    s.elapsedBefore = st.extra.value("elapsed_s", 0.0);
    s.klCoef = st.extra.value("kl_coef", cfg.kl.coef);
    loadReplay(s, st, dir);
    // Other CPU kernels round differently: the run goes on, but will not
    // match an uninterrupted one bit for bit.
    std::string saved = st.extra.value("cpu_kernels", std::string());
    const std::string here = cpuKernelSet();
    if (s.opts.verbose && !saved.empty() && saved != here)
      std::fprintf(stderr,
                   "cac-run: note: checkpoint '%s' was written with CPU "
                   "kernels '%s', this process runs '%s'; the run resumes, "
                   "but will not match an uninterrupted one bit for bit\n",
                   dir.string().c_str(), saved.c_str(), here.c_str());
    return st.step;
  } catch (const TrainError &) {
    throw;
  } catch (const std::exception &e) {
    throw TrainError(std::string("--resume: ") + e.what());
  }
}

} // namespace cac::rt::train

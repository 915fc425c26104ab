//===- Checkpoint.h - Resumable training checkpoints ------------*- C++ -*-===//
//
// A checkpoint is a folder:
//
//   DIR/checkpoint.json        format, step, models, optimizer groups, extra
//   DIR/<model>/config.json    one HF folder per named model ("policy",
//   DIR/<model>/model.safetensors   "critic", ...): loadPretrained reads it
//   DIR/optimizer.safetensors  AdamW state per parameter
//   DIR/rng.safetensors        generator states
//   DIR/tensors.safetensors    other named tensors (when there are any)
//
// It is written into `DIR.tmp-XXXXXX` (every file fsync'ed) and renamed to
// DIR in one step (replacing an older DIR by an atomic exchange), so a crash
// never leaves a half-written checkpoint visible. checkpoint.json records
// every file's size and CRC-32C; loading checks both (a truncated or a
// same-size corrupted file is named) and reports exactly what does not
// match.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_MODEL_CHECKPOINT_H
#define CAC_RUNTIME_MODEL_CHECKPOINT_H

#include "cac/Runtime/Model/Transformer.h"

#include <ATen/core/Generator.h>
#include <nlohmann/json.hpp>
#include <torch/optim/adamw.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cac::rt {

/// What a checkpoint holds. For saving, fill it; for loading, construct the
/// models, optimizer and generators as for a fresh run and loadCheckpoint
/// overwrites their state (and sets step and extra).
struct CheckpointState {
  /// The training step (or any counter the trainer resumes from).
  int64_t step = 0;
  /// Named models, e.g. {"policy", policy}, {"critic", critic}. Names are
  /// folder names: letters, digits, '_', '-', '.'.
  std::vector<std::pair<std::string, TransformerLM>> models;
  /// AdamW over parameters of the models above (optional). Parameters are
  /// identified by "<model>/<HF name>", so the optimizer may be rebuilt in
  /// any order of groups as long as each group holds the same parameters.
  torch::optim::AdamW *optimizer = nullptr;
  /// Named CPU generators (e.g. {"sampling", gen}); their states are saved
  /// and restored. LibTorch's default CPU generator is always included.
  std::vector<std::pair<std::string, at::Generator>> generators;
  /// Anything else the trainer needs (schedules, metrics, data position).
  nlohmann::json extra = nlohmann::json::object();
  /// Named CPU tensors the trainer needs besides the models (a replay
  /// buffer), in their own dtype; loading replaces the map with the saved
  /// ones.
  std::map<std::string, at::Tensor> tensors;
};

/// Summary of a checkpoint folder without loading tensors.
struct CheckpointInfo {
  int64_t step = 0;
  std::vector<std::string> models;
  bool hasOptimizer = false;
  std::vector<std::string> generators;
  nlohmann::json extra;
};

/// Writes \p state to \p dir atomically (see the file comment). Throws
/// std::runtime_error on I/O errors or when an optimizer parameter belongs
/// to none of the models; nothing is visible under \p dir then.
void saveCheckpoint(const std::filesystem::path &dir,
                    const CheckpointState &state);

/// Reads and validates `dir/checkpoint.json` (format, files present with the
/// recorded sizes).
CheckpointInfo readCheckpointInfo(const std::filesystem::path &dir);

/// The complete checkpoint with the highest step among the folders directly
/// inside \p root (ties: the greatest name), or nothing. Temporary folders of
/// unfinished writes (`*.tmp-*`) and folders without checkpoint.json are
/// skipped; a folder whose checkpoint.json is malformed or whose files do
/// not match it throws (a damaged checkpoint is reported, not silently
/// passed over).
std::optional<std::filesystem::path>
latestCheckpoint(const std::filesystem::path &root);

/// Restores \p state from \p dir after checking every file's checksum: every
/// model named in \p state must be in
/// the checkpoint with the same config and parameter shapes; the optimizer's
/// groups must hold the same parameters; each named generator must be saved.
/// Errors throw std::runtime_error naming the checkpoint and what differs.
void loadCheckpoint(const std::filesystem::path &dir, CheckpointState &state);

} // namespace cac::rt

#endif // CAC_RUNTIME_MODEL_CHECKPOINT_H

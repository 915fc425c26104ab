//===- FuzzCheckpoint.cpp - libFuzzer target over the checkpoint reader ---===//
//
// cac-fuzz-checkpoint: what `cac-run --resume` does with a checkpoint folder:
// latestCheckpoint (which folder to resume), readCheckpointInfo
// (checkpoint.json: format, step, the files with their sizes) and
// loadCheckpoint (checksums, the RNG states, each model's config.json and
// weights, the AdamW state, the extra tensors) into the state of a trainer
// with a tiny policy, AdamW over it and one sampling generator.
//
// An input is a checkpoint folder, packed: files one after another, each
// after a line "==> NAME <==" (what `tail -n +1 FILES` prints, with the blank
// line before every header but the first); bytes before the first header
// are checkpoint.json. The files are written to a folder of this process's
// own under $TMPDIR (a folder reader needs a folder), emptied before each
// input. Errors are std::runtime_error naming the checkpoint and what is
// wrong; any other exception, a crash, a sanitizer report or a hang is a bug.
//
// CAC_FUZZ_WRITE_SEED=FILE (environment): instead of fuzzing, save the
// trainer's state after one update with saveCheckpoint, pack the folder into
// FILE (and into FILE-unchecked without its checksums) and exit: run.sh seeds the fuzzer with that.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Model/Checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace cac::rt;

namespace {

const std::string kHeaderStart = "==> ", kHeaderEnd = " <==\n";

/// What a trainer holds: the policy, AdamW over it, a generator.
struct Trainer {
  TransformerLM policy;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  at::Generator generator;

  Trainer() : policy(tinyConfig()),
              generator(at::make_generator<at::CPUGeneratorImpl>(7)) {
    optimizer = std::make_unique<torch::optim::AdamW>(
        policy->parameters(), torch::optim::AdamWOptions(1e-2));
  }

  static ModelConfig tinyConfig() {
    ModelConfig c;
    c.vocabSize = 16;
    c.hiddenSize = 8;
    c.intermediateSize = 16;
    c.numHiddenLayers = 1;
    c.numAttentionHeads = 2;
    c.numKeyValueHeads = 1;
    c.maxPositionEmbeddings = 16;
    return c;
  }

  CheckpointState state() {
    CheckpointState s;
    s.models = {{"policy", policy}};
    s.optimizer = optimizer.get();
    s.generators = {{"sampling", generator}};
    return s;
  }
};

fs::path root, dir;

bool validName(const std::string &name) {
  if (name.empty() || name.front() == '/' || name.back() == '/' ||
      name.find("..") != std::string::npos || name.size() > 64)
    return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
          c == '-' || c == '.' || c == '/'))
      return false;
  return true;
}

/// Unpacks \p input into `dir`; false when a header names a path this
/// target does not write (outside the folder, odd characters).
bool unpack(const std::string &input) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir);
  std::string name = "checkpoint.json";
  size_t pos = 0;
  if (input.compare(0, kHeaderStart.size(), kHeaderStart) == 0) {
    size_t end = input.find(kHeaderEnd);
    if (end == std::string::npos)
      return false;
    name = input.substr(kHeaderStart.size(), end - kHeaderStart.size());
    pos = end + kHeaderEnd.size();
  }
  for (;;) {
    if (!validName(name))
      return false;
    size_t next = input.find("\n" + kHeaderStart, pos);
    size_t stop = next == std::string::npos ? input.size() : next;
    fs::path file = dir / name;
    fs::create_directories(file.parent_path(), ec);
    if (ec || fs::is_directory(file))
      return false;
    std::ofstream(file, std::ios::binary)
        .write(input.data() + pos, std::streamsize(stop - pos));
    if (next == std::string::npos)
      return true;
    size_t end = input.find(kHeaderEnd, next + 1);
    if (end == std::string::npos)
      return false;
    name = input.substr(next + 1 + kHeaderStart.size(),
                        end - next - 1 - kHeaderStart.size());
    pos = end + kHeaderEnd.size();
  }
}

/// The files of \p from, packed as an input.
std::string pack(const fs::path &from) {
  std::string out = "";
  std::vector<fs::path> files;
  for (const auto &e : fs::recursive_directory_iterator(from))
    if (e.is_regular_file())
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path &f : files) {
    if (!out.empty())
      out += "\n";
    out += kHeaderStart + fs::relative(f, from).string() + kHeaderEnd;
    std::ifstream in(f, std::ios::binary);
    out.append(std::istreambuf_iterator<char>(in),
               std::istreambuf_iterator<char>());
  }
  return out;
}

int writeSeed(const char *file) {
  Trainer t;
  at::Tensor ids = at::tensor({1, 2, 3, 4}, at::kLong).view({1, 4});
  t.optimizer->zero_grad();
  t.policy->forward(ids).pow(2).mean().backward();
  t.optimizer->step();
  CheckpointState s = t.state();
  s.step = 3;
  s.extra = {{"data_position", 12}};
  s.tensors["replay/rewards"] = at::arange(4, at::kFloat);
  fs::remove_all(dir);
  saveCheckpoint(dir, s);
  std::ofstream(file, std::ios::binary) << pack(dir);
  // The same without checksums (a checkpoint of an older cac-run): most
  // mutations of a file are caught by its checksum, and this one lets the
  // fuzzer reach the loading of what the checksums guard.
  nlohmann::json meta;
  std::ifstream(dir / "checkpoint.json") >> meta;
  meta.erase("checksums");
  std::ofstream(dir / "checkpoint.json") << meta.dump(2);
  std::ofstream(std::string(file) + "-unchecked", std::ios::binary)
      << pack(dir);
  return 0;
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  const char *tmp = std::getenv("TMPDIR");
  root = fs::path(tmp && *tmp ? tmp : "/tmp") /
         ("cac-fuzz-checkpoint-" + std::to_string(::getpid()));
  dir = root / "step-3";
  if (const char *seed = std::getenv("CAC_FUZZ_WRITE_SEED")) {
    int status = writeSeed(seed);
    fs::remove_all(root);
    std::exit(status);
  }
  std::atexit([] {
    std::error_code ec;
    fs::remove_all(root, ec);
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!unpack(std::string(reinterpret_cast<const char *>(data), size)))
    return -1; // not an input this target can write: keep it out of the corpus
  try {
    std::optional<fs::path> latest = latestCheckpoint(root);
    CheckpointInfo info = readCheckpointInfo(dir);
    if (!latest || *latest != dir)
      __builtin_trap(); // a valid folder, the only one, must be found
    (void)info;
    Trainer t;
    CheckpointState s = t.state();
    loadCheckpoint(dir, s);
  } catch (const std::runtime_error &) {
  }
  return 0;
}

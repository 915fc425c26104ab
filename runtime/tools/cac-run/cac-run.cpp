//===- cac-run.cpp - Train a policy as a training file says ---------------===//
//
//   cac-run TRAIN.cac [--steps N] [--sft-steps N] [--eval-every N]
//                     [--seed N] [--out DIR] [--threads N] [--resume]
//                     [--compiler PATH] [--no-progress] [--check]
//
// Exit status: 0 on success, 1 on a diagnostic or a run error, 2 on a bad
// command line. See docs/training.md.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Train/TrainFile.h"
#include "cac/Runtime/Train/Trainer.h"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace cac::rt::train;

namespace {

const char *kUsage =
    "usage: cac-run TRAIN.cac [options]\n"
    "\n"
    "Trains a policy as the training file says (docs/training.md).\n"
    "\n"
    "options (each overrides the training file):\n"
    "  --steps N        RL steps\n"
    "  --sft-steps N    SFT warm-start steps (0: none)\n"
    "  --eval-every N   held-out greedy eval every N RL steps (0: start/end)\n"
    "  --seed N         seed of initialization, data and sampling\n"
    "  --out DIR        output folder (metrics, plot, checkpoint, final)\n"
    "  --threads N      CPU threads (0: LibTorch's default)\n"
    "other options:\n"
    "  --resume         continue from DIR/checkpoint\n"
    "  --compiler PATH  the `cac` compiler for .cac estimators (default:\n"
    "                   $CAC_COMPILER, else `cac` beside cac-run, else PATH)\n"
    "  --no-progress    no progress bar\n"
    "  --check          check the training file and the estimator, then exit\n";

int usageError(const std::string &msg) {
  std::cerr << "cac-run: error: " << msg << "\n" << kUsage;
  return 2;
}

std::optional<int64_t> parseCount(const std::string &s) {
  if (s.empty() || s.size() > 15)
    return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9')
      return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

bool isExecutable(const fs::path &p) {
  return !p.empty() && fs::is_regular_file(p) && access(p.c_str(), X_OK) == 0;
}

fs::path findCompiler() {
  if (const char *env = std::getenv("CAC_COMPILER"))
    if (isExecutable(env))
      return env;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && isExecutable(self.parent_path() / "cac"))
    return self.parent_path() / "cac";
  if (const char *path = std::getenv("PATH")) {
    std::stringstream ss(path);
    std::string dir;
    while (std::getline(ss, dir, ':'))
      if (!dir.empty() && isExecutable(fs::path(dir) / "cac"))
        return fs::path(dir) / "cac";
  }
  return {};
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string file;
  Overrides ov;
  TrainerOptions opts;
  bool check = false;
  std::optional<fs::path> compiler;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &a = args[i];
    auto value = [&](std::string &out) {
      if (i + 1 >= args.size())
        return false;
      out = args[++i];
      return true;
    };
    auto count = [&](std::optional<int64_t> &out) -> bool {
      std::string v;
      if (!value(v)) {
        usageError(a + " needs a value");
        return false;
      }
      auto n = parseCount(v);
      if (!n) {
        usageError(a + " expects a non-negative integer, got '" + v + "'");
        return false;
      }
      out = n;
      return true;
    };
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    } else if (a == "--steps") {
      if (!count(ov.steps))
        return 2;
    } else if (a == "--sft-steps") {
      if (!count(ov.sftSteps))
        return 2;
    } else if (a == "--eval-every") {
      if (!count(ov.evalEvery))
        return 2;
    } else if (a == "--seed") {
      if (!count(ov.seed))
        return 2;
    } else if (a == "--threads") {
      if (!count(ov.threads))
        return 2;
      if (*ov.threads > 1024)
        return usageError("--threads must be at most 1024");
    } else if (a == "--out") {
      std::string v;
      if (!value(v) || v.empty())
        return usageError("--out needs a folder");
      ov.out = v;
    } else if (a == "--compiler") {
      std::string v;
      if (!value(v) || v.empty())
        return usageError("--compiler needs a path");
      if (!isExecutable(v))
        return usageError("--compiler: '" + v + "' is not an executable");
      compiler = fs::path(v);
    } else if (a == "--resume") {
      opts.resume = true;
    } else if (a == "--no-progress") {
      opts.progress = false;
    } else if (a == "--check") {
      check = true;
    } else if (!a.empty() && a[0] == '-') {
      return usageError("unknown option '" + a + "'");
    } else if (file.empty()) {
      file = a;
    } else {
      return usageError("more than one training file ('" + file + "', '" + a +
                        "')");
    }
  }
  if (file.empty())
    return usageError("no training file (try examples/arith/train.cac)");

  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::cerr << file << ": error: cannot read the training file\n";
    return 1;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  DiagnosticEngine diag(file, ss.str());
  auto block = parseTrainFile(ss.str(), diag);
  std::optional<TrainConfig> cfg;
  if (block)
    cfg = buildTrainConfig(*block, file, diag);
  if (!cfg) {
    std::cerr << diag.render();
    return 1;
  }
  applyOverrides(*cfg, ov);
  opts.compiler = compiler ? *compiler : findCompiler();

  try {
    Trainer trainer(*cfg, opts);
    bool ok = trainer.prepare(diag);
    std::cerr << diag.render();
    if (!ok)
      return 1;
    if (check) {
      std::cerr << file << ": ok\n";
      return 0;
    }
    trainer.run();
  } catch (const std::exception &e) {
    std::cerr << "cac-run: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

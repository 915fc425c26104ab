//===- Checkpoint.cpp - Resumable training checkpoints --------------------===//

#include "cac/Runtime/Model/Checkpoint.h"
#include "cac/Runtime/Support/FileUtil.h"
#include "cac/Runtime/Model/ModelIO.h"
#include "cac/Runtime/Model/Safetensors.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <type_traits>

namespace fs = std::filesystem;
using nlohmann::json;

namespace cac::rt {

namespace {

constexpr const char *kFormat = "cac-checkpoint-1";

[[noreturn]] void fail(const fs::path &dir, const std::string &what) {
  throw std::runtime_error("checkpoint '" + dir.string() + "': " + what);
}

void checkName(const std::string &kind, const std::string &name) {
  bool ok = !name.empty() && name != "." && name != "..";
  for (char c : name)
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
                c == '-' || c == '.');
  if (!ok)
    throw std::runtime_error("checkpoint: " + kind + " name '" + name +
                             "' must be letters, digits, '_', '-', '.'");
}

/// "<model>/<parameter>" for every parameter of the models, by TensorImpl.
std::map<const void *, std::string>
parameterNames(const CheckpointState &state) {
  std::map<const void *, std::string> names;
  for (const auto &[name, model] : state.models)
    for (const auto &p : model->named_parameters())
      names.emplace(p.value().unsafeGetTensorImpl(), name + "/" + p.key());
  return names;
}

/// The config.json fields that fix the architecture.
json architecture(const ModelConfig &c) {
  json j = c.toJson();
  for (const char *k : {"architectures", "torch_dtype", "bos_token_id",
                        "eos_token_id", "pad_token_id"})
    j.erase(k);
  return j;
}

/// The optimizer's state key of a parameter: its TensorImpl's address as a
/// string in LibTorch 1.x, the address itself since 2.0.
using OptimizerStateMap = std::decay_t<
    decltype(std::declval<torch::optim::Optimizer &>().state())>;
template <typename Key = OptimizerStateMap::key_type>
Key stateKey(const at::Tensor &p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream s;
    s << p.unsafeGetTensorImpl();
    return s.str();
  } else {
    return p.unsafeGetTensorImpl();
  }
}

at::Tensor generatorState(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void setGeneratorState(at::Generator gen, const at::Tensor &s) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(s);
}

} // namespace

void saveCheckpoint(const fs::path &dir, const CheckpointState &state) {
  std::set<std::string> modelNames, genNames;
  for (const auto &[name, model] : state.models) {
    checkName("model", name);
    if (!modelNames.insert(name).second)
      throw std::runtime_error("checkpoint: two models named '" + name + "'");
  }
  for (const auto &[name, gen] : state.generators) {
    checkName("generator", name);
    if (!genNames.insert(name).second)
      throw std::runtime_error("checkpoint: two generators named '" + name +
                               "'");
  }

  AtomicDirectory out(dir);
  json files = json::object(), checksums = json::object();
  auto record = [&](const std::string &rel) {
    files[rel] = fs::file_size(out.path() / rel);
    checksums[rel] = "crc32c:" + fileCrc32c(out.path() / rel);
  };

  json models = json::array();
  for (const auto &[name, model] : state.models) {
    savePretrained(*model, out.path() / name);
    record(name + "/config.json");
    record(name + "/model.safetensors");
    models.push_back(name);
  }

  json meta = {{"format", kFormat},
               {"step", state.step},
               {"models", models},
               {"extra", state.extra}};

  if (state.optimizer) {
    auto names = parameterNames(state);
    NamedTensors tensors;
    json groups = json::array();
    auto &optState = state.optimizer->state();
    size_t g = 0;
    for (auto &group : state.optimizer->param_groups()) {
      auto &o = static_cast<torch::optim::AdamWOptions &>(group.options());
      json params = json::array();
      for (const at::Tensor &p : group.params()) {
        auto it = names.find(p.unsafeGetTensorImpl());
        if (it == names.end())
          throw std::runtime_error(
              "checkpoint '" + dir.string() + "': optimizer group " +
              std::to_string(g) + " holds a parameter (shape " +
              c10::str(p.sizes()) + ") of none of the saved models");
        params.push_back(it->second);
        auto st = optState.find(stateKey(p));
        if (st == optState.end())
          continue;
        auto &s = static_cast<torch::optim::AdamWParamState &>(*st->second);
        std::string prefix = "state/" + it->second + "/";
        tensors[prefix + "step"] =
            at::empty({1}, at::TensorOptions().dtype(at::kLong))
                .fill_(int64_t(s.step()));
        tensors[prefix + "exp_avg"] = s.exp_avg();
        tensors[prefix + "exp_avg_sq"] = s.exp_avg_sq();
        if (s.max_exp_avg_sq().defined())
          tensors[prefix + "max_exp_avg_sq"] = s.max_exp_avg_sq();
      }
      groups.push_back({{"lr", o.lr()},
                        {"betas", {std::get<0>(o.betas()),
                                   std::get<1>(o.betas())}},
                        {"eps", o.eps()},
                        {"weight_decay", o.weight_decay()},
                        {"amsgrad", o.amsgrad()},
                        {"params", params}});
      ++g;
    }
    saveSafetensors(out.path() / "optimizer.safetensors", tensors);
    record("optimizer.safetensors");
    meta["optimizer"] = {{"type", "adamw"},
                         {"file", "optimizer.safetensors"},
                         {"param_groups", groups}};
  }

  NamedTensors rng;
  rng["default_cpu"] = generatorState(at::detail::getDefaultCPUGenerator());
  json gens = json::array();
  for (const auto &[name, gen] : state.generators) {
    rng["gen/" + name] = generatorState(gen);
    gens.push_back(name);
  }
  saveSafetensors(out.path() / "rng.safetensors", rng);
  record("rng.safetensors");
  meta["generators"] = gens;
  if (!state.tensors.empty()) {
    json names = json::array();
    for (const auto &[name, t] : state.tensors) {
      if (name.empty())
        throw std::runtime_error("checkpoint: a tensor without a name");
      names.push_back(name);
    }
    saveSafetensors(out.path() / "tensors.safetensors", state.tensors);
    record("tensors.safetensors");
    meta["tensors"] = names;
  }
  meta["files"] = files;
  meta["checksums"] = checksums;

  // checkpoint.json last: its presence means everything else is complete.
  FileWriter w(out.path() / "checkpoint.json");
  w.write(meta.dump(2) + "\n");
  w.commit();
  out.commit();
}

namespace {
CheckpointInfo parseCheckpointInfo(const fs::path &dir);

/// Every file's CRC-32C against checkpoint.json's (a checkpoint written
/// before checksums has none to check): a same-size corruption is caught
/// before any state is loaded.
void verifyChecksums(const fs::path &dir, const json &meta) {
  if (!meta.contains("checksums"))
    return;
  const json &sums = meta["checksums"];
  if (!sums.is_object())
    fail(dir, "checkpoint.json: 'checksums' is not an object");
  for (auto it = sums.begin(); it != sums.end(); ++it) {
    if (!meta["files"].contains(it.key()))
      fail(dir, "checkpoint.json has a checksum of '" + it.key() +
                    "', which it does not list in 'files'");
    std::string want =
        it.value().is_string() ? it.value().get<std::string>() : "";
    std::string got = "crc32c:" + fileCrc32c(dir / it.key());
    if (got != want)
      fail(dir, "file '" + it.key() + "' is corrupted: its checksum is " +
                    got + ", checkpoint.json records " + it.value().dump());
  }
}
} // namespace

CheckpointInfo readCheckpointInfo(const fs::path &dir) {
  try {
    return parseCheckpointInfo(dir);
  } catch (const json::exception &e) {
    fail(dir, std::string("checkpoint.json: malformed field: ") + e.what());
  }
}

std::optional<fs::path> latestCheckpoint(const fs::path &root) {
  std::optional<fs::path> best;
  int64_t bestStep = 0;
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    return best;
  for (const auto &entry : fs::directory_iterator(root, ec)) {
    std::string name = entry.path().filename().string();
    // Temporary folders of unfinished (or killed) writes.
    if (name.find(".tmp-") != std::string::npos || !entry.is_directory(ec))
      continue;
    if (!fs::exists(entry.path() / "checkpoint.json", ec))
      continue;
    CheckpointInfo info = readCheckpointInfo(entry.path());
    if (!best || info.step > bestStep ||
        (info.step == bestStep && entry.path() > *best)) {
      best = entry.path();
      bestStep = info.step;
    }
  }
  return best;
}

namespace {
CheckpointInfo parseCheckpointInfo(const fs::path &dir) {
  if (!fs::is_directory(dir))
    fail(dir, "no such directory");
  fs::path metaPath = dir / "checkpoint.json";
  if (!fs::exists(metaPath))
    fail(dir, "no checkpoint.json (not a checkpoint, or an unfinished one)");
  json meta;
  try {
    meta = json::parse(readFileToString(metaPath));
  } catch (const json::exception &e) {
    fail(dir, std::string("checkpoint.json is not valid JSON: ") + e.what());
  }
  if (!meta.is_object() || !meta.contains("format") ||
      !meta["format"].is_string() || meta["format"] != kFormat)
    fail(dir, std::string("checkpoint.json: format is not '") + kFormat + "'");
  if (!meta.contains("step") || !meta["step"].is_number_integer())
    fail(dir, "checkpoint.json: missing integer 'step'");
  if (!meta.contains("files") || !meta["files"].is_object())
    fail(dir, "checkpoint.json: missing object 'files'");
  for (auto it = meta["files"].begin(); it != meta["files"].end(); ++it) {
    if (it.key().empty() || it.key().front() == '/' ||
        it.key().find("..") != std::string::npos)
      fail(dir, "checkpoint.json names a file outside the checkpoint: '" +
                    it.key() + "'");
    fs::path f = dir / it.key();
    std::error_code ec;
    if (!fs::exists(f, ec))
      fail(dir, "file '" + it.key() + "' is missing");
    uint64_t size = fs::file_size(f, ec);
    if (!it.value().is_number_unsigned() || size != it.value().get<uint64_t>())
      fail(dir, "file '" + it.key() + "' has " + std::to_string(size) +
                    " bytes, checkpoint.json records " + it.value().dump() +
                    " (truncated or modified?)");
  }
  CheckpointInfo info;
  info.step = meta["step"].get<int64_t>();
  for (const json &m : meta.value("models", json::array()))
    info.models.push_back(m.get<std::string>());
  info.hasOptimizer = meta.contains("optimizer");
  for (const json &g : meta.value("generators", json::array()))
    info.generators.push_back(g.get<std::string>());
  info.extra = meta.value("extra", json::object());
  return info;
}
} // namespace

void loadCheckpoint(const fs::path &dir, CheckpointState &state) {
  CheckpointInfo info = readCheckpointInfo(dir);
  json meta = json::parse(readFileToString(dir / "checkpoint.json"));
  verifyChecksums(dir, meta);
  // Generators first: they are the cheapest to check, and failing before
  // any model is overwritten leaves the caller's state untouched more often.
  std::unique_ptr<SafetensorsReader> rng;
  try {
    rng = std::make_unique<SafetensorsReader>(dir / "rng.safetensors");
  } catch (const std::exception &e) {
    fail(dir, e.what());
  }
  for (auto &[name, gen] : state.generators)
    if (!rng->contains("gen/" + name))
      fail(dir, "has no generator '" + name + "'");

  for (auto &[name, model] : state.models) {
    if (std::find(info.models.begin(), info.models.end(), name) ==
        info.models.end())
      fail(dir, "has no model '" + name + "'");
    ModelConfig saved =
        ModelConfig::fromFile(dir / name / "config.json");
    json a = architecture(saved), b = architecture(model->config());
    if (a != b) {
      std::string diff;
      for (auto it = b.begin(); it != b.end(); ++it)
        if (!a.contains(it.key()) || a[it.key()] != it.value())
          diff += (diff.empty() ? "" : ", ") + it.key() + " " +
                  (a.contains(it.key()) ? a[it.key()].dump() : "absent") +
                  " vs " + it.value().dump();
      fail(dir, "model '" + name + "' was saved with another config (" +
                    diff + ")");
    }
    try {
      loadWeights(*model, dir / name, /*strict=*/true);
    } catch (const std::exception &e) {
      fail(dir, "model '" + name + "': " + e.what());
    }
  }

  if (state.optimizer) try {
    if (!meta.contains("optimizer"))
      fail(dir, "has no optimizer state");
    const json &groups = meta.at("optimizer").at("param_groups");
    auto &current = state.optimizer->param_groups();
    if (groups.size() != current.size())
      fail(dir, "optimizer has " + std::to_string(groups.size()) +
                    " parameter groups, the current one " +
                    std::to_string(current.size()));
    auto names = parameterNames(state);
    SafetensorsReader reader(dir / "optimizer.safetensors");
    auto &optState = state.optimizer->state();
    for (size_t g = 0; g < current.size(); ++g) {
      const json &saved = groups[g];
      const auto &params = current[g].params();
      if (saved.at("params").size() != params.size())
        fail(dir, "optimizer group " + std::to_string(g) + " held " +
                      std::to_string(saved.at("params").size()) +
                      " parameters, the current one holds " +
                      std::to_string(params.size()));
      for (size_t i = 0; i < params.size(); ++i) {
        const at::Tensor &p = params[i];
        auto it = names.find(p.unsafeGetTensorImpl());
        std::string name = it == names.end() ? "?" : it->second;
        std::string savedName = saved.at("params")[i].get<std::string>();
        if (name != savedName)
          fail(dir, "optimizer group " + std::to_string(g) + " parameter " +
                        std::to_string(i) + " was '" + savedName +
                        "', now '" + name + "'");
        std::string prefix = "state/" + name + "/";
        if (!reader.contains(prefix + "step")) {
          optState.erase(stateKey(p));
          continue;
        }
        auto load = [&](const std::string &what) {
          std::string key = prefix + what;
          at::Tensor t = reader.readRaw(key);
          if (t.sizes() != p.sizes())
            fail(dir, "optimizer state '" + key + "' has shape " +
                          c10::str(t.sizes()) + ", the parameter " +
                          c10::str(p.sizes()));
          return t.to(p.device(), p.scalar_type());
        };
        auto s = std::make_unique<torch::optim::AdamWParamState>();
        s->step(reader.readRaw(prefix + "step").item<int64_t>());
        s->exp_avg(load("exp_avg"));
        s->exp_avg_sq(load("exp_avg_sq"));
        if (reader.contains(prefix + "max_exp_avg_sq"))
          s->max_exp_avg_sq(load("max_exp_avg_sq"));
        optState[stateKey(p)] = std::move(s);
      }
      auto &o = static_cast<torch::optim::AdamWOptions &>(current[g].options());
      o.lr(saved.at("lr").get<double>());
      // at(), not []: a const json's [] does not check the index, and a
      // damaged file may hold fewer than two betas.
      const json &betas = saved.at("betas");
      if (!betas.is_array() || betas.size() != 2)
        fail(dir, "checkpoint.json: optimizer group " + std::to_string(g) +
                      ": 'betas' is not two numbers: " + betas.dump());
      o.betas({betas.at(0).get<double>(), betas.at(1).get<double>()});
      o.eps(saved.at("eps").get<double>());
      o.weight_decay(saved.at("weight_decay").get<double>());
      o.amsgrad(saved.at("amsgrad").get<bool>());
    }
  } catch (const json::exception &e) {
    fail(dir, std::string("checkpoint.json: malformed optimizer entry: ") +
                  e.what());
  } catch (const c10::Error &e) {
    fail(dir, std::string("optimizer.safetensors: invalid state: ") +
                  e.what_without_backtrace());
  }

  try {
    for (auto &[name, gen] : state.generators)
      setGeneratorState(gen, rng->readRaw("gen/" + name));
    if (rng->contains("default_cpu"))
      setGeneratorState(at::detail::getDefaultCPUGenerator(),
                        rng->readRaw("default_cpu"));
  } catch (const c10::Error &e) {
    fail(dir, std::string("rng.safetensors: invalid generator state: ") +
                  e.what_without_backtrace());
  }
  state.tensors.clear();
  if (meta.contains("tensors")) try {
    std::unique_ptr<SafetensorsReader> file;
    try {
      file = std::make_unique<SafetensorsReader>(dir / "tensors.safetensors");
    } catch (const std::exception &e) {
      fail(dir, e.what());
    }
    const SafetensorsReader &reader = *file;
    for (const json &n : meta.at("tensors")) {
      std::string name = n.get<std::string>();
      if (!reader.contains(name))
        fail(dir, "tensors.safetensors has no tensor '" + name + "'");
      state.tensors[name] = reader.readRaw(name);
    }
  } catch (const json::exception &e) {
    fail(dir, std::string("checkpoint.json: malformed 'tensors': ") + e.what());
  } catch (const c10::Error &e) {
    fail(dir, std::string("tensors.safetensors: ") + e.what_without_backtrace());
  }
  state.step = info.step;
  state.extra = info.extra;
}

} // namespace cac::rt

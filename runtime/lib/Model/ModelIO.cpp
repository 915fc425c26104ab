//===- ModelIO.cpp - Loading and saving Hugging Face model folders --------===//

#include "cac/Runtime/Model/ModelIO.h"
#include "cac/Runtime/Model/ShapeString.h"
#include "cac/Runtime/Support/FileUtil.h"
#include "cac/Runtime/Support/HostMemory.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>
#include <stdexcept>

namespace fs = std::filesystem;
using nlohmann::json;

namespace cac::rt {

namespace {

bool startsWith(const std::string &s, const char *prefix) {
  return s.rfind(prefix, 0) == 0;
}

bool endsWith(const std::string &s, const char *suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

/// Whether a file tensor that matches no parameter is expected to be absent.
bool isIgnorable(const TransformerLMImpl &model, const std::string &name) {
  if (name == "lm_head.weight" && model.config().tieWordEmbeddings)
    return true;
  return endsWith(name, "rotary_emb.inv_freq");
}

/// Loads with a callback that reads one tensor's shape and data.
template <typename ShapeOf, typename ReadInto>
LoadReport loadFrom(TransformerLMImpl &model,
                    const std::vector<std::string> &names, ShapeOf shapeOf,
                    ReadInto readInto) {
  LoadReport report;
  auto params = model.named_parameters();
  std::set<std::string> seen;
  torch::NoGradGuard noGrad;
  for (const std::string &name : names) {
    at::Tensor *p = params.find(name);
    if (!p) {
      (isIgnorable(model, name) ? report.ignored : report.unexpected)
          .push_back(name);
      continue;
    }
    std::vector<int64_t> shape = shapeOf(name);
    if (at::IntArrayRef(shape) != p->sizes()) {
      report.mismatched.push_back(name + ": file " + shapeString(shape) +
                                  " vs model " + shapeString(p->sizes()));
      seen.insert(name);
      continue;
    }
    report.largestStagingBytes =
        std::max<uint64_t>(report.largestStagingBytes, readInto(name, *p));
    report.loaded.push_back(name);
    seen.insert(name);
  }
  for (const auto &item : params)
    if (!seen.count(item.key()))
      report.missing.push_back(item.key());
  return report;
}

/// Refuses, before anything is allocated, a model whose parameters need more
/// than \p device has free.
void checkFits(const fs::path &folder, const ModelConfig &config,
               bool valueHead, at::ScalarType dtype,
               const torch::Device &device,
               const AvailableMemoryFn &availableMemory) {
  double available = -1;
  if (availableMemory)
    available = availableMemory(device);
  else if (device.is_cpu())
    available = availableHostMemory();
  double needed = parameterBytes(config, valueHead, dtype);
  if (available < 0 || needed <= available)
    return;
  char count[32];
  std::snprintf(count, sizeof count, "%.3g", config.numParameters());
  throw std::runtime_error(
      "model folder '" + folder.string() + "': its " + count + " " +
      modelDtypeName(dtype) + " parameters need " + formatGiB(needed) + " (" +
      std::to_string(static_cast<uint64_t>(needed)) + " bytes) on " +
      device.str() + ", more than the " + formatGiB(available) + " (" +
      std::to_string(static_cast<uint64_t>(available)) +
      " bytes) available there; use a smaller dtype or another device");
}

void check(const LoadReport &report, const std::string &source) {
  if (!report.ok())
    throw std::runtime_error("loading weights from '" + source +
                             "': " + report.summary());
}

} // namespace

std::string LoadReport::summary() const {
  std::string out;
  auto list = [&](const char *what, const std::vector<std::string> &names) {
    if (names.empty())
      return;
    if (!out.empty())
      out += "; ";
    out += std::to_string(names.size()) + " " + what + ": ";
    size_t shown = std::min<size_t>(names.size(), 8);
    for (size_t i = 0; i < shown; ++i)
      out += (i ? ", " : "") + names[i];
    if (shown < names.size())
      out += ", ... (" + std::to_string(names.size() - shown) + " more)";
  };
  list("missing", missing);
  list("unexpected", unexpected);
  list("shape mismatch", mismatched);
  if (out.empty())
    out = std::to_string(loaded.size()) + " tensors loaded";
  return out;
}

std::map<std::string, fs::path> weightFiles(const fs::path &folder) {
  std::map<std::string, fs::path> out;
  fs::path index = folder / "model.safetensors.index.json";
  fs::path single = folder / "model.safetensors";
  if (fs::exists(index)) {
    json j;
    try {
      j = json::parse(readFileToString(index));
    } catch (const json::exception &e) {
      throw std::runtime_error("'" + index.string() + "': invalid JSON: " +
                               e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") ||
        !j["weight_map"].is_object())
      throw std::runtime_error("'" + index.string() +
                               "': missing object 'weight_map'");
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string())
        throw std::runtime_error("'" + index.string() + "': weight_map['" +
                                 it.key() + "'] is not a file name");
      fs::path shard = folder / it.value().get<std::string>();
      if (!fs::exists(shard))
        throw std::runtime_error("'" + index.string() + "': shard '" +
                                 shard.string() + "' (holding '" + it.key() +
                                 "') does not exist");
      out[it.key()] = shard;
    }
    return out;
  }
  if (fs::exists(single)) {
    SafetensorsReader reader(single);
    for (const std::string &n : reader.names())
      out[n] = single;
    return out;
  }
  throw std::runtime_error("model folder '" + folder.string() +
                           "' has neither model.safetensors nor "
                           "model.safetensors.index.json");
}

LoadReport loadWeights(TransformerLMImpl &model, const fs::path &folder,
                       bool strict) {
  std::map<std::string, fs::path> files = weightFiles(folder);
  // Open each shard once.
  std::map<fs::path, std::unique_ptr<SafetensorsReader>> readers;
  std::vector<std::string> names;
  for (const auto &[name, file] : files) {
    auto &r = readers[file];
    if (!r)
      r = std::make_unique<SafetensorsReader>(file);
    if (!r->contains(name))
      throw std::runtime_error("model folder '" + folder.string() +
                               "': the index puts '" + name + "' in '" +
                               file.string() + "', which has no such tensor");
    names.push_back(name);
  }
  LoadReport report = loadFrom(
      model, names,
      [&](const std::string &n) {
        return readers.at(files.at(n))->entry(n).shape;
      },
      [&](const std::string &n, at::Tensor &dst) {
        return readers.at(files.at(n))->readInto(n, dst);
      });
  if (strict)
    check(report, folder.string());
  return report;
}

LoadReport loadWeights(TransformerLMImpl &model, const NamedTensors &tensors,
                       bool strict, const std::string &source) {
  std::vector<std::string> names;
  for (const auto &[n, t] : tensors)
    names.push_back(n);
  LoadReport report = loadFrom(
      model, names,
      [&](const std::string &n) { return tensors.at(n).sizes().vec(); },
      [&](const std::string &n, at::Tensor &dst) {
        dst.copy_(tensors.at(n));
        return uint64_t(0);
      });
  if (strict)
    check(report, source);
  return report;
}

double parameterBytes(const ModelConfig &config, bool valueHead,
                      at::ScalarType dtype) {
  double params = config.numParameters() +
                  (valueHead ? static_cast<double>(config.hiddenSize) + 1 : 0);
  return params * static_cast<double>(c10::elementSize(dtype));
}

TransformerLM loadPretrained(const fs::path &folder,
                             const LoadOptions &options, LoadReport *out) {
  ModelConfig config = ModelConfig::fromFile(folder / "config.json");
  std::map<std::string, fs::path> files = weightFiles(folder);
  bool filesHaveValueHead = files.count("value_head.weight") != 0;
  bool withValueHead =
      options.valueHead == ValueHeadMode::With ||
      (options.valueHead == ValueHeadMode::Auto && filesHaveValueHead);
  torch::Device device = options.device.value_or(torch::kCPU);
  at::ScalarType dtype = options.dtype.value_or(at::kFloat);
  try {
    checkModelDtype(dtype, device);
  } catch (const std::exception &e) {
    throw std::runtime_error("model folder '" + folder.string() +
                             "': " + e.what());
  }
  checkFits(folder, config, withValueHead, dtype, device,
            options.availableMemory);
  TransformerLM model(config, withValueHead,
                      at::TensorOptions().dtype(dtype).device(device));
  LoadReport report = loadWeights(*model, folder, /*strict=*/false);
  if (withValueHead && !filesHaveValueHead) {
    // Asked for a critic on top of a policy checkpoint: a fresh head.
    std::vector<std::string> rest;
    for (std::string &n : report.missing)
      (startsWith(n, "value_head.") ? report.initialized : rest)
          .push_back(std::move(n));
    report.missing = std::move(rest);
  }
  if (options.strict)
    check(report, folder.string());
  // Nothing of the allocation is left unwritten: what no file gave is
  // initialized as a fresh model would be.
  std::vector<std::string> fresh = report.missing;
  fresh.insert(fresh.end(), report.initialized.begin(),
               report.initialized.end());
  model->initParameters(fresh);
  if (out)
    *out = std::move(report);
  return model;
}

NamedTensors stateDict(const TransformerLMImpl &model) {
  NamedTensors out;
  for (const auto &item : model.named_parameters())
    out.emplace(item.key(), item.value().detach());
  return out;
}

void savePretrained(const TransformerLMImpl &model, const fs::path &folder,
                    std::optional<at::ScalarType> dtype) {
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec)
    throw std::runtime_error("cannot create model folder '" + folder.string() +
                             "': " + ec.message());
  NamedTensors tensors = stateDict(model);
  at::ScalarType stored = tensors.empty()
                              ? at::kFloat
                              : tensors.begin()->second.scalar_type();
  if (dtype) {
    stored = *dtype;
    for (auto &[n, t] : tensors)
      t = t.to(*dtype);
  }
  json config = model.config().toJson();
  config["torch_dtype"] = stored == at::kBFloat16 ? "bfloat16"
                          : stored == at::kHalf   ? "float16"
                                                  : "float32";
  saveSafetensors(folder / "model.safetensors", tensors, {{"format", "pt"}});
  // An index left by an earlier sharded model would win over the file just
  // written (weightFiles prefers it); the model is now in one file.
  fs::path staleIndex = folder / "model.safetensors.index.json";
  if (fs::exists(staleIndex) && !fs::remove(staleIndex, ec))
    throw std::runtime_error("cannot remove stale '" + staleIndex.string() +
                             "': " + ec.message());
  writeFileAtomic(folder / "config.json", config.dump(2) + "\n");
}

void copyTokenizerFiles(const fs::path &from, const fs::path &to) {
  std::error_code ec;
  fs::create_directories(to, ec);
  for (const char *name : {"tokenizer.json", "tokenizer_config.json",
                           "special_tokens_map.json",
                           "generation_config.json"}) {
    fs::path src = from / name;
    if (fs::exists(src))
      writeFileAtomic(to / name, readFileToString(src));
  }
}

} // namespace cac::rt

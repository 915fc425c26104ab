//===- test-util.cpp - Fixtures for the model-stack unit tests ------------===//

#include "test-util.h"

#include "cac/Runtime/Model/Generation.h"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace fs = std::filesystem;

namespace cac::rt::test {

TempDir::TempDir() {
  std::string templ = (fs::temp_directory_path() / "cac-model-test-XXXXXX");
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data()))
    throw std::runtime_error("cannot create a temporary folder");
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

void writeFile(const fs::path &path, std::string_view bytes) {
  if (path.has_parent_path())
    fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out)
    throw std::runtime_error("cannot write " + path.string());
}

std::string readFile(const fs::path &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void truncateFile(const fs::path &path, uint64_t size) {
  fs::resize_file(path, size);
}

ModelConfig tinyConfig(int64_t vocabSize, const std::string &modelType) {
  ModelConfig c;
  c.modelType = modelType;
  c.vocabSize = vocabSize;
  c.hiddenSize = 16;
  c.intermediateSize = 24;
  c.numHiddenLayers = 2;
  c.numAttentionHeads = 4;
  c.numKeyValueHeads = 2;
  c.maxPositionEmbeddings = 128;
  c.rmsNormEps = 1e-6;
  c.ropeTheta = 10000.0;
  c.tieWordEmbeddings = false;
  c.attentionBias = modelType == "qwen2";
  c.validate("tiny config");
  return c;
}

TransformerLM tinyModel(const ModelConfig &config, uint64_t seed,
                        bool valueHead, double std) {
  TransformerLM model(config, valueHead);
  model->initWeights(std, makeGenerator(seed));
  // Norm weights and biases are not all ones / zeros in a trained model; make
  // them random too so that tests exercise them.
  torch::NoGradGuard noGrad;
  at::Generator gen = makeGenerator(seed + 1000);
  for (auto &p : model->named_parameters()) {
    const std::string &name = p.key();
    if (name.find("norm.weight") != std::string::npos)
      p.value().uniform_(0.5, 1.5, gen);
    else if (name.size() > 5 && name.substr(name.size() - 5) == ".bias")
      p.value().normal_(0.0, 0.1, gen);
  }
  model->eval();
  return model;
}

std::string errorOf(const std::function<void()> &fn) {
  try {
    fn();
  } catch (const std::exception &e) {
    return e.what();
  }
  return "<no exception>";
}

void expectError(const std::function<void()> &fn,
                 std::initializer_list<std::string> parts) {
  std::string msg = errorOf(fn);
  for (const std::string &part : parts)
    EXPECT_NE(msg.find(part), std::string::npos)
        << "error message: " << msg << "\nexpected to contain: " << part;
}

std::vector<int64_t> toLongs(const at::Tensor &t) {
  at::Tensor c = t.to(at::kCPU, at::kLong).contiguous().view(-1);
  return std::vector<int64_t>(c.data_ptr<int64_t>(),
                              c.data_ptr<int64_t>() + c.numel());
}

double maxAbsDiff(const at::Tensor &a, const at::Tensor &b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  if (a.sizes() != b.sizes())
    return 1e30;
  if (a.numel() == 0)
    return 0.0;
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

namespace {

/// The wrapper CpuAllocationCounter installs: one for the process, so that
/// a tensor freed after the counter is gone still finds it.
class CountingAllocator final : public c10::Allocator {
public:
  c10::Allocator *inner = nullptr;
  std::atomic<int64_t> current{0}, peak{0};
  /// Which counter's window is open: frees of earlier windows' tensors do
  /// not count against it.
  std::atomic<int64_t> window{0};

  c10::DataPtr allocate(size_t n) const override {
    auto *self = const_cast<CountingAllocator *>(this);
    auto *record = new Record{inner->allocate(n), static_cast<int64_t>(n),
                              window.load()};
    int64_t now = self->current += record->bytes;
    int64_t seen = self->peak.load();
    while (now > seen && !self->peak.compare_exchange_weak(seen, now)) {
    }
    void *data = record->data.get();
    return {data, record, &release, record->data.device()};
  }

private:
  struct Record {
    c10::DataPtr data;
    int64_t bytes, window;
  };
  static void release(void *ctx) {
    auto *record = static_cast<Record *>(ctx);
    if (record->window == instance().window.load())
      instance().current -= record->bytes;
    delete record;
  }

public:
  static CountingAllocator &instance() {
    static CountingAllocator *a = new CountingAllocator;
    return *a;
  }
};

} // namespace

CpuAllocationCounter::CpuAllocationCounter() {
  CountingAllocator &a = CountingAllocator::instance();
  a.inner = c10::GetCPUAllocator();
  ++a.window;
  a.current = 0;
  a.peak = 0;
  // The highest priority: whatever registered the default one.
  c10::SetCPUAllocator(&a, /*priority=*/255);
}

CpuAllocationCounter::~CpuAllocationCounter() {
  c10::SetCPUAllocator(CountingAllocator::instance().inner, /*priority=*/255);
}

int64_t CpuAllocationCounter::peakBytes() const {
  return CountingAllocator::instance().peak.load();
}

int64_t CpuAllocationCounter::currentBytes() const {
  return CountingAllocator::instance().current.load();
}

} // namespace cac::rt::test

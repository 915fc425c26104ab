//===- Bundle.cpp - Binding tensors to a bundle's argument list -----------===//

#include "cac/Runtime/Kernels/Bundle.h"

#include <ATen/Parallel.h>

#ifdef CAC_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <sys/stat.h>

#include <algorithm>

namespace cac::rt {

namespace {

bool fileExists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string shapeOf(const at::Tensor &t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i)
    s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

const char *sizeSymbol(Domain d) {
  switch (d) {
  case Domain::Token:
  case Domain::Seg:
    return "N";
  case Domain::Seq:
    return "B";
  case Domain::Group:
    return "G";
  case Domain::Node:
    return "K";
  case Domain::Batch:
    return "1";
  case Domain::Scalar:
    break;
  }
  return "?";
}

std::string joinNames(const std::vector<std::string> &names) {
  std::string s;
  for (const std::string &n : names)
    s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "none" : s;
}

/// One argument's value; params[i] points at slots[i].
union Slot {
  int64_t i64;
  double f64;
  float f32;
  void *ptr;
};

void *ptrOf(const at::Tensor &t) {
  return t.defined() ? t.data_ptr() : nullptr;
}

/// The value of a fixed argument for a batch; the unit range is set per
/// launch.
void setFixed(abi::FixedArg a, const PackedBatch &b, Slot &s) {
  switch (a) {
  case abi::kUnitBegin:
  case abi::kUnitEnd:
  case abi::kNumFixed:
    break;
  case abi::kNumSeqs:
    s.i64 = b.numSeqs();
    break;
  case abi::kNumGroups:
    s.i64 = b.numGroups();
    break;
  case abi::kNumTokens:
    s.i64 = b.numTokens();
    break;
  case abi::kNumNodes:
    s.i64 = b.numNodes();
    break;
  case abi::kSeqOffsets:
    s.ptr = ptrOf(b.seqOffsets());
    break;
  case abi::kSeqGroup:
    s.ptr = ptrOf(b.seqGroup());
    break;
  case abi::kGroupOffsets:
    s.ptr = ptrOf(b.groupOffsets());
    break;
  case abi::kGroupMembers:
    s.ptr = ptrOf(b.groupMembers());
    break;
  case abi::kNodeParent:
    s.ptr = ptrOf(b.nodeParent());
    break;
  case abi::kTokenNode:
    s.ptr = ptrOf(b.tokenNode());
    break;
  }
}

} // namespace

at::ScalarType scalarType(DType t) {
  switch (t) {
  case DType::I32:
    return at::kInt;
  case DType::I64:
    return at::kLong;
  case DType::F32:
    return at::kFloat;
  case DType::F64:
    return at::kDouble;
  }
  return at::kFloat;
}

int64_t domainSize(Domain d, const PackedBatch &batch) {
  switch (d) {
  case Domain::Token:
  case Domain::Seg:
    return batch.numTokens();
  case Domain::Seq:
    return batch.numSeqs();
  case Domain::Group:
    return batch.numGroups();
  case Domain::Node:
    return batch.numNodes();
  case Domain::Batch:
    return 1;
  case Domain::Scalar:
    break;
  }
  return 0;
}

bool builtWithTorchCuda() {
#ifdef CAC_TORCH_CUDA
  return true;
#else
  return false;
#endif
}

//===----------------------------------------------------------------------===//
// Bundle
//===----------------------------------------------------------------------===//

Bundle::Bundle(Manifest manifest, std::string dir,
               std::unique_ptr<CpuModule> cpu, std::unique_ptr<CudaModule> cuda)
    : manifest_(std::move(manifest)), dir_(std::move(dir)),
      cpu_(std::move(cpu)), cuda_(std::move(cuda)) {}

std::shared_ptr<Bundle> Bundle::load(const std::string &dir) {
  std::string base = dir;
  while (base.size() > 1 && base.back() == '/')
    base.pop_back();
  Manifest manifest = loadManifest(base + "/manifest.json");
  std::vector<std::string> names;
  for (const KernelSpec &k : manifest.kernels)
    names.push_back(k.name);

  std::unique_ptr<CpuModule> cpu;
  std::unique_ptr<CudaModule> cuda;
  if (fileExists(base + "/host.so"))
    cpu = CpuModule::load(base + "/host.so", names);
  if (fileExists(base + "/kernels.ptx"))
    cuda = CudaModule::load(base + "/kernels.ptx", manifest.kernels);
  if (!cpu && !cuda)
    throw BundleError(base + ": the bundle has neither host.so nor "
                             "kernels.ptx");
  return std::make_shared<Bundle>(std::move(manifest), base, std::move(cpu),
                                  std::move(cuda));
}

const CpuModule &Bundle::cpu() const {
  if (!cpu_)
    throw BundleError(dir_ + ": bundle '" + manifest_.estimator +
                      "' has no host.so (compile it with --target cpu or all) "
                      "and cannot run on CPU tensors");
  return *cpu_;
}

const CudaModule &Bundle::cuda() const {
  if (!cuda_)
    throw BundleError(dir_ + ": bundle '" + manifest_.estimator +
                      "' has no kernels.ptx (compile it with --target cuda or "
                      "all) and cannot run on CUDA tensors");
  return *cuda_;
}

//===----------------------------------------------------------------------===//
// BundleEstimator
//===----------------------------------------------------------------------===//

struct ScratchCache {
  std::mutex mutex;
  /// One per manifest buffer; defined for the scratch buffers a call made.
  std::vector<at::Tensor> buffers;
};

BundleEstimator::BundleEstimator(std::shared_ptr<const Bundle> bundle)
    : bundle_(std::move(bundle)), scratch_(std::make_shared<ScratchCache>()) {
  if (!bundle_)
    throw BundleError("BundleEstimator: null bundle");
}

BundleEstimator BundleEstimator::load(const std::string &dir) {
  return BundleEstimator(Bundle::load(dir));
}

std::vector<std::string> BundleEstimator::inputNames() const {
  return manifest().bufferNames(BufferRole::Input);
}

std::vector<std::string> BundleEstimator::outputNames() const {
  return manifest().bufferNames(BufferRole::Output);
}

std::vector<std::string> BundleEstimator::paramNames() const {
  std::vector<std::string> out;
  for (const ParamSpec &p : manifest().params)
    out.push_back(p.name);
  return out;
}

namespace {

/// Rejects names the bundle does not know: a typo would otherwise silently
/// leave an input missing or a parameter at its default.
void rejectUnknownNames(const BundleEstimator &e, const std::string &who,
                        const TensorMap &inputs, const ParamMap &params) {
  const Manifest &m = e.manifest();
  for (const auto &[name, t] : inputs) {
    int b = m.findBuffer(name);
    if (b < 0 || m.buffers[b].role != BufferRole::Input)
      throw BundleError(who + ": unknown input '" + name +
                        "' (inputs: " + joinNames(e.inputNames()) + ")");
  }
  for (const auto &[name, v] : params)
    if (m.findParam(name) < 0)
      throw BundleError(who + ": unknown parameter '" + name +
                        "' (parameters: " + joinNames(e.paramNames()) + ")");
}

/// The device to run on: where the inputs are (all on one), else the
/// batch's.
at::Device runDevice(const Manifest &m, const std::string &who,
                     const TensorMap &inputs, const PackedBatch &batch) {
  std::optional<at::Device> device;
  std::string firstOnDevice;
  for (const BufferSpec &b : m.buffers) {
    if (b.role != BufferRole::Input)
      continue;
    auto it = inputs.find(b.name);
    if (it == inputs.end() || !it->second.defined())
      continue;
    if (!device) {
      device = it->second.device();
      firstOnDevice = b.name;
    } else if (it->second.device() != *device) {
      throw BundleError(who + ": inputs on different devices: '" +
                        firstOnDevice + "' on " + device->str() + ", '" +
                        b.name + "' on " + it->second.device().str());
    }
  }
  at::Device dev = device.value_or(batch.device());
  if (!dev.is_cpu() && !dev.is_cuda())
    throw BundleError(who + ": cannot run on device " + dev.str() +
                      " (CPU or CUDA only)");
  return dev;
}

/// The buffer of input \p spec: checked, packed if given padded, converted
/// to the manifest's dtype on the run's device (\p opts).
at::Tensor inputBuffer(const BufferSpec &spec, const std::string &who,
                       const TensorMap &inputs, const PackedBatch &b,
                       int64_t size, const at::TensorOptions &opts) {
  const std::string expected = std::string(sizeSymbol(spec.domain)) + "] = [" +
                               std::to_string(size) + "]";
  auto it = inputs.find(spec.name);
  if (it == inputs.end() || !it->second.defined())
    throw BundleError(who + ": missing input '" + spec.name + "' (" +
                      abi::spelling(spec.domain) + ", " +
                      abi::spelling(spec.dtype) + ", [" + expected + ")");
  at::Tensor t = it->second;
  if (at::isComplexType(t.scalar_type()))
    throw BundleError(who + ": input '" + spec.name +
                      "' is complex; expected real or integer values");
  const bool perToken =
      spec.domain == Domain::Token || spec.domain == Domain::Seg;
  if (perToken && t.dim() == 2 && t.size(0) == b.numSeqs())
    t = b.pack(t);
  if (t.dim() != 1 || t.size(0) != size)
    throw BundleError(who + ": input '" + spec.name + "' (" +
                      abi::spelling(spec.domain) + "): expected [" + expected +
                      (perToken ? " (packed) or [B, T] padded" : "") +
                      ", got shape " + shapeOf(t));
  return t.to(opts).contiguous();
}

/// Scratch buffer `i` of `size` elements from `kept` (the estimator's
/// buffers from earlier calls; a first or larger one allocated into it).
at::Tensor keptScratch(std::vector<at::Tensor> &kept, size_t i, int64_t size,
                       const at::TensorOptions &opts) {
  at::Tensor &t = kept[i];
  if (!t.defined() || t.numel() < size || t.dtype() != opts.dtype())
    t = at::empty({std::max<int64_t>(size, 1)}, opts);
  return t.narrow(0, 0, size);
}

/// The buffers, in manifest order: the inputs (converted where needed),
/// fresh outputs, and scratch, from `kept` when given
/// (RunOptions::keepScratch), else fresh.
std::vector<at::Tensor> makeBuffers(const Manifest &m, const std::string &who,
                                    const TensorMap &inputs,
                                    const PackedBatch &b, at::Device dev,
                                    const RunOptions &options,
                                    std::vector<at::Tensor> *kept) {
  std::vector<at::Tensor> buffers(m.buffers.size());
  for (size_t i = 0; i < m.buffers.size(); ++i) {
    const BufferSpec &spec = m.buffers[i];
    const int64_t size = domainSize(spec.domain, b);
    const at::TensorOptions opts =
        at::TensorOptions().dtype(scalarType(spec.dtype)).device(dev);
    if (spec.role == BufferRole::Scratch && kept) {
      buffers[i] = keptScratch(*kept, i, size, opts);
      if (options.fillOutputs)
        buffers[i].fill_(*options.fillOutputs);
      continue;
    }
    if (spec.role != BufferRole::Input) {
      // No zero fill: every kernel writes each element of the outputs it
      // owns, and scratch is read only where written (docs/bundle.md), so a
      // fill would be a second full pass of writes over the outputs.
      buffers[i] = options.fillOutputs
                       ? at::full({size}, *options.fillOutputs, opts)
                       : at::empty({size}, opts);
      continue;
    }
    buffers[i] = inputBuffer(spec, who, inputs, b, size, opts);
  }
  return buffers;
}

/// Parameter values: given, else the default, else an error.
std::vector<double> paramValuesOf(const Manifest &m, const std::string &who,
                                  const ParamMap &params) {
  std::vector<double> paramValues(m.params.size());
  for (size_t i = 0; i < m.params.size(); ++i) {
    const ParamSpec &p = m.params[i];
    auto it = params.find(p.name);
    if (it != params.end())
      paramValues[i] = it->second;
    else if (p.defaultValue)
      paramValues[i] = *p.defaultValue;
    else
      throw BundleError(who + ": missing required parameter '" + p.name +
                        "' (it has no default)");
  }
  return paramValues;
}

/// Fills the argument array, driven by the manifest's "args": argv[i]
/// points at slots[i].
void setArgs(const Manifest &m, const PackedBatch &b,
             const std::vector<at::Tensor> &buffers,
             const std::vector<double> &paramValues, std::vector<Slot> &slots,
             std::vector<void *> &argv) {
  for (size_t i = 0; i < m.args.size(); ++i) {
    const ArgSpec &a = m.args[i];
    Slot &s = slots[i];
    s.i64 = 0;
    switch (a.source) {
    case ArgSource::Fixed:
      setFixed(abi::FixedArg(a.index), b, s);
      break;
    case ArgSource::Buffer:
      s.ptr = ptrOf(buffers.at(a.index));
      break;
    case ArgSource::Param:
      if (a.dtype == DType::F32)
        s.f32 = static_cast<float>(paramValues.at(a.index));
      else
        s.f64 = paramValues.at(a.index);
      break;
    }
    argv[i] = &s;
  }
}

/// The number of units (threads of work) of a kernel over grid \p g.
int64_t unitsOf(Grid g, const PackedBatch &b) {
  switch (g) {
  case Grid::Seq:
    return b.numSeqs();
  case Grid::Group:
    return b.numGroups();
  case Grid::Node:
    return b.numNodes();
  case Grid::Batch:
    return 1;
  }
  return 0;
}

void launchOnCpu(const CpuModule &cpu, const Manifest &m, const PackedBatch &b,
                 std::vector<void *> &argv, const RunOptions &options) {
  int threads = options.numThreads;
  if (threads <= 0) {
    int64_t byWork =
        b.numTokens() / std::max<int64_t>(1, options.minTokensPerThread);
    threads =
        static_cast<int>(std::clamp<int64_t>(byWork, 1, at::get_num_threads()));
  }
  for (size_t k = 0; k < m.kernels.size(); ++k)
    cpu.launch(k, unitsOf(m.kernels[k].grid, b), argv.data(), argv.size(),
               threads);
}

void launchOnCuda(const CudaModule &cuda, int ordinal, const Manifest &m,
                  const PackedBatch &b, std::vector<void *> &argv,
                  const RunOptions &options) {
  void *stream = nullptr;
  if (options.stream) {
    stream = *options.stream;
  } else {
#ifdef CAC_TORCH_CUDA
    stream = c10::cuda::getCurrentCUDAStream(ordinal).stream();
#endif
  }
  // A split kernel's sequences are cut over several blocks each
  // (abi::launchUnits, the same rule as gpu-sim's in cac eval).
  for (size_t k = 0; k < m.kernels.size(); ++k)
    cuda.launch(ordinal, k,
                abi::launchUnits(m.kernels[k], unitsOf(m.kernels[k].grid, b),
                                 b.numSeqs()),
                argv.data(), argv.size(), stream);
  // Converted inputs and scratch are freed on return; LibTorch's caching
  // allocator orders that on its current stream only, so a caller's own
  // stream is waited for.
  if (options.synchronize || options.stream)
    cuda.synchronize(ordinal, stream);
}

} // namespace

TensorMap BundleEstimator::run(const TensorMap &inputs,
                               const PackedBatch &batch, const ParamMap &params,
                               const RunOptions &options) const {
  const Manifest &m = manifest();
  const std::string who = "bundle '" + m.estimator + "'";
  if (!options.allowExtra)
    rejectUnknownNames(*this, who, inputs, params);

  at::Device dev = runDevice(m, who, inputs, batch);
  const bool onCuda = dev.is_cuda();
  // Resolve the module first: a missing host.so/kernels.ptx is the error to
  // report, not a size mismatch.
  const CpuModule *cpu = onCuda ? nullptr : &bundle_->cpu();
  const CudaModule *cuda = onCuda ? &bundle_->cuda() : nullptr;
  const int ordinal = onCuda && dev.has_index() ? dev.index() : 0;

  PackedBatch b = batch.device() == dev ? batch : batch.to(dev);
  if (m.needsTree && !b.hasTree())
    throw BundleError(who + " needs a rollout tree (node_parent, token_node) "
                            "but the batch has none: call "
                            "PackedBatch::setTree");

  // The kept scratch buffers, unless another call holds them.
  std::unique_lock<std::mutex> keptLock;
  std::vector<at::Tensor> *kept = nullptr;
  if (!onCuda && options.keepScratch && !options.returnScratch) {
    keptLock = std::unique_lock<std::mutex>(scratch_->mutex, std::try_to_lock);
    if (keptLock.owns_lock()) {
      scratch_->buffers.resize(m.buffers.size());
      kept = &scratch_->buffers;
    }
  }
  std::vector<at::Tensor> buffers =
      makeBuffers(m, who, inputs, b, dev, options, kept);
  std::vector<double> paramValues = paramValuesOf(m, who, params);
  std::vector<Slot> slots(m.args.size());
  std::vector<void *> argv(m.args.size());
  setArgs(m, b, buffers, paramValues, slots, argv);
  if (!onCuda)
    launchOnCpu(*cpu, m, b, argv, options);
  else
    launchOnCuda(*cuda, ordinal, m, b, argv, options);

  TensorMap out;
  for (size_t i = 0; i < m.buffers.size(); ++i) {
    const BufferSpec &spec = m.buffers[i];
    if (spec.role == BufferRole::Output ||
        (spec.role == BufferRole::Scratch && options.returnScratch))
      out.emplace(spec.name, buffers[i]);
  }
  return out;
}

void BundleEstimator::releaseScratch() const {
  std::lock_guard<std::mutex> lock(scratch_->mutex);
  scratch_->buffers.clear();
}

int64_t BundleEstimator::keptScratchBytes() const {
  std::unique_lock<std::mutex> lock(scratch_->mutex, std::try_to_lock);
  if (!lock.owns_lock())
    return 0;
  int64_t bytes = 0;
  for (const at::Tensor &t : scratch_->buffers)
    if (t.defined())
      bytes += t.nbytes();
  return bytes;
}

} // namespace cac::rt

//===- PackedCall.cpp - The packed CPU call in one step -------------------===//
//
// A trainer's usual call, est(**inputs, lengths=..., group=...) on CPU
// tensors in the packed layout, costs a few microseconds of Python checks
// per call, which is a tenth of a short kernel's time (GRPO's). run_packed
// takes that case whole: it builds the batch, checks that every input is
// what the Python path would accept unchanged, and runs. Anything else
// (another layout, a device, a dtype to convert, a missing or unknown
// name, a bad shape) returns None, and the Python path (python/cac/) runs
// the call and raises its own errors: the rules and their messages stay
// there, this file only recognises a call that passes them all.
//
//===----------------------------------------------------------------------===//

#include "PackedCall.h"
#include "cac/Runtime/Kernels/Bundle.h"

#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>
#include <string>

namespace py = pybind11;
using namespace cac::rt;

namespace {

bool isIntegerType(at::ScalarType t) {
  return !at::isFloatingType(t) && !at::isComplexType(t);
}

/// A CPU tensor argument, or nothing for anything else.
std::optional<at::Tensor> cpuTensor(py::handle h) {
  if (!THPVariable_Check(h.ptr()))
    return std::nullopt;
  const at::Tensor &t = THPVariable_Unpack(h.ptr());
  if (!t.device().is_cpu())
    return std::nullopt;
  return t;
}

/// Whether `t` is an input the Python path would pass to the run as it is:
/// float32, or integer flags for a float32 buffer (both paths convert them
/// once, to the buffer's dtype), with the shape of its domain.
bool acceptedInput(const at::Tensor &t, const BufferSpec &spec,
                   const PackedBatch &batch) {
  at::ScalarType type = t.scalar_type();
  if (type != at::kFloat && !(isIntegerType(type) && spec.dtype == DType::F32))
    return false;
  if (spec.domain != Domain::Seq && spec.domain != Domain::Token &&
      spec.domain != Domain::Group)
    return false;
  return t.dim() == 1 && t.size(0) == domainSize(spec.domain, batch);
}

struct PackedArgs {
  at::Tensor lengths, group;
  TensorMap inputs;
};

/// The call's keyword arguments split into structure and inputs; nothing
/// when one is not a CPU tensor or not a name of this case (the other
/// structure arguments of python/cac/_batch.py: mask, offsets, trees,
/// seg_count).
std::optional<PackedArgs> splitArgs(const Manifest &m, const py::dict &kw) {
  PackedArgs args;
  for (auto item : kw) {
    std::string name = py::cast<std::string>(item.first);
    if (name == "group" && !m.needsGroups)
      continue; // structure the method does not read, as the Python path
    if (name == "mask" || name == "offsets" || name == "tree_parent" ||
        name == "tree_node" || name == "seg_count")
      return std::nullopt;
    std::optional<at::Tensor> t = cpuTensor(item.second);
    if (!t)
      return std::nullopt;
    if (name == "lengths") {
      args.lengths = *t;
    } else if (name == "group") {
      args.group = *t;
    } else {
      int b = m.findBuffer(name);
      if (b < 0 || m.buffers[b].role != BufferRole::Input)
        return std::nullopt;
      args.inputs.emplace(name, *t);
    }
  }
  return args;
}

py::object runPacked(const BundleEstimator &e, const py::dict &kw,
                     const ParamMap &params, int threads) {
  const Manifest &m = e.manifest();
  if (m.dtype != DType::F32 || m.needsTree)
    return py::none();
  std::optional<PackedArgs> args = splitArgs(m, kw);
  if (!args || !args->lengths.defined() || args->lengths.dim() != 1 ||
      !isIntegerType(args->lengths.scalar_type()) ||
      (m.needsGroups && !args->group.defined()))
    return py::none();
  PackedBatch batch = PackedBatch::fromLengths(args->lengths);
  if (batch.firstEmptySeq() >= 0)
    return py::none();
  if (m.needsGroups) {
    const at::Tensor &g = args->group;
    if (g.dim() != 1 || g.size(0) != batch.numSeqs() ||
        !isIntegerType(g.scalar_type()))
      return py::none();
    batch.setGroups(g);
  }
  size_t declared = 0;
  for (const BufferSpec &spec : m.buffers) {
    if (spec.role != BufferRole::Input)
      continue;
    ++declared;
    auto it = args->inputs.find(spec.name);
    if (it == args->inputs.end() || !acceptedInput(it->second, spec, batch))
      return py::none();
  }
  if (declared != args->inputs.size())
    return py::none();

  RunOptions options;
  options.numThreads = threads;
  TensorMap out;
  {
    py::gil_scoped_release release;
    out = e.run(args->inputs, batch, params, options);
  }
  // The outputs in manifest order, without the internal ones ("_...").
  py::dict result;
  for (const BufferSpec &spec : m.buffers)
    if (spec.role == BufferRole::Output && spec.name.rfind('_', 0) != 0)
      result[py::str(spec.name)] = out.at(spec.name);
  return result;
}

} // namespace

void bindPackedCall(py::module &m) {
  m.def("run_packed", &runPacked, py::arg("bundle"), py::arg("kwargs"),
        py::arg("params"), py::arg("threads"),
        "The outputs of a packed call on CPU tensors that the Python checks "
        "accept unchanged (float32 bundle, lengths, group ids as integers), "
        "or None for any other call.");
}

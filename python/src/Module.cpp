//===- Module.cpp - The _cac extension: kernel bundles for Python ---------===//
//
// Binds the kernel runtime (runtime/lib/Kernels) to Python: a loaded bundle,
// its manifest as plain Python values, the packed batch, and a run on torch
// tensors. Everything else of the package (compiling, caching, the padded
// layout, checks with Python-level messages, autograd) is Python in
// python/cac/; this file stays a thin layer so that the one reader of the
// manifest and the one launcher are the runtime's.
//
//===----------------------------------------------------------------------===//

#include "PackedCall.h"
#include "Padded.h"
#include "cac/Runtime/Kernels/Bundle.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>

namespace py = pybind11;
using namespace cac::rt;

namespace {

/// The manifest's buffers as dicts (name, role, domain, dtype, layout).
py::list buffersOf(const Manifest &m) {
  py::list out;
  for (const BufferSpec &b : m.buffers) {
    py::dict d;
    d["name"] = b.name;
    d["role"] = cac::abi::spelling(b.role);
    d["domain"] = cac::abi::spelling(b.domain);
    d["dtype"] = cac::abi::spelling(b.dtype);
    if (b.domain == Domain::Seg)
      d["layout"] = cac::abi::spelling(b.layout);
    out.append(d);
  }
  return out;
}

/// The parameters as (name, default or None) pairs, in manifest order.
py::list paramsOf(const Manifest &m) {
  py::list out;
  for (const ParamSpec &p : m.params)
    out.append(py::make_tuple(p.name, p.defaultValue
                                          ? py::object(py::float_(
                                                *p.defaultValue))
                                          : py::object(py::none())));
  return out;
}

py::object objectiveOf(const Manifest &m) {
  if (!m.objective)
    return py::none();
  py::dict d;
  d["wrt"] = m.objective->wrt;
  d["gradient"] = m.objective->gradient;
  d["loss_domain"] = cac::abi::spelling(m.objective->lossDomain);
  return d;
}

/// BundleEstimator::run with the options Python sets. The GIL is released
/// by the binding: the kernels may run for a while on the CPU pool.
TensorMap runBundle(const BundleEstimator &e, const TensorMap &inputs,
                    const PackedBatch &batch, const ParamMap &params,
                    int threads, std::optional<double> fill) {
  RunOptions options;
  options.numThreads = threads;
  options.fillOutputs = fill;
  return e.run(inputs, batch, params, options);
}

void bindBatch(py::module_ &m) {
  py::class_<PackedBatch>(m, "Batch",
                          "The packed (CSR) structure of a batch "
                          "(docs/bundle.md).")
      .def_static("from_mask", &PackedBatch::fromMask, py::arg("mask"),
                  "Sequence b owns the nonzero positions of mask row b.")
      .def_static(
          "from_lengths",
          [](const at::Tensor &lengths) {
            return PackedBatch::fromLengths(lengths);
          },
          py::arg("lengths"))
      .def("set_groups", &PackedBatch::setGroups, py::arg("ids"),
           py::return_value_policy::reference_internal)
      .def("set_tree", &PackedBatch::setTree, py::arg("node_parent"),
           py::arg("token_node"), py::return_value_policy::reference_internal)
      .def(
          "to",
          [](const PackedBatch &b, const std::string &device,
             bool nonBlocking) {
            return b.to(at::Device(device), nonBlocking);
          },
          py::arg("device"), py::arg("non_blocking") = false,
          "A copy whose structure arrays live on device.")
      .def("pack", &PackedBatch::pack, py::arg("padded"))
      .def("unpack", &PackedBatch::unpack, py::arg("packed"),
           py::arg("fill") = 0.0, py::arg("t") = -1)
      .def_property_readonly("num_seqs", &PackedBatch::numSeqs)
      .def_property_readonly("num_groups", &PackedBatch::numGroups)
      .def_property_readonly("num_tokens", &PackedBatch::numTokens)
      .def_property_readonly("num_nodes", &PackedBatch::numNodes)
      .def_property_readonly("max_length", &PackedBatch::maxLength)
      .def_property_readonly("first_empty_seq", &PackedBatch::firstEmptySeq)
      .def_property_readonly("seq_offsets", &PackedBatch::seqOffsets)
      .def_property_readonly("lengths", &PackedBatch::lengths)
      .def_property_readonly("group_ids", &PackedBatch::groupIds);
}

void bindBundle(py::module_ &m) {
  py::class_<BundleEstimator>(m, "Bundle",
                              "A kernel bundle loaded from its directory.")
      .def(py::init(&BundleEstimator::load), py::arg("dir"))
      .def_property_readonly("name", &BundleEstimator::name)
      .def_property_readonly(
          "directory",
          [](const BundleEstimator &e) { return e.bundle().directory(); })
      .def_property_readonly(
          "dtype",
          [](const BundleEstimator &e) {
            return cac::abi::spelling(e.manifest().dtype);
          })
      .def_property_readonly(
          "buffers",
          [](const BundleEstimator &e) { return buffersOf(e.manifest()); })
      .def_property_readonly(
          "params",
          [](const BundleEstimator &e) { return paramsOf(e.manifest()); })
      .def_property_readonly(
          "needs_groups",
          [](const BundleEstimator &e) { return e.manifest().needsGroups; })
      .def_property_readonly(
          "needs_tree",
          [](const BundleEstimator &e) { return e.manifest().needsTree; })
      .def_property_readonly(
          "objective",
          [](const BundleEstimator &e) { return objectiveOf(e.manifest()); })
      .def_property_readonly(
          "has_cpu",
          [](const BundleEstimator &e) { return e.bundle().hasCpu(); })
      .def_property_readonly(
          "has_cuda",
          [](const BundleEstimator &e) { return e.bundle().hasCuda(); })
      .def("run", &runBundle, py::arg("inputs"), py::arg("batch"),
           py::arg("params"), py::arg("threads") = 0,
           py::arg("fill") = std::nullopt,
           py::call_guard<py::gil_scoped_release>(),
           "Runs the kernels; outputs come back packed by name.");
}

} // namespace

PYBIND11_MODULE(_cac, m) {
  m.doc() = "cac kernel bundles on torch tensors (docs/python.md)";
  // Every runtime error names the input, parameter, file or field at fault;
  // they are the caller's mistakes, hence a ValueError.
  py::register_exception<BundleError>(m, "BundleError", PyExc_ValueError);
  m.def("built_with_torch_cuda", &builtWithTorchCuda,
        "True when the runtime launches on LibTorch's current CUDA stream.");
  bindBatch(m);
  bindBundle(m);
  bindPadded(m);
  bindPackedCall(m);
}

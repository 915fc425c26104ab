//===- Manifest.cpp - The bundle's JSON manifest --------------------------===//
//
// What the runtime needs to call a bundle's kernels (docs/bundle.md): its
// buffers, parameters, argument list and kernels, as the module attribute
// `cac.manifest`. The struct and its text are the kernel ABI's
// (abi/include/cac/Abi/Manifest.h, ManifestWriter.h), which the runtime and
// `cac eval` read back.
//
//===----------------------------------------------------------------------===//

#include "LowerKernelsImpl.h"

#include "cac/Abi/ManifestWriter.h"

namespace cac::lowering {

std::string manifestText(EstimatorOp est, const Abi &abi,
                         std::vector<cac::abi::KernelSpec> kernels) {
  cac::abi::Manifest m;
  m.estimator = est.getSymName().str();
  if (auto fl = dyn_cast<FileLineColLoc>(est.getLoc()))
    m.source = fl.getFilename().str();
  m.dtype = abi.floatType.isF64() ? cac::abi::DType::F64 : cac::abi::DType::F32;
  m.needsGroups = abi.needsGroups;
  m.needsTree = abi.needsTree;
  if (auto obj = est->getAttrOfType<DictionaryAttr>("cac.objective")) {
    // The host scales `loss` and `grad_<wrt>` (docs/language.md).
    std::string wrt = cast<StringAttr>(obj.get("wrt")).str();
    auto loss =
        symbolizeDomain(cast<StringAttr>(obj.get("loss_domain")).getValue());
    m.objective = cac::abi::ObjectiveSpec{wrt, "grad_" + wrt, toAbi(*loss)};
  }
  for (const Buffer &bf : abi.buffers)
    m.buffers.push_back({bf.name, bf.role, toAbi(bf.domain), m.dtype,
                         bf.segOnTokens ? cac::abi::SegLayout::ByToken
                                        : cac::abi::SegLayout::BySegment});
  for (auto &[name, def] : abi.params)
    m.params.push_back({name, def});
  // planAbi's argument list is the one the ABI prescribes: the fixed head, a
  // pointer per buffer, a scalar per parameter.
  m.args = m.expectedArgs();
  assert(m.args.size() == abi.args.size() && "planAbi left the ABI's list");
  m.kernels = std::move(kernels);
  return cac::abi::writeManifest(m);
}

} // namespace cac::lowering

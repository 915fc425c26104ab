//===- Manifest.cpp - The bundle's JSON manifest --------------------------===//
//
// What the runtime needs to call a bundle's kernels (docs/bundle.md): its
// buffers, parameters, argument list and kernels, as the module attribute
// `cac.manifest`.
//
//===----------------------------------------------------------------------===//

#include "LowerKernelsImpl.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

namespace cac::lowering {

static llvm::json::Array kernelsJson(ArrayRef<KernelEntry> kernels) {
  llvm::json::Array out;
  for (const KernelEntry &ke : kernels) {
    llvm::json::Object k;
    k["name"] = ke.name;
    k["grid"] = ke.grid;
    k["block"] = ke.block;
    k["unit"] = ke.unit;
    if (ke.items) {
      k["items"] = *ke.items;
      k["layout"] = ke.layout;
    }
    out.push_back(std::move(k));
  }
  return out;
}

static llvm::json::Array buffersJson(const Abi &abi, StringRef dtype) {
  llvm::json::Array bufs;
  for (const Buffer &bf : abi.buffers) {
    llvm::json::Object o{{"name", bf.name},
                         {"role", bf.role},
                         {"domain", stringifyDomain(bf.domain).str()},
                         {"dtype", dtype}};
    if (bf.domain == Domain::Seg)
      o["layout"] = bf.segOnTokens ? "by-token" : "by-segment";
    bufs.push_back(std::move(o));
  }
  return bufs;
}

static llvm::json::Array argsJson(const Abi &abi, StringRef dtype) {
  llvm::json::Array args;
  for (const AbiArg &a : abi.args) {
    const char *kind = a.kind == ArgKind::I64   ? "i64"
                       : a.kind == ArgKind::Ptr ? "ptr"
                                                : "param";
    llvm::json::Object o{{"name", a.name}, {"kind", kind}};
    if (a.kind == ArgKind::Param)
      o["dtype"] = dtype;
    args.push_back(std::move(o));
  }
  return args;
}

std::string writeManifest(EstimatorOp est, const Abi &abi,
                          ArrayRef<KernelEntry> kernels) {
  llvm::json::Object m;
  m["format"] = "cac-bundle-1";
  m["estimator"] = est.getSymName().str();
  if (auto fl = dyn_cast<FileLineColLoc>(est.getLoc()))
    m["source"] = fl.getFilename().str();
  std::string dtype = abi.floatType.isF64() ? "f64" : "f32";
  m["dtype"] = dtype;
  llvm::json::Array needs;
  if (abi.needsGroups)
    needs.push_back("groups");
  if (abi.needsTree)
    needs.push_back("tree");
  m["needs"] = std::move(needs);
  if (auto obj = est->getAttrOfType<DictionaryAttr>("cac.objective")) {
    // The host scales `loss` and `grad_<wrt>` (docs/language.md).
    std::string wrt = cast<StringAttr>(obj.get("wrt")).str();
    m["objective"] = llvm::json::Object{
        {"wrt", wrt},
        {"gradient", "grad_" + wrt},
        {"loss_domain", cast<StringAttr>(obj.get("loss_domain")).str()}};
  }
  m["buffers"] = buffersJson(abi, dtype);
  llvm::json::Array params;
  for (auto &[name, def] : abi.params) {
    llvm::json::Object p{{"name", name}};
    p["default"] = def ? llvm::json::Value(*def) : llvm::json::Value(nullptr);
    params.push_back(std::move(p));
  }
  m["params"] = std::move(params);
  m["args"] = argsJson(abi, dtype);
  m["kernels"] = kernelsJson(kernels);
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(m)));
  return os.str();
}

} // namespace cac::lowering

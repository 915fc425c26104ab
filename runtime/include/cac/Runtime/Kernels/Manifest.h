//===- Manifest.h - The manifest.json of a kernel bundle --------*- C++ -*-===//
//
// A kernel bundle's manifest says which kernels there are, the one argument
// list they all take, the buffers and the parameters. Its struct, its writer
// and its reader are the kernel ABI's (abi/include/cac/Abi/); the runtime
// reads it here, turning the reader's errors into BundleErrors.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_KERNELS_MANIFEST_H
#define CAC_RUNTIME_KERNELS_MANIFEST_H

#include "cac/Abi/Manifest.h"

#include <stdexcept>
#include <string>

namespace cac::rt {

/// Every error of the kernel runtime: bad manifests, missing symbols, wrong
/// inputs, driver failures. The message says which file, field or input.
class BundleError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

using abi::ArgKind;
using abi::ArgSource;
using abi::ArgSpec;
using abi::BufferRole;
using abi::BufferSpec;
using abi::Domain;
using abi::DType;
using abi::Grid;
using abi::KernelSpec;
using abi::Manifest;
using abi::ParamSpec;

/// A domain's name in messages ("token", ...).
inline const char *domainName(Domain d) { return abi::spelling(d); }

/// Parses and checks manifest.json text. `origin` names the file in errors.
/// Throws BundleError with "ORIGIN: FIELD: what is wrong".
Manifest parseManifest(const std::string &text,
                       const std::string &origin = "manifest.json");

/// Reads and parses a file.
Manifest loadManifest(const std::string &path);

} // namespace cac::rt

#endif // CAC_RUNTIME_KERNELS_MANIFEST_H

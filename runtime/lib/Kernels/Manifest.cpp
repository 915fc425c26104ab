//===- Manifest.cpp - Reading manifest.json -------------------------------===//

#include "cac/Runtime/Kernels/Manifest.h"

#include "cac/Abi/ManifestReader.h"

#include <fstream>
#include <sstream>

namespace cac::rt {

Manifest parseManifest(const std::string &text, const std::string &origin) {
  abi::ManifestOrError read = abi::readManifest(text, origin);
  if (!read)
    throw BundleError(read.error);
  return std::move(*read.manifest);
}

Manifest loadManifest(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw BundleError(path + ": cannot open the manifest");
  std::stringstream ss;
  ss << in.rdbuf();
  return parseManifest(ss.str(), path);
}

} // namespace cac::rt

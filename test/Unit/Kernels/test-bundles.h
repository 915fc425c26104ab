//===- test-bundles.h - Tiny kernel bundles for the runtime tests -*- C++
//-*-===//
//
// Until the compiler writes bundles, the tests make their own: manifests built
// here (with the argument list of docs/bundle.md) over the kernels of
// testdata/test-kernels.{c,cu}, written to temporary directories.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_TEST_UNIT_KERNELS_TESTBUNDLES_H
#define CAC_TEST_UNIT_KERNELS_TESTBUNDLES_H

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace cac::rt::test {

struct BufferDecl {
  std::string name, role, domain, dtype;
};
struct ParamDecl {
  std::string name;
  std::optional<double> defaultValue;
};
struct KernelDecl {
  std::string name, grid;
  int block = 128;
};

/// A manifest in the cac-bundle-1 format; `withArgs` writes the "args" list.
nlohmann::json makeManifest(const std::string &estimator,
                            const std::string &dtype,
                            const std::vector<std::string> &needs,
                            const std::vector<BufferDecl> &buffers,
                            const std::vector<ParamDecl> &params,
                            const std::vector<KernelDecl> &kernels,
                            bool withArgs = true);

/// disc (f32 or f64): x (token), bonus (seq) → ret (token), total (seq),
/// _seg_start (token, i32); gamma = 1.
nlohmann::json discManifest(const std::string &dtype = "f32");
/// gmean: reward (seq) → adv (seq), gsize (group); _mean scratch; scale
/// required.
nlohmann::json gmeanManifest();
/// tree: w (token) → nsum (node), tdepth (token); _depth scratch (node).
nlohmann::json treeManifest();
/// units: out (seq) += 1 per unit.
nlohmann::json unitsManifest();

/// The built test host.so and PTX ("" when nvcc was not found).
std::string hostSoPath();
std::string ptxPath();
/// The folder of compiled stdlib bundles (DIR/gae, DIR/grpo), or "".
std::string stdlibBundlesPath();

/// A bundle directory under the temp dir, removed on destruction.
class TempBundle {
public:
  /// Writes `manifestText` as manifest.json and copies in the test host.so
  /// and/or kernels.ptx.
  TempBundle(const std::string &manifestText, bool host = true,
             bool ptx = false);
  TempBundle(const nlohmann::json &manifest, bool host = true, bool ptx = false)
      : TempBundle(manifest.dump(2), host, ptx) {}
  ~TempBundle();
  TempBundle(const TempBundle &) = delete;
  TempBundle &operator=(const TempBundle &) = delete;
  const std::string &dir() const { return dir_; }

private:
  std::string dir_;
};

} // namespace cac::rt::test

#endif // CAC_TEST_UNIT_KERNELS_TESTBUNDLES_H

//===- test-bundles.cpp - Tiny kernel bundles for the runtime tests -------===//

#include "test-bundles.h"

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <unistd.h>

using nlohmann::json;

namespace cac::rt::test {

json makeManifest(const std::string &estimator, const std::string &dtype,
                  const std::vector<std::string> &needs,
                  const std::vector<BufferDecl> &buffers,
                  const std::vector<ParamDecl> &params,
                  const std::vector<KernelDecl> &kernels, bool withArgs) {
  json m;
  m["format"] = "cac-bundle-1";
  m["estimator"] = estimator;
  m["source"] = "test/" + estimator + ".cac";
  m["dtype"] = dtype;
  m["needs"] = needs;
  m["buffers"] = json::array();
  for (const BufferDecl &b : buffers)
    m["buffers"].push_back({{"name", b.name},
                            {"role", b.role},
                            {"domain", b.domain},
                            {"dtype", b.dtype}});
  m["params"] = json::array();
  for (const ParamDecl &p : params)
    m["params"].push_back(
        {{"name", p.name},
         {"default", p.defaultValue ? json(*p.defaultValue) : json(nullptr)}});
  if (withArgs) {
    json args = json::array();
    for (const char *n : {"unit_begin", "unit_end", "num_seqs", "num_groups",
                          "num_tokens", "num_nodes"})
      args.push_back({{"name", n}, {"kind", "i64"}});
    for (const char *n : {"seq_offsets", "seq_group", "group_offsets",
                          "group_members", "node_parent", "token_node"})
      args.push_back({{"name", n}, {"kind", "ptr"}, {"dtype", "i32"}});
    for (const BufferDecl &b : buffers)
      args.push_back({{"name", b.name}, {"kind", "ptr"}, {"dtype", b.dtype}});
    for (const ParamDecl &p : params)
      args.push_back({{"name", p.name}, {"kind", "param"}, {"dtype", dtype}});
    m["args"] = args;
  }
  m["kernels"] = json::array();
  for (const KernelDecl &k : kernels)
    m["kernels"].push_back(
        {{"name", k.name}, {"grid", k.grid}, {"block", k.block}});
  return m;
}

json discManifest(const std::string &dtype) {
  return makeManifest(dtype == "f64" ? "disc64" : "disc", dtype, {},
                      {{"x", "input", "token", dtype},
                       {"bonus", "input", "seq", dtype},
                       {"ret", "output", "token", dtype},
                       {"total", "output", "seq", dtype},
                       {"_seg_start", "output", "token", "i32"}},
                      {{"gamma", 1.0}},
                      {{dtype == "f64" ? "disc64_k0" : "disc_k0", "seq", 64}});
}

json gmeanManifest() {
  return makeManifest("gmean", "f32", {"groups"},
                      {{"reward", "input", "seq", "f32"},
                       {"adv", "output", "seq", "f32"},
                       {"gsize", "output", "group", "f32"},
                       {"_mean", "scratch", "group", "f32"}},
                      {{"scale", std::nullopt}},
                      {{"gmean_k0", "group", 32}, {"gmean_k1", "seq", 128}});
}

json treeManifest() {
  return makeManifest("tree", "f32", {"tree"},
                      {{"w", "input", "token", "f32"},
                       {"nsum", "output", "node", "f32"},
                       {"tdepth", "output", "token", "f32"},
                       {"_depth", "scratch", "node", "f32"}},
                      {}, {{"tree_k0", "node", 32}, {"tree_k1", "seq", 32}});
}

json unitsManifest() {
  return makeManifest("units", "f32", {}, {{"out", "output", "seq", "f32"}}, {},
                      {{"units_k0", "seq", 256}});
}

std::string hostSoPath() { return CAC_TEST_HOST_SO; }
std::string ptxPath() { return CAC_TEST_PTX; }
std::string stdlibBundlesPath() { return CAC_TEST_STDLIB_BUNDLES; }

namespace {

void copyFile(const std::string &from, const std::string &to) {
  std::ifstream in(from, std::ios::binary);
  std::ofstream out(to, std::ios::binary);
  if (!in || !out)
    throw std::runtime_error("cannot copy " + from + " to " + to);
  out << in.rdbuf();
}

} // namespace

// POSIX calls rather than std::filesystem: pip builds of LibTorch export
// std::filesystem symbols of their own, which crash when interposed.
TempBundle::TempBundle(const std::string &manifestText, bool host, bool ptx) {
  const char *tmp = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmp && *tmp ? tmp : "/tmp") + "/cac-kernels-test-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data()))
    throw std::runtime_error("mkdtemp failed for " + pattern);
  dir_ = buf.data();
  std::ofstream(dir_ + "/manifest.json") << manifestText;
  if (host)
    copyFile(hostSoPath(), dir_ + "/host.so");
  if (ptx) {
    if (ptxPath().empty())
      throw std::runtime_error("no test PTX (nvcc was not found)");
    copyFile(ptxPath(), dir_ + "/kernels.ptx");
  }
}

TempBundle::~TempBundle() {
  for (const char *name : {"manifest.json", "host.so", "kernels.ptx"})
    ::unlink((dir_ + "/" + name).c_str());
  ::rmdir(dir_.c_str());
}

} // namespace cac::rt::test

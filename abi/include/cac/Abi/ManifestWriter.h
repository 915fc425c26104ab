//===- ManifestWriter.h - Manifest -> manifest.json -------------*- C++ -*-===//
//
// The one writer of manifest.json (the lowering calls it). Keys come out
// sorted and indented by two spaces, numbers as integers or with 17
// significant digits: the text the lowering wrote with llvm::json before this
// header existed, kept byte for byte since the gpu-sim lowering's output,
// which holds it, is hashed by scripts/codegen-identity.sh. Works without
// exceptions (the compiler builds with -fno-exceptions).
//
//===----------------------------------------------------------------------===//

#ifndef CAC_ABI_MANIFESTWRITER_H
#define CAC_ABI_MANIFESTWRITER_H

#include "cac/Abi/Manifest.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

namespace cac::abi {

/// A manifest as JSON: every field docs/bundle.md lists; "source" only when
/// known, "objective" only for an objective, a seg buffer's "layout", a block
/// kernel's "items" and "layout" when set, a scalar argument's "dtype".
inline nlohmann::json toJson(const Manifest &m) {
  using nlohmann::json;
  json root = json::object();
  root["format"] = m.format;
  root["estimator"] = m.estimator;
  if (!m.source.empty())
    root["source"] = m.source;
  root["dtype"] = spelling(m.dtype);
  json needs = json::array();
  if (m.needsGroups)
    needs.push_back("groups");
  if (m.needsTree)
    needs.push_back("tree");
  root["needs"] = std::move(needs);
  if (m.objective)
    root["objective"] = {{"wrt", m.objective->wrt},
                         {"gradient", m.objective->gradient},
                         {"loss_domain", spelling(m.objective->lossDomain)}};
  json buffers = json::array();
  for (const BufferSpec &b : m.buffers) {
    json o = {{"name", b.name},
              {"role", spelling(b.role)},
              {"domain", spelling(b.domain)},
              {"dtype", spelling(b.dtype)}};
    if (b.domain == Domain::Seg)
      o["layout"] = spelling(b.layout);
    buffers.push_back(std::move(o));
  }
  root["buffers"] = std::move(buffers);
  json params = json::array();
  for (const ParamSpec &p : m.params)
    params.push_back(
        {{"name", p.name},
         {"default", p.defaultValue ? json(*p.defaultValue) : json(nullptr)}});
  root["params"] = std::move(params);
  json args = json::array();
  for (const ArgSpec &a : m.args) {
    // A scalar is spelled "param" in manifests, with its type beside it.
    json o = {{"name", a.name},
              {"kind", a.kind == ArgKind::Scalar ? "param" : spelling(a.kind)}};
    if (a.kind == ArgKind::Scalar)
      o["dtype"] = spelling(a.dtype);
    args.push_back(std::move(o));
  }
  root["args"] = std::move(args);
  json kernels = json::array();
  for (const KernelSpec &k : m.kernels) {
    json o = {{"name", k.name},
              {"grid", spelling(k.grid)},
              {"block", k.block},
              {"unit", k.perBlock ? "block" : "thread"}};
    if (k.items)
      o["items"] = *k.items;
    if (k.layout)
      o["layout"] = *k.layout;
    if (k.split)
      o["split"] = *k.split;
    if (k.carries)
      o["carries"] = true;
    kernels.push_back(std::move(o));
  }
  root["kernels"] = std::move(kernels);
  return root;
}

namespace detail {

/// A JSON string: `"` and `\` escaped, control characters as \t, \n, \r or
/// \u00XX, everything else as it is.
inline void quoteJson(std::string &out, const std::string &s) {
  static const char hex[] = "0123456789abcdef";
  out += '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    if (c >= 0x20) {
      out += char(c);
      continue;
    }
    out += '\\';
    if (c == '\t')
      out += 't';
    else if (c == '\n')
      out += 'n';
    else if (c == '\r')
      out += 'r';
    else
      out += std::string("u00") + hex[c >> 4] + hex[c & 15];
  }
  out += '"';
}

/// Prints `v` at nesting depth `indent` (in spaces): objects and arrays with
/// one member per line, empty ones as {} and [].
inline void printJson(std::string &out, const nlohmann::json &v,
                      unsigned indent) {
  auto newline = [&](unsigned n) {
    out += '\n';
    out.append(n, ' ');
  };
  switch (v.type()) {
  case nlohmann::json::value_t::object:
  case nlohmann::json::value_t::array: {
    const bool object = v.is_object();
    out += object ? '{' : '[';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first)
        out += ',';
      first = false;
      newline(indent + 2);
      if (object) {
        quoteJson(out, it.key());
        out += ": ";
      }
      printJson(out, it.value(), indent + 2);
    }
    if (!first)
      newline(indent);
    out += object ? '}' : ']';
    return;
  }
  case nlohmann::json::value_t::string:
    quoteJson(out, v.get_ref<const std::string &>());
    return;
  case nlohmann::json::value_t::boolean:
    out += v.get<bool>() ? "true" : "false";
    return;
  case nlohmann::json::value_t::number_integer:
    out += std::to_string(v.get<int64_t>());
    return;
  case nlohmann::json::value_t::number_unsigned:
    out += std::to_string(v.get<uint64_t>());
    return;
  case nlohmann::json::value_t::number_float: {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", v.get<double>());
    out += buf;
    return;
  }
  default:
    out += "null";
    return;
  }
}

} // namespace detail

/// The text of manifest.json for `m` (no newline at the end).
inline std::string writeManifest(const Manifest &m) {
  std::string out;
  detail::printJson(out, toJson(m), 0);
  return out;
}

} // namespace cac::abi

#endif // CAC_ABI_MANIFESTWRITER_H

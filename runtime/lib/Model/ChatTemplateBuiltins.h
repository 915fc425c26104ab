//===- ChatTemplateBuiltins.h - Filters, tests, methods, globals -*- C++
//-*-===//
//
// What a chat template may call: the filters (`x | trim`), tests (`x is
// defined`), methods of strings and mappings (`s.startswith('a')`) and global
// functions (`namespace(..)`, `raise_exception(..)`, `range(..)`) of the
// supported subset. The parser rejects other names at their position; these
// functions throw ValueError for wrong arguments, which the evaluator reports
// at the call. Internal to runtime/lib/Model.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_MODEL_CHATTEMPLATEBUILTINS_H
#define CAC_RUNTIME_MODEL_CHATTEMPLATEBUILTINS_H

#include "ChatTemplateValue.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cac::rt::chat {

/// Keyword arguments of a call, in order.
using KwArgs = std::vector<std::pair<std::string, Value>>;

/// The supported names, comma-separated, for error messages.
std::string supportedFilterNames();
std::string supportedTestNames();
std::string supportedMethodNames();
std::string supportedFunctionNames();

bool isSupportedFilter(std::string_view name);
bool isSupportedTest(std::string_view name);
bool isSupportedMethod(std::string_view name);
bool isSupportedFunction(std::string_view name);

/// `operand | name(args, kwargs)`.
Value applyFilter(std::string_view name, const Value &operand,
                  const std::vector<Value> &args, const KwArgs &kwargs);
/// `operand is name(args)`.
bool applyTest(std::string_view name, const Value &operand,
               const std::vector<Value> &args);
/// `object.name(args, kwargs)`.
Value callMethod(const Value &object, std::string_view name,
                 const std::vector<Value> &args, const KwArgs &kwargs);

/// What raise_exception(message) throws: the template's own error.
struct RaisedError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A global function: namespace, raise_exception (throws RaisedError), range.
Value callFunction(std::string_view name, const std::vector<Value> &args,
                   const KwArgs &kwargs);

} // namespace cac::rt::chat

#endif // CAC_RUNTIME_MODEL_CHATTEMPLATEBUILTINS_H

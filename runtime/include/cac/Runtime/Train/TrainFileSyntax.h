//===- TrainFileSyntax.h - The syntax of training files ---------*- C++ -*-===//
//
// The syntax tree of a training file (`train NAME { key = value ... }`): it
// shares the lexical conventions of .cac files (`#` and `//` comments,
// identifiers, numbers, double-quoted strings). A value is a number, a
// string, a name (`none`, `true`, `false`) or a call `f(positional...,
// key = value...)`, whose arguments are values again. What the fields mean
// is the schema's (TrainFile.h).
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_TRAIN_TRAINFILESYNTAX_H
#define CAC_RUNTIME_TRAIN_TRAINFILESYNTAX_H

#include "cac/Runtime/Train/Diagnostics.h"

#include <optional>
#include <string>
#include <vector>

namespace cac::rt::train {

/// A value of the training file.
struct Value {
  enum class Kind { Number, String, Name, Call };
  Kind kind = Kind::Number;
  SourceLoc loc;
  double number = 0;
  /// String contents, the name, or the callee of a call.
  std::string text;
  /// Call arguments in source order; an empty key is a positional argument.
  struct Arg {
    std::string key;
    SourceLoc keyLoc;
    /// The argument's value (the vector holds exactly one; a vector because
    /// Value is incomplete here).
    const Value &value() const { return values.front(); }
    std::vector<Value> values;
  };
  std::vector<Arg> args;

  /// "number", "string", "name", "call" (for messages).
  const char *kindName() const;
  /// The value as written (approximately), for messages.
  std::string spelling() const;
};

/// `key = value`.
struct Field {
  std::string key;
  SourceLoc keyLoc;
  Value value;
};

/// `train NAME { fields }`.
struct TrainBlock {
  std::string name;
  SourceLoc loc;
  std::vector<Field> fields;
};

/// Parses \p source; reports syntax errors to \p diag and returns nothing
/// after the first one.
std::optional<TrainBlock> parseTrainFile(const std::string &source,
                                         DiagnosticEngine &diag);


} // namespace cac::rt::train

#endif // CAC_RUNTIME_TRAIN_TRAINFILESYNTAX_H

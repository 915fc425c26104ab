//===- ChatTemplateSyntax.h - Syntax tree of a chat template ----*- C++ -*-===//
//
// The supported Jinja2 subset as a tree: statements (text, output, if, for,
// set, break, continue) over expressions. parseTemplate builds it with
// Hugging Face's lexer settings (trim_blocks, lstrip_blocks, the final
// newline dropped) and rejects anything outside the subset with its line and
// column. Internal to runtime/lib/Model.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_MODEL_CHATTEMPLATESYNTAX_H
#define CAC_RUNTIME_MODEL_CHATTEMPLATESYNTAX_H

#include "ChatTemplateValue.h"

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace cac::rt::chat {

/// A position in the template source, 1-based.
struct Loc {
  int line = 1, col = 1;
};

/// An error at a position of the template (parsing or rendering).
struct TemplateError : std::runtime_error {
  TemplateError(Loc loc, const std::string &what)
      : std::runtime_error(what), loc(loc) {}
  Loc loc;
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

/// One expression node.
struct Expr {
  enum class Kind {
    Literal, ///< value
    Name,    ///< name
    List,    ///< kids: the items
    Tuple,   ///< kids: the items
    Dict,    ///< kids: key, value, key, value, ...
    Attr,    ///< kids[0].name
    Item,    ///< kids[0][kids[1]]
    Slice,   ///< kids[0][kids[1]:kids[2]:kids[3]], absent parts null
    Call,    ///< kids[0](kids[1..], kwargs); kids[0] a Name or an Attr
    Filter,  ///< kids[0] | name(kids[1..], kwargs)
    Test,    ///< kids[0] is [not] name(kids[1..])
    Not,     ///< not kids[0]
    Neg,     ///< -kids[0]
    Pos,     ///< +kids[0]
    Binary,  ///< kids[0] op kids[1]: + - * / // % ** ~
    Compare, ///< kids[0] ops[0] kids[1] ops[1] kids[2] ...
    And,     ///< kids[0] and kids[1]
    Or,      ///< kids[0] or kids[1]
    Cond,    ///< kids[0] if kids[1] else kids[2] (kids[2] may be null)
  };
  Kind kind = Kind::Literal;
  Loc loc;
  Value value;
  /// The name, attribute, filter, test or operator.
  std::string name;
  std::vector<ExprPtr> kids;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  /// Compare: the operators between kids ("==", "in", "not in", ...).
  std::vector<std::string> ops;
  /// Test: `is not`.
  bool negated = false;
  /// The height of this node's tree (a leaf: 1).
  int depth = 1;
};

struct Stmt;
using Body = std::vector<Stmt>;

/// One statement.
struct Stmt {
  enum class Kind { Text, Output, If, For, Set, Break, Continue };
  Kind kind = Kind::Text;
  Loc loc;
  /// Text: the literal output.
  std::string text;
  /// Output: the expression; Set: the value; For: the iterable.
  ExprPtr expr;
  /// Set / For: the names assigned (several: tuple unpacking). Set with
  /// attribute: targets = {namespace name}, attr = the attribute.
  std::vector<std::string> targets;
  std::string attr;
  /// For: `for x in xs if cond`.
  ExprPtr filter;
  /// If: the conditions and bodies of if / elif..., then else with a null
  /// condition.
  std::vector<std::pair<ExprPtr, Body>> branches;
  /// For: the body and the `else` body (run when nothing was iterated).
  Body body, elseBody;
};

/// Parses \p source; throws TemplateError for syntax errors and constructs
/// outside the supported subset.
Body parseTemplate(std::string_view source);

/// Renders \p body with the variables of \p context; throws TemplateError
/// at the expression or statement that fails (raise_exception included).
std::string renderTemplate(const Body &body, const Dict &context);

} // namespace cac::rt::chat

#endif // CAC_RUNTIME_MODEL_CHATTEMPLATESYNTAX_H

//===- ChatTemplateLexer.h - Tokens of a chat template ----------*- C++ -*-===//
//
// Splits a template into text and the tokens of its tags, applying the
// whitespace rules of Hugging Face's Jinja2 environment: `{%-`/`-%}` strip
// the whitespace beside the tag, trim_blocks drops the newline after a block
// or comment tag, lstrip_blocks drops the indentation before one, and the
// template's final newline is dropped. Internal to runtime/lib/Model.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_MODEL_CHATTEMPLATELEXER_H
#define CAC_RUNTIME_MODEL_CHATTEMPLATELEXER_H

#include "ChatTemplateSyntax.h"

#include <string>
#include <string_view>
#include <vector>

namespace cac::rt::chat {

/// One token.
struct Token {
  enum class Kind {
    Text,       ///< literal output between tags
    VarBegin,   ///< {{
    VarEnd,     ///< }}
    BlockBegin, ///< {%
    BlockEnd,   ///< %}
    Name,
    String, ///< text: the unescaped value
    Int,
    Float,
    Op, ///< text: the operator or bracket
    Eof,
  };
  Kind kind = Kind::Eof;
  std::string text;
  Loc loc;
};

/// The tokens of \p source, ending with Eof; throws TemplateError for an
/// unclosed tag, comment or string and for characters no token starts with.
std::vector<Token> lexTemplate(std::string_view source);

} // namespace cac::rt::chat

#endif // CAC_RUNTIME_MODEL_CHATTEMPLATELEXER_H

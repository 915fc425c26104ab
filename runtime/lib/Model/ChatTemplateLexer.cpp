//===- ChatTemplateLexer.cpp - Tokens of a chat template ------------------===//

#include "ChatTemplateLexer.h"

#include <algorithm>
#include <cctype>

namespace cac::rt::chat {

namespace {

class Lexer {
public:
  explicit Lexer(std::string_view source) {
    // Jinja2 reads \r\n and \r as \n, and drops one final newline
    // (keep_trailing_newline is off in Hugging Face's environment).
    for (size_t k = 0; k < source.size(); ++k) {
      if (source[k] == '\r') {
        src_ += '\n';
        if (k + 1 < source.size() && source[k + 1] == '\n')
          ++k;
      } else {
        src_ += source[k];
      }
    }
    if (!src_.empty() && src_.back() == '\n')
      src_.pop_back();
    lineStarts_.push_back(0);
    for (size_t k = 0; k < src_.size(); ++k)
      if (src_[k] == '\n')
        lineStarts_.push_back(k + 1);
  }

  std::vector<Token> run();

private:
  Loc locAt(size_t offset) const;
  [[noreturn]] void fail(size_t offset, const std::string &what) const {
    throw TemplateError(locAt(offset), what);
  }
  void emitText(size_t begin, size_t end, bool tagStrips, bool lstrip);
  /// Lexes the tokens of a tag from pos_ to its end marker; returns whether
  /// the end had a '-' (strip what follows).
  bool lexTag(bool block, size_t tagStart);
  void lexString(size_t &k);
  void lexNumber(size_t &k);

  std::string src_;
  std::vector<size_t> lineStarts_;
  std::vector<Token> out_;
  size_t pos_ = 0;
  bool stripLeading_ = false;
};

Loc Lexer::locAt(size_t offset) const {
  auto it = std::upper_bound(lineStarts_.begin(), lineStarts_.end(), offset);
  size_t line = static_cast<size_t>(it - lineStarts_.begin());
  size_t start = lineStarts_[line - 1];
  // Columns count characters, not UTF-8 bytes.
  int col = 1;
  for (size_t k = start; k < offset && k < src_.size(); ++k)
    if ((static_cast<unsigned char>(src_[k]) & 0xC0) != 0x80)
      ++col;
  return Loc{static_cast<int>(line), col};
}

/// The text [begin, end) before a tag (or the end): `{%-` strips its
/// trailing whitespace, lstrip_blocks the spaces and tabs that start the
/// tag's line.
void Lexer::emitText(size_t begin, size_t end, bool tagStrips, bool lstrip) {
  std::string text = src_.substr(begin, end - begin);
  if (stripLeading_)
    text = pyStrip(text, std::nullopt, true, false);
  stripLeading_ = false;
  if (tagStrips) {
    text = pyStrip(text, std::nullopt, false, true);
  } else if (lstrip) {
    size_t nl = text.rfind('\n');
    size_t lineStart = nl == std::string::npos ? 0 : nl + 1;
    bool lineStarting =
        nl != std::string::npos || begin == 0 || src_[begin - 1] == '\n';
    if (lineStarting &&
        text.find_first_not_of(" \t", lineStart) == std::string::npos)
      text.erase(lineStart);
  }
  if (!text.empty())
    out_.push_back({Token::Kind::Text, std::move(text), locAt(begin)});
}

std::vector<Token> Lexer::run() {
  while (pos_ < src_.size()) {
    size_t tag = src_.find('{', pos_);
    while (tag != std::string::npos && tag + 1 < src_.size() &&
           src_[tag + 1] != '{' && src_[tag + 1] != '%' && src_[tag + 1] != '#')
      tag = src_.find('{', tag + 1);
    if (tag == std::string::npos || tag + 1 >= src_.size()) {
      emitText(pos_, src_.size(), false, false);
      break;
    }
    char kind = src_[tag + 1];
    char mod = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
    bool strips = mod == '-';
    emitText(pos_, tag, strips, kind != '{' && mod != '+');
    size_t body = tag + 2 + (mod == '-' || mod == '+' ? 1 : 0);
    if (kind == '#') {
      size_t end = src_.find("#}", body);
      if (end == std::string::npos)
        fail(tag, "unclosed comment: '{#' without '#}'");
      bool stripAfter = end > body && src_[end - 1] == '-';
      pos_ = end + 2;
      if (stripAfter)
        stripLeading_ = true;
      else if (pos_ < src_.size() && src_[pos_] == '\n')
        ++pos_; // trim_blocks applies to comments too
      continue;
    }
    bool block = kind == '%';
    out_.push_back({block ? Token::Kind::BlockBegin : Token::Kind::VarBegin,
                    block ? "{%" : "{{", locAt(tag)});
    pos_ = body;
    bool stripAfter = lexTag(block, tag);
    if (stripAfter)
      stripLeading_ = true;
    else if (block && src_[pos_ - 3] != '+' && pos_ < src_.size() &&
             src_[pos_] == '\n')
      ++pos_; // trim_blocks
  }
  out_.push_back({Token::Kind::Eof, "", locAt(src_.size())});
  return std::move(out_);
}

bool Lexer::lexTag(bool block, size_t tagStart) {
  const char *endMark = block ? "%}" : "}}";
  int depth = 0; // open brackets: '}}' inside a dict literal is not the end
  size_t k = pos_;
  while (true) {
    while (k < src_.size() && std::isspace(static_cast<unsigned char>(src_[k])))
      ++k;
    if (k >= src_.size())
      fail(tagStart, std::string("unclosed tag: '") + (block ? "{%" : "{{") +
                         "' without '" + endMark + "'");
    bool sign = (src_[k] == '-' || src_[k] == '+') &&
                src_.compare(k + 1, 2, endMark) == 0;
    if (depth == 0 && (sign || src_.compare(k, 2, endMark) == 0)) {
      size_t len = sign ? 3 : 2;
      out_.push_back({block ? Token::Kind::BlockEnd : Token::Kind::VarEnd,
                      endMark, locAt(k)});
      pos_ = k + len;
      return sign && src_[k] == '-';
    }
    char c = src_[k];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t b = k;
      while (
          k < src_.size() &&
          (std::isalnum(static_cast<unsigned char>(src_[k])) || src_[k] == '_'))
        ++k;
      out_.push_back({Token::Kind::Name, src_.substr(b, k - b), locAt(b)});
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      lexNumber(k);
    } else if (c == '\'' || c == '"') {
      lexString(k);
    } else {
      static const char *const kOps[] = {
          "**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
          ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|"};
      const char *op = nullptr;
      for (const char *o : kOps)
        if (src_.compare(k, std::char_traits<char>::length(o), o) == 0) {
          op = o;
          break;
        }
      if (!op)
        fail(k, std::string("unexpected character '") + c + "' in a tag");
      std::string s = op;
      if (s == "(" || s == "[" || s == "{")
        ++depth;
      else if ((s == ")" || s == "]" || s == "}") && depth > 0)
        --depth;
      out_.push_back({Token::Kind::Op, s, locAt(k)});
      k += s.size();
    }
  }
}

void Lexer::lexNumber(size_t &k) {
  size_t b = k;
  auto digits = [&] {
    while (
        k < src_.size() &&
        (std::isdigit(static_cast<unsigned char>(src_[k])) || src_[k] == '_'))
      ++k;
  };
  digits();
  bool isFloat = false;
  if (k + 1 < src_.size() && src_[k] == '.' &&
      std::isdigit(static_cast<unsigned char>(src_[k + 1]))) {
    isFloat = true;
    ++k;
    digits();
  }
  if (k < src_.size() && (src_[k] == 'e' || src_[k] == 'E')) {
    size_t e = k + 1;
    if (e < src_.size() && (src_[e] == '+' || src_[e] == '-'))
      ++e;
    if (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
      isFloat = true;
      k = e;
      digits();
    }
  }
  std::string text = src_.substr(b, k - b);
  text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
  out_.push_back(
      {isFloat ? Token::Kind::Float : Token::Kind::Int, text, locAt(b)});
}

/// A quoted string with Python's escapes.
void Lexer::lexString(size_t &k) {
  size_t b = k;
  char q = src_[k++];
  std::string out;
  auto hex = [&](size_t n) {
    if (k + n > src_.size())
      fail(k, "truncated escape in a string");
    uint32_t v = 0;
    for (size_t m = 0; m < n; ++m) {
      char d = src_[k + m];
      if (!std::isxdigit(static_cast<unsigned char>(d)))
        fail(k, "bad hexadecimal escape in a string");
      v = v * 16 + static_cast<uint32_t>(
                       std::isdigit(d) ? d - '0' : std::tolower(d) - 'a' + 10);
    }
    k += n;
    return v;
  };
  while (true) {
    if (k >= src_.size())
      fail(b, "unclosed string");
    char c = src_[k++];
    if (c == q)
      break;
    if (c != '\\') {
      out += c;
      continue;
    }
    if (k >= src_.size())
      fail(b, "unclosed string");
    char e = src_[k++];
    switch (e) {
    case 'n':
      out += '\n';
      break;
    case 't':
      out += '\t';
      break;
    case 'r':
      out += '\r';
      break;
    case 'b':
      out += '\b';
      break;
    case 'f':
      out += '\f';
      break;
    case 'v':
      out += '\v';
      break;
    case 'a':
      out += '\a';
      break;
    case '\\':
      out += '\\';
      break;
    case '\'':
      out += '\'';
      break;
    case '"':
      out += '"';
      break;
    case '\n':
      break; // a continued line
    case 'x':
      out += encodeUtf8({hex(2)});
      break;
    case 'u':
      out += encodeUtf8({hex(4)});
      break;
    case 'U':
      out += encodeUtf8({hex(8)});
      break;
    default:
      if (e >= '0' && e <= '7') {
        uint32_t v = e - '0';
        for (int m = 0;
             m < 2 && k < src_.size() && src_[k] >= '0' && src_[k] <= '7'; ++m)
          v = v * 8 + (src_[k++] - '0');
        out += encodeUtf8({v});
      } else if (e == 'N') {
        fail(k - 2, "the \\N{...} escape is not supported");
      } else {
        // Python keeps an unknown escape as it is.
        out += '\\';
        out += e;
      }
    }
  }
  out_.push_back({Token::Kind::String, std::move(out), locAt(b)});
}

} // namespace

std::vector<Token> lexTemplate(std::string_view source) {
  return Lexer(source).run();
}

} // namespace cac::rt::chat

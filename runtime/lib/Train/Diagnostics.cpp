//===- Diagnostics.cpp - file:line:col errors with a caret ----------------===//

#include "cac/Runtime/Train/Diagnostics.h"

namespace cac::rt::train {

DiagnosticEngine::DiagnosticEngine(std::string filename, std::string source)
    : filename_(std::move(filename)), source_(std::move(source)) {
  lineStarts_.push_back(0);
  for (size_t i = 0; i < source_.size(); ++i)
    if (source_[i] == '\n')
      lineStarts_.push_back(i + 1);
}

void DiagnosticEngine::error(SourceLoc loc, std::string message) {
  diags_.push_back({Severity::Error, loc, std::move(message)});
  ++numErrors_;
}

void DiagnosticEngine::warning(SourceLoc loc, std::string message) {
  diags_.push_back({Severity::Warning, loc, std::move(message)});
}

void DiagnosticEngine::note(SourceLoc loc, std::string message) {
  diags_.push_back({Severity::Note, loc, std::move(message)});
}

std::string DiagnosticEngine::line(int n) const {
  if (n < 1 || static_cast<size_t>(n) > lineStarts_.size())
    return {};
  size_t start = lineStarts_[n - 1];
  size_t end = source_.find('\n', start);
  std::string text = source_.substr(
      start, end == std::string::npos ? std::string::npos : end - start);
  if (!text.empty() && text.back() == '\r')
    text.pop_back();
  return text;
}

std::string DiagnosticEngine::render(const Diagnostic &d) const {
  const char *kind = d.severity == Severity::Error     ? "error"
                     : d.severity == Severity::Warning ? "warning"
                                                       : "note";
  std::string out = filename_;
  if (d.loc.valid())
    out += ":" + std::to_string(d.loc.line) + ":" + std::to_string(d.loc.col);
  out += std::string(": ") + kind + ": " + d.message + "\n";
  if (!d.loc.valid())
    return out;
  std::string text = line(d.loc.line);
  out += text + "\n";
  // Keep tabs so the caret lines up under tab-indented source.
  std::string caret;
  for (int i = 0; i + 1 < d.loc.col && static_cast<size_t>(i) < text.size();
       ++i)
    caret += text[i] == '\t' ? '\t' : ' ';
  out += caret + "^\n";
  return out;
}

std::string DiagnosticEngine::render() const {
  std::string out;
  for (const Diagnostic &d : diags_)
    out += render(d);
  return out;
}

} // namespace cac::rt::train

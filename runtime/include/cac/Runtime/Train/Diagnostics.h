//===- Diagnostics.h - file:line:col errors with a caret --------*- C++ -*-===//
//
// The training file is user input, so its errors look like the compiler's:
//
//   examples/arith/train.cac:7:15: error: unknown field 'stesp'
//     stesp = 100
//     ^
//
// The runtime cannot use MLIR's diagnostic engine (runtime/ never includes
// MLIR), so this is a small stand-alone one with the same output format.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_TRAIN_DIAGNOSTICS_H
#define CAC_RUNTIME_TRAIN_DIAGNOSTICS_H

#include <string>
#include <vector>

namespace cac::rt::train {

/// A 1-based position in a source buffer; line 0 means "no position" (an
/// error about the file as a whole or about a command-line flag).
struct SourceLoc {
  int line = 0;
  int col = 0;
  bool valid() const { return line > 0; }
};

/// Collects errors and notes about one source buffer and renders them.
class DiagnosticEngine {
public:
  enum class Severity { Error, Warning, Note };
  struct Diagnostic {
    Severity severity;
    SourceLoc loc;
    std::string message;
  };

  /// \p filename is printed as given; \p source is the buffer's text.
  DiagnosticEngine(std::string filename, std::string source);

  void error(SourceLoc loc, std::string message);
  void warning(SourceLoc loc, std::string message);
  void note(SourceLoc loc, std::string message);

  bool hasErrors() const { return numErrors_ > 0; }
  int numErrors() const { return numErrors_; }
  const std::vector<Diagnostic> &diagnostics() const { return diags_; }
  const std::string &filename() const { return filename_; }

  /// All diagnostics in the order they were reported, each as
  /// `FILE:LINE:COL: error: MESSAGE`, the source line and a caret.
  std::string render() const;
  /// One diagnostic rendered as above.
  std::string render(const Diagnostic &d) const;

private:
  std::string line(int n) const;

  std::string filename_;
  std::string source_;
  std::vector<size_t> lineStarts_;
  std::vector<Diagnostic> diags_;
  int numErrors_ = 0;
};

} // namespace cac::rt::train

#endif // CAC_RUNTIME_TRAIN_DIAGNOSTICS_H

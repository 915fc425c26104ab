//===- CommandLine.h - cac's command line, parsed and checked ---*- C++ -*-===//
//
// The options of `cac` (LLVM `cl` options) and their checks, behind a
// function that returns the options or an error instead of exiting, so that
// a fuzzer can run it (test/fuzz/FuzzCacArgs.cpp). The one exit left is
// LLVM's: its --help and --version printers (and what its parser takes for
// them, such as -hel) print and exit during the parse, as in every LLVM
// tool; the fuzzer unregisters them.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_TOOLS_CAC_COMMANDLINE_H
#define CAC_TOOLS_CAC_COMMANDLINE_H

#include "Tool.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

namespace cac::tool {

/// What a command line asks for: run `command` with `options`.
struct CommandLine {
  std::string command; ///< compile or eval
  ToolOptions options;
  unsigned timeLimit = 0;
  bool verifyDiagnostics = false;
};

/// The overview line of `cac --help`.
extern const char *const kOverview;

/// Parses \p args (args[0] the program's name; `@file` response files
/// expanded by LLVM, a device or FIFO refused first) and checks the kernel
/// options, --arch, the command and, for eval, --param. An error's message
/// is what to print after `cac: error: `; an empty message means LLVM's
/// parser has already written its errors to \p errs. Resets every option
/// first, so it can be called again.
llvm::Expected<CommandLine> parseCommandLine(llvm::ArrayRef<const char *> args,
                                             llvm::raw_ostream &errs);

} // namespace cac::tool

#endif // CAC_TOOLS_CAC_COMMANDLINE_H

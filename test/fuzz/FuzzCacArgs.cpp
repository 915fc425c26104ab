//===- FuzzCacArgs.cpp - libFuzzer target over cac's command line ---------===//
//
// cac-fuzz-cacargs: what cac's main does with its arguments before it reads
// the source: parseCommandLine (compiler/tools/cac/CommandLine.cpp), i.e.
// response files, LLVM's cl parse of every option and value, then the
// checks of the kernel options, --arch, the command and eval's --param. An
// input is the argument list after the program's name, the arguments
// separated by NUL bytes (argv's strings hold none). A bad command line is
// an error (LLVM's messages go to a null stream). LLVM's --help and
// --version printers exit the process during the parse, so this target
// unregisters them (and shadows their alias -h with a plain flag): what cac
// prints help for is an unknown option here. A crash, a sanitizer report, an
// exception, an LLVM fatal error, an exit or a hang is a bug, and so is a
// command line that parses into options its checks refuse, or that parses
// differently the second time (every option is reset first).
//
//===----------------------------------------------------------------------===//

#include "../../compiler/tools/cac/CommandLine.h"
#include "FuzzInput.h"

#include "cac/Conversion/Passes.h"
#include "cac/Pipelines.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

using namespace cac::tool;
namespace cl = llvm::cl;

/// Takes the name of LLVM's default -h (an alias of --help, added at each
/// parse unless an option of that name exists).
static cl::opt<bool> shadowH("h", cl::desc("not --help (the fuzz target)"),
                             cl::Hidden);

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  // A first parse registers LLVM's common options; then its printers go.
  const char *argv[] = {"cac", "compile", "x.cac"};
  llvm::raw_null_ostream null;
  llvm::consumeError(parseCommandLine(argv, null).takeError());
  llvm::StringMap<cl::Option *> &options = cl::getRegisteredOptions();
  for (const char *name :
       {"help", "help-list", "help-hidden", "help-list-hidden", "version"})
    if (auto it = options.find(name); it != options.end())
      it->second->removeArgument();
  return 0;
}

namespace {

void require(bool ok) {
  if (!ok)
    __builtin_trap();
}

/// The fields a parse sets, for comparing two parses.
std::string summary(const CommandLine &c) {
  const ToolOptions &o = c.options;
  std::string s = c.command + '\0' + o.inputFile + '\0' + o.outputFile + '\0' +
                  o.bundleDir + '\0' + o.backend + '\0' + o.dtype + '\0' +
                  o.gradMode + '\0' + o.aggregation + '\0' + o.kernels.chip +
                  '\0' + o.kernels.lower.seqLayout + '\0' +
                  std::to_string(static_cast<int>(o.emit)) + '\0' +
                  std::to_string(o.kernels.lower.seqBlock) + '\0' +
                  std::to_string(o.kernels.lower.seqItems) + '\0' +
                  std::to_string(c.timeLimit);
  for (const std::string &b : o.inputBatches)
    s += '\0' + b;
  for (const auto &[name, value] : o.params)
    s += '\0' + name + '=' + std::to_string(value);
  return s;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // argv[0], then the input's arguments: 256 in all at most.
  std::vector<std::string> args{"cac"};
  for (std::string &a : cac::fuzz::splitArguments(data, size, 255))
    args.push_back(std::move(a));
  std::vector<const char *> argv;
  for (const std::string &a : args)
    argv.push_back(a.c_str());
  llvm::raw_null_ostream errs;
  auto first = parseCommandLine(argv, errs);
  if (!first) {
    llvm::consumeError(first.takeError());
    return 0;
  }
  const ToolOptions &o = first->options;
  require(first->command == "compile" || first->command == "eval");
  require(cac::nvptxChipError(o.kernels.chip).empty());
  require(cac::lowerKernelsOptionsError(o.kernels.lower).empty());
  require(first->command == "eval" || o.params.empty());
  for (const auto &[name, value] : o.params)
    require(!name.empty() && std::isfinite(value));
  std::string once = summary(*first);
  auto second = parseCommandLine(argv, errs);
  require(static_cast<bool>(second));
  require(summary(*second) == once);
  return 0;
}

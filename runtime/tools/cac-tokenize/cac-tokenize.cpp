//===- cac-tokenize.cpp - A model folder's tokenizer on the command line --===//
//
//   cac-tokenize FOLDER [--add-special-tokens]
//       one line of text in, one JSON list of ids out
//   cac-tokenize FOLDER --decode [--skip-special-tokens]
//       one JSON list of ids in, one line of text out
//
// FOLDER is a Hugging Face model folder (tokenizer.json, with BOS/EOS from
// tokenizer_config.json), loaded as cac-run loads it, so users can check what
// their prompts become. The newline that ends an input line is not part of
// the text. Errors name the folder, the file or the input line, and exit 1.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Model/Tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <iostream>
#include <string>

namespace {

const char *const kUsage =
    "usage: cac-tokenize FOLDER [--add-special-tokens]\n"
    "       cac-tokenize FOLDER --decode [--skip-special-tokens]\n"
    "Encodes each line of standard input with the tokenizer of the model\n"
    "folder FOLDER and prints its ids as a JSON list, one line each; with\n"
    "--decode, reads JSON lists of ids and prints their text.\n";

struct Options {
  std::string folder;
  bool decode = false, addSpecial = false, skipSpecial = false;
};

/// Parses argv; prints the usage and returns false on a bad command line.
bool parseArgs(int argc, char **argv, Options &o, int &exitCode) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      exitCode = 0;
      return false;
    }
    if (a == "--decode") {
      o.decode = true;
    } else if (a == "--add-special-tokens") {
      o.addSpecial = true;
    } else if (a == "--skip-special-tokens") {
      o.skipSpecial = true;
    } else if (a.rfind("-", 0) == 0 || !o.folder.empty()) {
      std::cerr << "cac-tokenize: unexpected argument '" << a << "'\n"
                << kUsage;
      exitCode = 2;
      return false;
    } else {
      o.folder = a;
    }
  }
  const char *wrong = o.decode && o.addSpecial     ? "--add-special-tokens"
                      : !o.decode && o.skipSpecial ? "--skip-special-tokens"
                                                   : nullptr;
  if (o.folder.empty() || wrong) {
    if (wrong)
      std::cerr << "cac-tokenize: " << wrong << " does not apply "
                << (o.decode ? "to --decode" : "without --decode") << "\n";
    std::cerr << kUsage;
    exitCode = 2;
    return false;
  }
  return true;
}

/// The ids of one --decode input line; throws naming what is wrong.
std::vector<int64_t> parseIds(const std::string &line) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception &) {
    throw std::runtime_error("not JSON (want a list of ids such as [1, 2])");
  }
  if (!j.is_array())
    throw std::runtime_error("not a JSON list (want a list of ids such as "
                             "[1, 2])");
  std::vector<int64_t> ids;
  for (size_t k = 0; k < j.size(); ++k) {
    if (!j[k].is_number_integer())
      throw std::runtime_error("element " + std::to_string(k) + " (" +
                               j[k].dump() + ") is not an integer id");
    ids.push_back(j[k].get<int64_t>());
  }
  return ids;
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  int exitCode = 0;
  if (!parseArgs(argc, argv, o, exitCode))
    return exitCode;
  std::unique_ptr<cac::rt::Tokenizer> tok;
  try {
    tok = cac::rt::loadTokenizer(o.folder);
  } catch (const std::exception &e) {
    std::cerr << "cac-tokenize: " << e.what() << "\n";
    return 1;
  }
  std::ios::sync_with_stdio(false);
  std::string line;
  for (size_t lineNo = 1; std::getline(std::cin, line); ++lineNo) {
    try {
      if (o.decode) {
        std::cout << tok->decode(parseIds(line), o.skipSpecial) << '\n';
      } else {
        nlohmann::json ids = tok->encode(line, o.addSpecial);
        std::cout << ids.dump() << '\n';
      }
    } catch (const std::exception &e) {
      std::cout.flush();
      std::cerr << "cac-tokenize: <stdin>:" << lineNo << ": " << e.what()
                << "\n";
      return 1;
    }
  }
  return 0;
}

//===- cac-bench-tokenizer.cpp - Encode times of BpeTokenizer -------------===//
//
//   cac-bench-tokenizer FOLDER [--text FILE] [--iters N]
//
// Times encode() of a model folder's tokenizer on inputs that used to be
// slow: one word of 100 KB and of 1 MB (random lowercase letters: one piece,
// thousands of distinct merges), 1 MB of decomposed (NFD) Latin text for the
// NFC normalizer, and optionally a text file of your own (MB/s). Each time is
// the median of --iters runs; the tokenizer's piece cache is bypassed by a
// fresh tokenizer per run, whose load time is not counted. Wall and thread
// CPU seconds are both printed: on a shared machine the CPU time is the
// steadier of the two.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Model/Tokenizer.h"
#include "cac/Runtime/Model/Unicode.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <time.h>

using namespace cac::rt;

namespace {

double threadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/// Median wall and CPU seconds of encode(text) over \p iters fresh
/// tokenizers.
std::pair<double, double> medianSeconds(const std::filesystem::path &folder,
                                        const std::string &text, int iters,
                                        size_t &ids) {
  std::vector<double> wall, cpu;
  for (int k = 0; k < iters; ++k) {
    auto tok = loadTokenizer(folder);
    auto t0 = std::chrono::steady_clock::now();
    double c0 = threadCpuSeconds();
    ids = tok->encode(text).size();
    cpu.push_back(threadCpuSeconds() - c0);
    wall.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count());
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  return {wall[wall.size() / 2], cpu[cpu.size() / 2]};
}

std::string randomWord(size_t bytes, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(bytes, 'a');
  for (char &c : s)
    c = static_cast<char>('a' + rng() % 26);
  return s;
}

/// Latin text with accents, each accented letter decomposed (letter + mark).
std::string nfdText(size_t bytes) {
  const uint32_t marks[] = {0x301, 0x300, 0x302, 0x308, 0x303, 0x327};
  std::mt19937 rng(3);
  std::string s;
  while (s.size() < bytes) {
    for (int k = 0, n = 2 + rng() % 8; k < n; ++k) {
      s += static_cast<char>('a' + rng() % 26);
      if (rng() % 4 == 0)
        appendUtf8(s, marks[rng() % 6]);
    }
    s += ' ';
  }
  return s;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::cerr << "usage: cac-bench-tokenizer FOLDER [--text FILE] "
                 "[--iters N]\n";
    return 2;
  }
  std::filesystem::path folder = argv[1];
  std::string textFile;
  int iters = 3;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--text")
      textFile = argv[i + 1];
    else if (a == "--iters")
      iters = std::max(1, std::atoi(argv[i + 1]));
  }
  std::vector<std::pair<std::string, std::string>> inputs = {
      {"one 100 KB word", randomWord(100 << 10, 1)},
      {"one 1 MB word", randomWord(1 << 20, 2)},
      {"1 MB of NFD text", nfdText(1 << 20)},
  };
  if (!textFile.empty()) {
    std::ifstream in(textFile, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    inputs.push_back({textFile, ss.str()});
  }
  std::printf("| input | bytes | ids | wall s | CPU s | MB per CPU s |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  for (const auto &[name, text] : inputs) {
    size_t ids = 0;
    auto [wall, cpu] = medianSeconds(folder, text, iters, ids);
    std::printf("| %s | %zu | %zu | %.3f | %.3f | %.2f |\n", name.c_str(),
                text.size(), ids, wall, cpu, text.size() / cpu / 1e6);
    std::fflush(stdout);
  }
  return 0;
}

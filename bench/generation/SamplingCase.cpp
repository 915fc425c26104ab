//===- SamplingCase.cpp - Per-token sampling time at a real vocabulary ----===//
//
// Times rt::sampleTokens (what every decoding step calls) on [rows, vocab]
// logits drawn as scale * N(0, 1): scale 1 is a flat distribution whose
// nucleus holds most of the vocabulary, larger scales concentrate the mass
// on fewer tokens, as a trained model's next-token distributions do; "5 + 1"
// is a batch of scale 5 whose every eighth row is flat (scale 1), as a batch
// of a trained model holds a few uncertain rows. The "nucleus" column is the
// mean number of tokens top-p keeps.
//
//===----------------------------------------------------------------------===//

#include "BenchGeneration.h"

#include "cac/Runtime/Model/Generation.h"

#include <cstdio>

namespace cac::bench::gen {

namespace {

/// Mean number of tokens that top-p \p topP keeps of each row of \p logits.
double meanNucleus(const at::Tensor &logits, double topP) {
  at::Tensor p = std::get<0>(
      at::softmax(logits.to(at::kDouble), -1).sort(-1, /*descending=*/true));
  at::Tensor before = p.cumsum(-1) - p;
  return (before < topP).sum(-1).to(at::kDouble).mean().item<double>();
}

} // namespace

void benchSampling(const Options &o, const at::Device &device) {
  std::printf("\nSampling: %lld rows x vocabulary %lld, temperature 1, "
              "microseconds per sampled token (one sampleTokens call / "
              "rows), median of %d\n\n",
              static_cast<long long>(o.rows), static_cast<long long>(o.vocab),
              o.iters);
  std::printf("| logit scale | top_p | top_k | nucleus | us/token |\n");
  std::printf("| --- | --- | --- | --- | --- |\n");
  struct Case {
    double topP;
    int64_t topK;
  };
  const Case cases[] = {{1.0, 0}, {0.95, 0}, {0.9, 0}, {0.9, 50}};
  for (double scale : {1.0, 3.0, 5.0, 0.0}) { // 0: scale 5, every 8th row 1
    at::Generator init = rt::makeGenerator(3);
    at::Tensor rowScale = at::full({o.rows, 1}, scale == 0 ? 5.0 : scale);
    if (scale == 0)
      rowScale.slice(0, 0, o.rows, 8).fill_(1.0);
    at::Tensor logits =
        (at::randn({o.rows, o.vocab}, init) * rowScale).to(device);
    for (const Case &c : cases) {
      rt::SamplingOptions so;
      so.topP = c.topP;
      so.topK = c.topK;
      at::Generator gen = rt::makeGenerator(5);
      double s = medianSeconds(o.iters, [&] {
        rt::SampledTokens t = rt::sampleTokens(logits, so, gen);
        sync(device);
      });
      std::string nucleus = "—";
      if (c.topP < 1.0 && c.topK == 0)
        nucleus = std::to_string(
            static_cast<long long>(meanNucleus(logits, c.topP) + 0.5));
      std::printf("| %s | %.2f | %lld | %s | %.1f |\n",
                  scale == 0 ? "5 + 1" : std::to_string(int(scale)).c_str(),
                  c.topP, static_cast<long long>(c.topK), nucleus.c_str(),
                  s / static_cast<double>(o.rows) * 1e6);
      std::fflush(stdout);
    }
  }
}

} // namespace cac::bench::gen

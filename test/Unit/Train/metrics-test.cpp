//===- metrics-test.cpp - Metrics files and the PNG encoder ---------------===//

#include "cac/Runtime/Train/Metrics.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

using namespace cac::rt::train;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

fs::path tempDir(const std::string &name) {
  fs::path d = fs::temp_directory_path() /
               ("cac-train-metrics-" + name + "-" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string readAll(const fs::path &p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint32_t be32(const std::string &s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) |
         (uint32_t(uint8_t(s[at + 1])) << 16) |
         (uint32_t(uint8_t(s[at + 2])) << 8) | uint32_t(uint8_t(s[at + 3]));
}

TEST(Metrics, Checksums) {
  // Known values: CRC-32 of "123456789" is CBF43926, Adler-32 of
  // "Wikipedia" is 11E60398.
  const std::string a = "123456789", b = "Wikipedia";
  EXPECT_EQ(crc32(reinterpret_cast<const uint8_t *>(a.data()), a.size()),
            0xCBF43926u);
  EXPECT_EQ(adler32(reinterpret_cast<const uint8_t *>(b.data()), b.size()),
            0x11E60398u);
}

TEST(Metrics, PngStructure) {
  Canvas c(3, 2, 0x102030);
  c.set(1, 1, 0xff0000);
  std::string png = c.png();
  ASSERT_GT(png.size(), 8u + 25 + 12);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  // IHDR: length 13, width 3, height 2, depth 8, colour type 2.
  EXPECT_EQ(be32(png, 8), 13u);
  EXPECT_EQ(png.substr(12, 4), "IHDR");
  EXPECT_EQ(be32(png, 16), 3u);
  EXPECT_EQ(be32(png, 20), 2u);
  EXPECT_EQ(png[24], 8);
  EXPECT_EQ(png[25], 2);
  // Every chunk's CRC matches; the stream ends with IEND.
  size_t pos = 8;
  std::string last;
  while (pos < png.size()) {
    uint32_t len = be32(png, pos);
    std::string type = png.substr(pos + 4, 4);
    uint32_t crc =
        crc32(reinterpret_cast<const uint8_t *>(png.data()) + pos + 4, len + 4);
    EXPECT_EQ(crc, be32(png, pos + 8 + len)) << type;
    last = type;
    pos += 12 + len;
  }
  EXPECT_EQ(pos, png.size());
  EXPECT_EQ(last, "IEND");
  // The IDAT payload is a zlib stream of stored blocks holding the rows.
  size_t idat = 8 + 25;
  EXPECT_EQ(png.substr(idat + 4, 4), "IDAT");
  std::string z = png.substr(idat + 8, be32(png, idat));
  EXPECT_EQ(uint8_t(z[0]), 0x78);
  EXPECT_EQ(uint8_t(z[2]), 1); // final stored block
  size_t n = uint8_t(z[3]) | (uint8_t(z[4]) << 8);
  EXPECT_EQ(n, 2u * (1 + 3 * 3));
  std::string raw = z.substr(7, n);
  EXPECT_EQ(raw[0], 0); // filter byte
  EXPECT_EQ(uint8_t(raw[1]), 0x10);
  EXPECT_EQ(uint8_t(raw[10 + 1 + 3]), 0xff); // pixel (1, 1) red
  EXPECT_EQ(be32(z, 7 + n),
            adler32(reinterpret_cast<const uint8_t *>(raw.data()), raw.size()));
}

TEST(Metrics, LogsJsonlAndCsvAndResumeDropsLaterRows) {
  fs::path d = tempDir("log");
  {
    MetricsLog log(d, -1);
    log.append({{"step", 1}, {"phase", "sft"}, {"loss", 2.5}});
    log.append({{"step", 2},
                {"phase", "rl"},
                {"reward_mean", 0.25},
                {"eval_acc", 0.5}});
    log.append({{"step", 3}, {"phase", "rl"}, {"reward_mean", 0.75}});
  }
  std::string csv = readAll(d / "metrics.csv");
  EXPECT_EQ(csv.substr(0, csv.find('\n')).substr(0, 22),
            "step,phase,rl_step,rew");
  EXPECT_NE(csv.find("\n2,rl,,0.25,,0.5,"), std::string::npos) << csv;
  {
    // A resumed run from step 2 keeps rows 1-2, and a torn line is dropped.
    std::ofstream(d / "metrics.jsonl", std::ios::app) << "{\"step\": 4, \"ph";
    MetricsLog log(d, 2);
    ASSERT_EQ(log.rows().size(), 2u);
    EXPECT_EQ(log.rows()[1]["step"], 2);
    log.append({{"step", 3}, {"phase", "rl"}, {"reward_mean", 0.5}});
  }
  std::string jsonl = readAll(d / "metrics.jsonl");
  EXPECT_EQ(std::count(jsonl.begin(), jsonl.end(), '\n'), 3);
  EXPECT_NE(jsonl.find("\"reward_mean\":0.5"), std::string::npos);
  EXPECT_EQ(jsonl.find("0.75"), std::string::npos);
  fs::remove_all(d);
}

// A line torn by a kill or a full disk is repaired (dropped), not taken as
// the end of the file: the valid rows after it are kept, in both files.
TEST(Metrics, ATornLineInTheMiddleLosesNoValidRow) {
  fs::path d = tempDir("torn");
  {
    std::ofstream out(d / "metrics.jsonl");
    out << "{\"step\": 1, \"phase\": \"sft\", \"loss\": 2.5}\n"
        << "{\"step\": 2, \"pha\n"
        << "{\"step\": 2, \"phase\": \"sft\", \"loss\": 2.0}\n"
        << "{\"step\": 3, \"phase\": \"sft\", \"loss\": 1.5}\n";
  }
  {
    testing::internal::CaptureStderr();
    MetricsLog log(d, 3);
    std::string err = testing::internal::GetCapturedStderr();
    ASSERT_EQ(log.rows().size(), 3u);
    EXPECT_EQ(log.rows()[2]["loss"], 1.5);
    EXPECT_NE(err.find("dropped line 2 (not a JSON row"), std::string::npos)
        << err;
  }
  std::string jsonl = readAll(d / "metrics.jsonl");
  EXPECT_EQ(std::count(jsonl.begin(), jsonl.end(), '\n'), 3) << jsonl;
  EXPECT_EQ(jsonl.find("\"pha\n"), std::string::npos) << jsonl;
  std::string csv = readAll(d / "metrics.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4) << csv;
  // samples.jsonl alike.
  {
    std::ofstream out(d / "samples.jsonl");
    out << "{\"step\": 1, \"text\": \"a\"}\n{\"st\n{\"step\": 2, \"text\": \"b\"}\n";
  }
  testing::internal::CaptureStderr();
  SampleLog samples(d / "samples.jsonl", 2);
  testing::internal::GetCapturedStderr();
  std::string text = readAll(d / "samples.jsonl");
  EXPECT_EQ(text, "{\"step\":1,\"text\":\"a\"}\n{\"step\":2,\"text\":\"b\"}\n");
  fs::remove_all(d);
}

TEST(Metrics, PlotIsAPng) {
  fs::path d = tempDir("plot");
  std::vector<json> rows;
  for (int i = 1; i <= 20; ++i) {
    json r = {{"step", i},
              {"phase", "rl"},
              {"reward_mean", i / 20.0},
              {"acc", i / 25.0}};
    if (i % 5 == 0)
      r["eval_acc"] = i / 30.0;
    rows.push_back(r);
  }
  writePlot(rows, d / "plot.png");
  std::string png = readAll(d / "plot.png");
  EXPECT_EQ(png.substr(1, 3), "PNG");
  EXPECT_EQ(be32(png, 16), 800u);
  fs::remove_all(d);
}

} // namespace

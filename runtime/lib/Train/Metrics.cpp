//===- Metrics.cpp - JSONL/CSV metrics, progress bar, PNG plot ------------===//

#include "cac/Runtime/Train/Metrics.h"

#include "cac/Runtime/Support/FileUtil.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <unistd.h>

namespace fs = std::filesystem;
using nlohmann::json;

namespace cac::rt::train {

//===----------------------------------------------------------------------===//
// MetricsLog
//===----------------------------------------------------------------------===//

const std::vector<std::string> &metricColumns() {
  static const std::vector<std::string> cols = {"step",
                                                "phase",
                                                "rl_step",
                                                "reward_mean",
                                                "acc",
                                                "eval_acc",
                                                "eval_steps_frac",
                                                "loss",
                                                "pg_loss",
                                                "value_loss",
                                                "kl",
                                                "kl_reward",
                                                "kl_coef",
                                                "entropy",
                                                "clip_frac",
                                                "ratio_mean",
                                                "adv_mean",
                                                "adv_std",
                                                "grad_norm",
                                                "lr",
                                                "response_len",
                                                "turns",
                                                "tool_accuracy",
                                                "tool_failures",
                                                "tokens_per_s",
                                                "tokens_computed",
                                                "tokens_flattened",
                                                "compute_ratio",
                                                "tokens_sampled",
                                                "tokens_flattened_response",
                                                "sample_ratio",
                                                "plan_nodes",
                                                "plan_leaves",
                                                "node_samples",
                                                "mc_shared",
                                                "replay_size",
                                                "replay_dropped",
                                                "replay_questions",
                                                "replay_age_mean",
                                                "time_gen_s",
                                                "time_score_s",
                                                "time_estimator_s",
                                                "time_update_s",
                                                "time_eval_s",
                                                "time_step_s",
                                                "elapsed_s",
                                                "nonfinite_skips"};
  return cols;
}

std::string MetricsLog::csvLine(const json &row) {
  std::string line;
  bool first = true;
  for (const auto &c : metricColumns()) {
    if (!first)
      line += ',';
    first = false;
    auto it = row.find(c);
    if (it == row.end() || it->is_null())
      continue;
    if (it->is_string()) {
      line += it->get<std::string>();
    } else if (it->is_number_integer()) {
      line += std::to_string(it->get<int64_t>());
    } else if (it->is_number()) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.6g", it->get<double>());
      line += buf;
    } else {
      line += it->dump();
    }
  }
  return line;
}

namespace {

/// The rows of a JSONL log up to step \p keepUpToStep (< 0: none). A line
/// that is not a JSON object (torn by a kill or a full disk) is dropped and
/// reading goes on, so no valid row after it is lost; the caller rewrites
/// the file without it.
std::vector<json> readRowsUpTo(const fs::path &file, int64_t keepUpToStep) {
  std::vector<json> rows;
  if (keepUpToStep < 0)
    return rows;
  std::ifstream in(file);
  std::string line;
  int64_t lineNo = 0;
  std::vector<int64_t> torn;
  while (std::getline(in, line)) {
    ++lineNo;
    if (line.empty())
      continue;
    json row = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (row.is_discarded() || !row.is_object()) {
      torn.push_back(lineNo);
      continue;
    }
    if (row.value("step", int64_t(0)) > keepUpToStep)
      break;
    rows.push_back(std::move(row));
  }
  if (!torn.empty()) {
    std::string lines;
    for (int64_t n : torn)
      lines += (lines.empty() ? "" : ", ") + std::to_string(n);
    std::cerr << "cac-run: note: '" << file.string() << "': dropped "
              << (torn.size() == 1 ? "line " : "lines ") << lines
              << " (not a JSON row: a write torn by a kill or a full disk); "
                 "the rows around "
              << (torn.size() == 1 ? "it" : "them") << " are kept\n";
  }
  return rows;
}

std::string jsonLine(const json &row) {
  return row.dump(-1, ' ', false, json::error_handler_t::replace) + '\n';
}

} // namespace

MetricsLog::MetricsLog(fs::path dir, int64_t keepUpToStep)
    : dir_(std::move(dir)) {
  fs::create_directories(dir_);
  rows_ = readRowsUpTo(dir_ / "metrics.jsonl", keepUpToStep);
  rewrite();
}

SampleLog::SampleLog(fs::path file, int64_t keepUpToStep)
    : file_(std::move(file)) {
  std::string text;
  for (const json &row : readRowsUpTo(file_, keepUpToStep))
    text += jsonLine(row);
  writeFileAtomic(file_, text);
}

void SampleLog::append(const std::vector<json> &rows) {
  if (file_.empty() || rows.empty())
    return;
  std::string text;
  for (const json &row : rows)
    text += jsonLine(row);
  appendToFile(file_, text);
}

void MetricsLog::rewrite() {
  std::string jsonl, csv;
  for (const auto &c : metricColumns())
    csv += (csv.empty() ? "" : ",") + c;
  csv += '\n';
  for (const auto &r : rows_) {
    jsonl += r.dump() + '\n';
    csv += csvLine(r) + '\n';
  }
  writeFileAtomic(dir_ / "metrics.jsonl", jsonl);
  writeFileAtomic(dir_ / "metrics.csv", csv);
}

void MetricsLog::append(const json &row) {
  rows_.push_back(row);
  if (dir_.empty())
    return;
  // One checked write per file and row: a full disk stops the run naming
  // the file; a crash can at most tear the last line, which --resume drops.
  appendToFile(dir_ / "metrics.jsonl", row.dump() + '\n');
  appendToFile(dir_ / "metrics.csv", csvLine(row) + '\n');
}

//===----------------------------------------------------------------------===//
// PNG
//===----------------------------------------------------------------------===//

uint32_t crc32(const uint8_t *data, size_t size, uint32_t crc) {
  static uint32_t table[256];
  static bool init = [] {
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k)
        c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      table[n] = c;
    }
    return true;
  }();
  (void)init;
  crc = ~crc;
  for (size_t i = 0; i < size; ++i)
    crc = table[(crc ^ data[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t adler32(const uint8_t *data, size_t size) {
  uint32_t a = 1, b = 0;
  for (size_t i = 0; i < size; ++i) {
    a = (a + data[i]) % 65521;
    b = (b + a) % 65521;
  }
  return (b << 16) | a;
}

namespace {

void put32(std::string &s, uint32_t v) {
  s += static_cast<char>(v >> 24);
  s += static_cast<char>(v >> 16);
  s += static_cast<char>(v >> 8);
  s += static_cast<char>(v);
}

void chunk(std::string &png, const char *type, const std::string &data) {
  put32(png, static_cast<uint32_t>(data.size()));
  std::string body = std::string(type, 4) + data;
  png += body;
  put32(png,
        crc32(reinterpret_cast<const uint8_t *>(body.data()), body.size()));
}

} // namespace

std::string encodePng(int width, int height, const std::vector<uint8_t> &rgb) {
  // Raw scanlines, each with filter byte 0 (none).
  std::vector<uint8_t> raw;
  raw.reserve(static_cast<size_t>(height) * (width * 3 + 1));
  for (int y = 0; y < height; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), rgb.begin() + static_cast<size_t>(y) * width * 3,
               rgb.begin() + static_cast<size_t>(y + 1) * width * 3);
  }
  // zlib stream of stored (uncompressed) deflate blocks of <= 65535 bytes.
  std::string z;
  z += static_cast<char>(0x78);
  z += static_cast<char>(0x01);
  size_t pos = 0;
  do {
    size_t n = std::min<size_t>(65535, raw.size() - pos);
    bool last = pos + n == raw.size();
    z += static_cast<char>(last ? 1 : 0);
    z += static_cast<char>(n & 0xff);
    z += static_cast<char>(n >> 8);
    z += static_cast<char>(~n & 0xff);
    z += static_cast<char>((~n >> 8) & 0xff);
    z.append(reinterpret_cast<const char *>(raw.data()) + pos, n);
    pos += n;
  } while (pos < raw.size());
  put32(z, adler32(raw.data(), raw.size()));

  std::string png = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  put32(ihdr, static_cast<uint32_t>(width));
  put32(ihdr, static_cast<uint32_t>(height));
  ihdr += static_cast<char>(8); // bit depth
  ihdr += static_cast<char>(2); // colour type RGB
  ihdr += std::string(3, '\0'); // deflate, adaptive filtering, no interlace
  chunk(png, "IHDR", ihdr);
  chunk(png, "IDAT", z);
  chunk(png, "IEND", "");
  return png;
}

//===----------------------------------------------------------------------===//
// Canvas
//===----------------------------------------------------------------------===//

Canvas::Canvas(int width, int height, uint32_t background)
    : w_(width), h_(height), px_(static_cast<size_t>(width) * height * 3) {
  fillRect(0, 0, width - 1, height - 1, background);
}

void Canvas::set(int x, int y, uint32_t rgb) {
  if (x < 0 || y < 0 || x >= w_ || y >= h_)
    return;
  size_t i = (static_cast<size_t>(y) * w_ + x) * 3;
  px_[i] = static_cast<uint8_t>(rgb >> 16);
  px_[i + 1] = static_cast<uint8_t>(rgb >> 8);
  px_[i + 2] = static_cast<uint8_t>(rgb);
}

uint32_t Canvas::get(int x, int y) const {
  size_t i = (static_cast<size_t>(y) * w_ + x) * 3;
  return (uint32_t(px_[i]) << 16) | (uint32_t(px_[i + 1]) << 8) | px_[i + 2];
}

void Canvas::fillRect(int x0, int y0, int x1, int y1, uint32_t rgb) {
  for (int y = std::max(0, y0); y <= std::min(h_ - 1, y1); ++y)
    for (int x = std::max(0, x0); x <= std::min(w_ - 1, x1); ++x)
      set(x, y, rgb);
}

void Canvas::line(double x0, double y0, double x1, double y1, uint32_t rgb,
                  int thickness) {
  double dx = x1 - x0, dy = y1 - y0;
  int steps =
      static_cast<int>(std::ceil(std::max(std::fabs(dx), std::fabs(dy)))) + 1;
  int r0 = -(thickness - 1) / 2, r1 = thickness / 2;
  for (int i = 0; i <= steps; ++i) {
    double t = steps ? static_cast<double>(i) / steps : 0;
    int x = static_cast<int>(std::lround(x0 + t * dx));
    int y = static_cast<int>(std::lround(y0 + t * dy));
    for (int oy = r0; oy <= r1; ++oy)
      for (int ox = r0; ox <= r1; ++ox)
        set(x + ox, y + oy, rgb);
  }
}

namespace {

/// 5x7 glyphs, one string of 7 rows of 5 columns ('#' = ink) per character.
const std::map<char, const char *> &glyphs() {
  static const std::map<char, const char *> g = {
      {'0', " ### #   ##  ### # ###  ##   # ### "},
      {'1', "  #   ##    #    #    #    #   ### "},
      {'2', " ### #   #    #   #   #   #   #####"},
      {'3', "#####   #   #     #     ##   # ### "},
      {'4', "   #   ##  # # #  # #####   #    # "},
      {'5', "######    ####     #    ##   # ### "},
      {'6', "  ##  #   #    #### #   ##   # ### "},
      {'7', "#####    #   #   #   #    #    #   "},
      {'8', " ### #   ##   # ### #   ##   # ### "},
      {'9', " ### #   ##   # ####    #   #  ##  "},
      {'.', "                          ##   ##  "},
      {'-', "               #####               "},
      {':', "      ##   ##        ##   ##       "},
      {'=', "          #####     #####          "},
      {'(', "   #   #   #    #    #     #     # "},
      {')', " #     #     #    #    #   #   #   "},
      {'/', "         #   #   #   #   #         "},
      {'_', "                              #####"},
      {'a', "           ###     # #####   # ####"},
      {'b', "#    #    # ## ##  ##   ##   ##### "},
      {'c', "           ### #    #    #   # ### "},
      {'d', "    #    # ## ##  ###   ##   # ####"},
      {'e', "           ### #   #######     ### "},
      {'f', "  ##  #  # #   ###   #    #    #   "},
      {'g', "      #####   ##   # ####    # ### "},
      {'h', "#    #    # ## ##  ##   ##   ##   #"},
      {'i', "  #        ##    #    #    #   ### "},
      {'j', "   #        ##    #    # #  #  ##  "},
      {'k', "#    #    #  # # #  ##   # #  #  # "},
      {'l', " ##    #    #    #    #    #   ### "},
      {'m', "          ## # # # ## # ##   ##   #"},
      {'n', "          # ## ##  ##   ##   ##   #"},
      {'o', "           ### #   ##   ##   # ### "},
      {'p', "          #### #   ##### #    #    "},
      {'q', "           #####   # ####    #    #"},
      {'r', "          # ## ##  ##    #    #    "},
      {'s', "           #####     ###     ##### "},
      {'t', " #    #   ###   #    #    #  #  ## "},
      {'u', "          #   ##   ##   ##  ## ## #"},
      {'v', "          #   ##   ##   # # #   #  "},
      {'w', "          #   ##   ## # ## # # # # "},
      {'x', "          #   # # #   #   # # #   #"},
      {'y', "          #   ##   # ####    # ### "},
      {'z', "          #####   #   #   #   #####"},

  };
  return g;
}

} // namespace

void Canvas::text(int x, int y, const std::string &s, uint32_t rgb, int scale) {
  int cx = x;
  for (char ch : s) {
    char c = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    auto it = glyphs().find(c);
    if (it != glyphs().end()) {
      const char *bits = it->second;
      size_t n = std::char_traits<char>::length(bits);
      for (size_t i = 0; i < n && i < 35; ++i)
        if (bits[i] == '#')
          fillRect(cx + static_cast<int>(i % 5) * scale,
                   y + static_cast<int>(i / 5) * scale,
                   cx + static_cast<int>(i % 5) * scale + scale - 1,
                   y + static_cast<int>(i / 5) * scale + scale - 1, rgb);
    }
    cx += 6 * scale;
  }
}

std::string Canvas::png() const { return encodePng(w_, h_, px_); }

//===----------------------------------------------------------------------===//
// Plot
//===----------------------------------------------------------------------===//

namespace {

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

} // namespace

void writePlot(const std::vector<json> &rows, const fs::path &path) {
  struct Series {
    const char *key;
    const char *label;
    uint32_t color;
    std::vector<std::pair<double, double>> pts;
  };
  std::vector<Series> series = {{"reward_mean", "reward", 0x1f77b4, {}},
                                {"acc", "rollout acc", 0x2ca02c, {}},
                                {"eval_acc", "eval acc", 0xd62728, {}}};
  double xmin = 1e300, xmax = -1e300, ymin = 0, ymax = 1;
  for (const auto &r : rows) {
    std::string phase = r.value("phase", "");
    if (phase != "rl" && phase != "eval")
      continue;
    double x = r.value("step", 0.0);
    for (auto &s : series) {
      auto it = r.find(s.key);
      if (it == r.end() || !it->is_number())
        continue;
      double y = it->get<double>();
      s.pts.emplace_back(x, y);
      xmin = std::min(xmin, x);
      xmax = std::max(xmax, x);
      ymin = std::min(ymin, y);
      ymax = std::max(ymax, y);
    }
  }
  if (xmin > xmax)
    xmin = 0, xmax = 1;
  if (xmax == xmin)
    xmax = xmin + 1;

  const int W = 800, H = 480, L = 60, R = 20, T = 40, B = 50;
  Canvas c(W, H);
  auto px = [&](double x) {
    return L + (x - xmin) / (xmax - xmin) * (W - L - R);
  };
  auto py = [&](double y) {
    return H - B - (y - ymin) / (ymax - ymin) * (H - T - B);
  };
  // Grid and axis labels.
  for (int i = 0; i <= 4; ++i) {
    double y = ymin + (ymax - ymin) * i / 4.0;
    c.line(L, py(y), W - R, py(y), i == 0 ? 0x000000 : 0xdddddd);
    std::string s = fmt(std::round(y * 100) / 100);
    c.text(L - 8 - 6 * static_cast<int>(s.size()), static_cast<int>(py(y)) - 3,
           s, 0x333333);
  }
  for (int i = 0; i <= 5; ++i) {
    double x = xmin + (xmax - xmin) * i / 5.0;
    c.line(px(x), T, px(x), H - B, i == 0 ? 0x000000 : 0xeeeeee);
    std::string s = fmt(std::round(x));
    c.text(static_cast<int>(px(x)) - 3 * static_cast<int>(s.size()), H - B + 8,
           s, 0x333333);
  }
  c.text(W / 2 - 12, H - 20, "step", 0x333333);
  // Series (eval accuracy gets point markers: it is sparse). With 0/1
  // rewards reward and rollout accuracy coincide, so reward is drawn wider
  // underneath.
  for (const auto &s : series) {
    int width = std::string(s.key) == "reward_mean" ? 4 : 2;
    for (size_t i = 1; i < s.pts.size(); ++i)
      c.line(px(s.pts[i - 1].first), py(s.pts[i - 1].second),
             px(s.pts[i].first), py(s.pts[i].second), s.color, width);
    if (std::string(s.key) == "eval_acc")
      for (const auto &p : s.pts)
        c.fillRect(static_cast<int>(px(p.first)) - 2,
                   static_cast<int>(py(p.second)) - 2,
                   static_cast<int>(px(p.first)) + 2,
                   static_cast<int>(py(p.second)) + 2, s.color);
  }
  // Legend.
  int lx = L + 10;
  for (const auto &s : series) {
    c.fillRect(lx, 14, lx + 14, 20, s.color);
    c.text(lx + 20, 14, s.label, 0x333333);
    lx += 20 + 6 * static_cast<int>(std::string(s.label).size()) + 24;
  }
  writeFileAtomic(path, c.png());
}

//===----------------------------------------------------------------------===//
// ProgressBar
//===----------------------------------------------------------------------===//

ProgressBar::ProgressBar(bool enabled)
    : enabled_(enabled), tty_(isatty(STDERR_FILENO) != 0) {}

void ProgressBar::update(const std::string &phase, int64_t done, int64_t total,
                         const std::string &status, bool force) {
  if (!enabled_)
    return;
  auto now = std::chrono::steady_clock::now();
  if (phase != phase_) {
    finish();
    phase_ = phase;
    phaseStart_ = now;
    phaseStartDone_ = done;
    force = true;
  }
  double since = std::chrono::duration<double>(now - lastPrint_).count();
  bool last = done >= total;
  if (!force && !last && since < (tty_ ? 0.1 : 10.0))
    return;
  lastPrint_ = now;
  const int width = 24;
  int filled = total > 0 ? static_cast<int>(width * done / total) : width;
  std::string bar(static_cast<size_t>(filled), '#');
  bar += std::string(static_cast<size_t>(width - filled), '.');
  double elapsed = std::chrono::duration<double>(now - phaseStart_).count();
  std::string eta;
  if (done > phaseStartDone_ && done < total) {
    double per = elapsed / static_cast<double>(done - phaseStartDone_);
    int secs = static_cast<int>(per * static_cast<double>(total - done));
    eta = " eta " + std::to_string(secs / 60) + "m" +
          (secs % 60 < 10 ? "0" : "") + std::to_string(secs % 60) + "s";
  }
  std::ostringstream os;
  os << phase << " " << done << "/" << total << " [" << bar << "] " << status
     << eta;
  if (tty_) {
    std::cerr << "\r\033[K" << os.str() << std::flush;
    open_ = true;
  } else {
    std::cerr << os.str() << "\n" << std::flush;
  }
}

void ProgressBar::finish() {
  if (open_) {
    std::cerr << "\n" << std::flush;
    open_ = false;
  }
}

void ProgressBar::message(const std::string &text) {
  if (open_)
    std::cerr << "\r\033[K";
  std::cerr << text << "\n" << std::flush;
  if (open_)
    open_ = false;
}

} // namespace cac::rt::train

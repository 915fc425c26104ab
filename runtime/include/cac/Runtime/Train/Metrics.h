//===- Metrics.h - JSONL/CSV metrics, progress bar, PNG plot ----*- C++ -*-===//
//
// What a run leaves in its output folder besides checkpoints:
//
//   metrics.jsonl  one JSON object per step (and one per RL-start eval)
//   metrics.csv    the same rows, fixed columns, empty cells for absent values
//   plot.png       reward, rollout accuracy and eval accuracy per step
//   samples.jsonl  what the model wrote: greedy eval completions at each eval
//
// The PNG is written by a tiny encoder here (stored deflate blocks, no zlib),
// with a 5x7 bitmap font for the axis labels and legend.
//
//===----------------------------------------------------------------------===//

#ifndef CAC_RUNTIME_TRAIN_METRICS_H
#define CAC_RUNTIME_TRAIN_METRICS_H

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace cac::rt::train {

/// The CSV columns, in order (JSON rows may hold a subset).
const std::vector<std::string> &metricColumns();

/// Metrics rows of a run, mirrored to metrics.jsonl and metrics.csv.
class MetricsLog {
public:
  /// Opens \p dir's metrics. With \p keepUpToStep >= 0 (a resumed run) the
  /// rows already there with step <= keepUpToStep are kept and the rest
  /// dropped (a killed run may have logged steps after its last
  /// checkpoint); a torn line is dropped (with a note on stderr) and the
  /// rows after it kept; otherwise the files start empty.
  MetricsLog(std::filesystem::path dir, int64_t keepUpToStep);
  /// Rows kept in memory only (the workers of a data-parallel run other
  /// than rank 0, which writes the files).
  MetricsLog() = default;

  /// Appends a row (written to both files at once); a failed write (a full
  /// disk) throws std::runtime_error naming the file.
  void append(const nlohmann::json &row);
  const std::vector<nlohmann::json> &rows() const { return rows_; }

  /// A row as a CSV line (no newline).
  static std::string csvLine(const nlohmann::json &row);

private:
  void rewrite();
  std::filesystem::path dir_;
  std::vector<nlohmann::json> rows_;
};

/// samples.jsonl: one JSON object per completion shown (the greedy
/// completions of the first `eval = greedy(.., samples = K)` eval problems
/// at every eval). A resumed run keeps the rows of steps up to its
/// checkpoint, as MetricsLog does. Text that is not valid UTF-8 (a byte-level
/// token cut inside a character) is written with U+FFFD in its place.
class SampleLog {
public:
  SampleLog(std::filesystem::path file, int64_t keepUpToStep);
  /// Writes nothing (data-parallel workers other than rank 0).
  SampleLog() = default;
  void append(const std::vector<nlohmann::json> &rows);

private:
  std::filesystem::path file_;
};

/// An RGB image with a few drawing primitives.
class Canvas {
public:
  Canvas(int width, int height, uint32_t background = 0xffffff);
  int width() const { return w_; }
  int height() const { return h_; }
  void set(int x, int y, uint32_t rgb);
  uint32_t get(int x, int y) const;
  void line(double x0, double y0, double x1, double y1, uint32_t rgb,
            int thickness = 1);
  void fillRect(int x0, int y0, int x1, int y1, uint32_t rgb);
  /// 5x7 glyphs (digits, lowercase letters, a little punctuation), scaled.
  void text(int x, int y, const std::string &s, uint32_t rgb, int scale = 1);
  /// PNG file bytes (8-bit RGB, stored deflate).
  std::string png() const;

private:
  int w_, h_;
  std::vector<uint8_t> px_;
};

/// The bytes of a PNG of \p width x \p height 8-bit RGB pixels.
std::string encodePng(int width, int height, const std::vector<uint8_t> &rgb);

/// CRC-32 (PNG chunks) and Adler-32 (zlib stream).
uint32_t crc32(const uint8_t *data, size_t size, uint32_t crc = 0);
uint32_t adler32(const uint8_t *data, size_t size);

/// Draws reward_mean, acc (rollouts) and eval_acc per step of the RL rows of
/// \p rows and writes the PNG to \p path atomically.
void writePlot(const std::vector<nlohmann::json> &rows,
               const std::filesystem::path &path);

/// A one-line progress display on stderr: redrawn in place on a terminal,
/// printed as separate lines (at most every few seconds) otherwise.
class ProgressBar {
public:
  explicit ProgressBar(bool enabled);
  /// Shows \p phase's progress \p done / \p total and a free-form status.
  void update(const std::string &phase, int64_t done, int64_t total,
              const std::string &status, bool force = false);
  /// Ends the current line.
  void finish();
  /// Prints a message on its own line (clearing the bar first).
  void message(const std::string &text);

private:
  bool enabled_, tty_;
  bool open_ = false;
  std::chrono::steady_clock::time_point lastPrint_, phaseStart_;
  std::string phase_;
  int64_t phaseStartDone_ = 0;
};

} // namespace cac::rt::train

#endif // CAC_RUNTIME_TRAIN_METRICS_H

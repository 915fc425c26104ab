//===- safetensors-test.cpp - Safetensors reading and writing -------------===//

#include "test-util.h"

#include "cac/Runtime/Model/Generation.h"
#include "cac/Runtime/Model/Safetensors.h"

#include <nlohmann/json.hpp>
#include <sys/stat.h>

namespace fs = std::filesystem;
using namespace cac::rt;
using namespace cac::rt::test;

namespace {

/// A safetensors file from a literal header and data section.
std::string rawFile(const std::string &header, const std::string &data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

/// The bytes of a float array.
std::string floatBytes(std::initializer_list<float> values) {
  std::string s;
  for (float v : values)
    s.append(reinterpret_cast<const char *>(&v), sizeof v);
  return s;
}

NamedTensors sampleTensors() {
  at::Generator gen = makeGenerator(7);
  NamedTensors t;
  t["a.f32"] = at::randn({2, 3}, gen);
  t["b.f64"] = at::randn({4}, gen).to(at::kDouble);
  t["c.f16"] = at::randn({3, 2}, gen).to(at::kHalf);
  t["d.bf16"] = at::randn({5}, gen).to(at::kBFloat16);
  t["e.i64"] = at::arange(-3, 3, at::kLong).view({2, 3});
  t["f.i32"] = at::arange(0, 7, at::kInt);
  t["g.i16"] = at::arange(-2, 2, at::kShort);
  t["h.i8"] = at::arange(-4, 4, at::kChar);
  t["i.u8"] = at::arange(250, 256, at::kInt).to(at::kByte);
  t["j.bool"] = at::tensor({1, 0, 1}, at::kInt).to(at::kBool);
  t["k.scalar"] = at::scalar_tensor(3.5, at::kFloat);
  t["l.empty"] = at::zeros({0, 4});
  // A non-contiguous view must be written by value, not by storage.
  t["m.transposed"] = at::arange(6, at::kFloat).view({2, 3}).t();
  return t;
}

} // namespace

TEST(Safetensors, RoundTripEveryDType) {
  TempDir dir;
  fs::path file = dir / "t.safetensors";
  NamedTensors in = sampleTensors();
  saveSafetensors(file, in, {{"format", "pt"}, {"note", "hello"}});
  EXPECT_FALSE(fs::exists(dir / "t.safetensors.tmp"));

  SafetensorsReader reader(file);
  std::vector<std::string> names;
  for (const auto &[n, t] : in)
    names.push_back(n);
  EXPECT_EQ(reader.names(), names);
  EXPECT_EQ(reader.metadata().at("note"), "hello");
  EXPECT_EQ(reader.entry("c.f16").dtypeName, "F16");
  EXPECT_EQ(reader.entry("d.bf16").dtypeName, "BF16");
  EXPECT_EQ(reader.entry("j.bool").dtypeName, "BOOL");
  EXPECT_EQ(reader.entry("k.scalar").shape, std::vector<int64_t>{});
  for (const auto &[name, t] : in) {
    at::Tensor raw = reader.readRaw(name);
    EXPECT_EQ(raw.scalar_type(), t.scalar_type()) << name;
    EXPECT_EQ(raw.sizes(), t.sizes()) << name;
    EXPECT_TRUE(at::equal(raw, t)) << name;
  }
  // read() widens floating point to float32 and keeps integers.
  EXPECT_EQ(reader.read("c.f16").scalar_type(), at::kFloat);
  EXPECT_EQ(reader.read("b.f64").scalar_type(), at::kFloat);
  EXPECT_EQ(reader.read("e.i64").scalar_type(), at::kLong);
  EXPECT_TRUE(at::equal(reader.read("d.bf16"), in["d.bf16"].to(at::kFloat)));
  EXPECT_EQ(loadSafetensors(file).size(), in.size());
}

TEST(Safetensors, LayoutFollowsTheFormat) {
  TempDir dir;
  fs::path file = dir / "t.safetensors";
  NamedTensors in;
  in["x"] = at::tensor({1.0f, 2.0f});
  saveSafetensors(file, in);
  std::string bytes = readFile(file);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ((8 + n) % 8, 0u) << "data must start 8-byte aligned";
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["x"]["dtype"], "F32");
  EXPECT_EQ(header["x"]["data_offsets"], nlohmann::json::array({0, 8}));
  EXPECT_EQ(bytes.substr(8 + n), floatBytes({1.0f, 2.0f}));
}

TEST(Safetensors, ReadsAHandWrittenFile) {
  TempDir dir;
  fs::path file = dir / "hand.safetensors";
  writeFile(file, rawFile(R"({"w":{"dtype":"F32","shape":[2],)"
                          R"("data_offsets":[0,8]},"__metadata__":{"k":"v"}})",
                          floatBytes({0.5f, -1.5f})));
  SafetensorsReader reader(file);
  EXPECT_TRUE(at::equal(reader.read("w"), at::tensor({0.5f, -1.5f})));
  EXPECT_EQ(reader.metadata().at("k"), "v");
  EXPECT_FALSE(reader.contains("__metadata__"));
}

TEST(Safetensors, ReadIntoChecksShapeAndConverts) {
  TempDir dir;
  fs::path file = dir / "t.safetensors";
  NamedTensors in;
  in["w"] = at::tensor({1.0f, 2.0f, 3.0f}).view({1, 3});
  saveSafetensors(file, in);
  SafetensorsReader reader(file);
  at::Tensor dst = at::zeros({1, 3}, at::kDouble);
  // Another dtype goes through one buffer of the stored bytes.
  EXPECT_EQ(reader.readInto("w", dst), 12u);
  EXPECT_TRUE(at::equal(dst, in["w"].to(at::kDouble)));
  // The stored dtype on the CPU is read in place, and the write is seen
  // (version counter) as copy_'s would be.
  at::Tensor same = at::zeros({1, 3});
  uint32_t before = same._version();
  EXPECT_EQ(reader.readInto("w", same), 0u);
  EXPECT_TRUE(at::equal(same, in["w"]));
  EXPECT_GT(same._version(), before);
  // A non-contiguous destination is staged too.
  at::Tensor wide = at::zeros({3, 2}).narrow(1, 0, 1).t();
  EXPECT_EQ(reader.readInto("w", wide), 12u);
  EXPECT_TRUE(at::equal(wide, in["w"]));
  EXPECT_ERROR([&] { reader.readInto("w", at::zeros({3})); },
               {file.string(), "'w'", "[1, 3]", "expected [3]"});
  EXPECT_ERROR([&] { reader.read("nope"); },
               {file.string(), "no tensor named 'nope'"});
}

TEST(Safetensors, OverwritesAtomically) {
  TempDir dir;
  fs::path file = dir / "t.safetensors";
  NamedTensors a, b;
  a["x"] = at::ones({3});
  b["y"] = at::zeros({2});
  saveSafetensors(file, a);
  saveSafetensors(file, b);
  SafetensorsReader reader(file);
  EXPECT_EQ(reader.names(), std::vector<std::string>{"y"});
  EXPECT_FALSE(fs::exists(dir / "t.safetensors.tmp"));
  // A failed save leaves the old file and no temporary behind.
  NamedTensors bad;
  bad["__metadata__"] = at::ones({1});
  EXPECT_ERROR([&] { saveSafetensors(file, bad); }, {"__metadata__"});
  EXPECT_EQ(SafetensorsReader(file).names(), std::vector<std::string>{"y"});
}

TEST(Safetensors, TruncatedFiles) {
  TempDir dir;
  fs::path file = dir / "t.safetensors";
  writeFile(file, "abc");
  EXPECT_ERROR([&] { SafetensorsReader r(file); },
               {file.string(), "truncated", "3 bytes"});

  // The header length points past the end of the file.
  std::string good = rawFile(
      R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
      floatBytes({1, 2}));
  writeFile(file, good.substr(0, 20));
  EXPECT_ERROR([&] { SafetensorsReader r(file); },
               {file.string(), "bad header length"});

  // Complete header, data cut short.
  writeFile(file, good.substr(0, good.size() - 3));
  EXPECT_ERROR([&] { SafetensorsReader r(file); },
               {file.string(), "tensor 'w'", "out of range", "truncated"});

  // A real file written by saveSafetensors, then cut.
  NamedTensors in;
  in["big"] = at::ones({64});
  saveSafetensors(file, in);
  truncateFile(file, fs::file_size(file) - 1);
  EXPECT_ERROR([&] { SafetensorsReader r(file); },
               {file.string(), "tensor 'big'", "out of range"});
}

TEST(Safetensors, BadHeaders) {
  TempDir dir;
  fs::path file = dir / "t.safetensors";
  auto expectBad = [&](const std::string &header, const std::string &data,
                       std::initializer_list<std::string> parts) {
    SCOPED_TRACE(header);
    writeFile(file, rawFile(header, data));
    std::string msg = errorOf([&] { SafetensorsReader r(file); });
    EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
    for (const std::string &p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << msg << "\nwants: " << p;
  };
  expectBad("{not json", "", {"not valid JSON"});
  expectBad("[1, 2]", "", {"not a JSON object"});
  expectBad(R"({"w": 3})", "", {"tensor 'w'", "not an object"});
  expectBad(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", floatBytes({1}),
            {"tensor 'w'", "'dtype'"});
  expectBad(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
            floatBytes({1}), {"tensor 'w'", "negative"});
  expectBad(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})",
            floatBytes({1}), {"tensor 'w'", "data_offsets"});
  expectBad(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})",
            floatBytes({1}), {"tensor 'w'", "data_offsets"});
  expectBad(R"({"__metadata__":{"k":1}})", "", {"__metadata__", "'k'"});
  // Header length beyond the 100 MB limit.
  std::string huge(8, '\xff');
  writeFile(file, huge + "{}");
  EXPECT_ERROR([&] { SafetensorsReader r(file); },
               {file.string(), "bad header length"});
}

TEST(Safetensors, BadOffsets) {
  TempDir dir;
  fs::path file = dir / "t.safetensors";
  std::string data = floatBytes({1, 2, 3, 4});
  writeFile(file, rawFile(
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", data));
  EXPECT_ERROR([&] { SafetensorsReader r(file); },
               {file.string(), "tensor 'w'", "reversed"});
  writeFile(file, rawFile(
      R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", data));
  EXPECT_ERROR([&] { SafetensorsReader r(file); },
               {file.string(), "tensor 'w'", "needs 8 bytes",
                "data_offsets span 4"});
  writeFile(file, rawFile(
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[12,20]}})", data));
  EXPECT_ERROR([&] { SafetensorsReader r(file); },
               {file.string(), "out of range", "16 bytes"});
  writeFile(file,
            rawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                    data));
  EXPECT_ERROR([&] { SafetensorsReader r(file); },
               {file.string(), "'a' and 'b' overlap"});
  // Shape whose byte count overflows 64 bits.
  writeFile(file, rawFile(R"({"w":{"dtype":"F32","shape":[4294967296,)"
                          R"(4294967296],"data_offsets":[0,4]}})",
                          data));
  EXPECT_ERROR([&] { SafetensorsReader r(file); },
               {file.string(), "tensor 'w'", "too many"});
}

TEST(Safetensors, WrongDTypes) {
  TempDir dir;
  fs::path file = dir / "t.safetensors";
  std::string data = floatBytes({1, 2});
  writeFile(file, rawFile(
      R"({"w":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,8]}})", data));
  EXPECT_ERROR([&] { SafetensorsReader r(file); },
               {file.string(), "tensor 'w'", "unsupported dtype 'Q4_K'"});
  writeFile(file, rawFile(
      R"({"w":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", data));
  EXPECT_ERROR([&] { SafetensorsReader r(file); },
               {file.string(), "tensor 'w'", "dtype"});
  // A dtype whose element size disagrees with the byte range.
  writeFile(file, rawFile(
      R"({"w":{"dtype":"I64","shape":[2],"data_offsets":[0,8]}})", data));
  EXPECT_ERROR([&] { SafetensorsReader r(file); },
               {file.string(), "I64", "needs 16 bytes"});
  EXPECT_ERROR([] { safetensorsDTypeFromName("F8_E4M3"); }, {"F8_E4M3"});
  // Quantized checkpoints are named as such, with the file and the tensor.
  for (const char *q : {"F8_E4M3", "F8_E5M2", "I4", "F4"}) {
    writeFile(file, rawFile(std::string(R"({"w":{"dtype":")") + q +
                                R"(","shape":[2],"data_offsets":[0,8]}})",
                            data));
    EXPECT_ERROR([&] { SafetensorsReader r(file); },
                 {file.string(), "tensor 'w'",
                  std::string("quantized dtype '") + q + "' is not supported",
                  "BF16, F16 or F32"});
  }
  NamedTensors complex;
  complex["c"] = at::zeros({2}, at::kComplexFloat);
  EXPECT_ERROR([&] { saveSafetensors(dir / "c.safetensors", complex); },
               {"tensor 'c'", "cannot store dtype"});
}

TEST(Safetensors, MissingFile) {
  TempDir dir;
  EXPECT_ERROR([&] { SafetensorsReader r(dir / "none.safetensors"); },
               {"none.safetensors", "cannot open"});
  EXPECT_ERROR([&] { SafetensorsReader r(dir.path()); },
               {"not a regular file"});
  // A FIFO is refused at once, not waited on for a writer.
  ASSERT_EQ(mkfifo((dir / "fifo.safetensors").c_str(), 0600), 0);
  EXPECT_ERROR([&] { SafetensorsReader r(dir / "fifo.safetensors"); },
               {"fifo.safetensors", "not a regular file"});
  EXPECT_ERROR([&] { SafetensorsReader r("/dev/zero"); },
               {"/dev/zero", "not a regular file"});
}

// safetensors: round trips of every dtype, a file laid out byte by byte as the Python writer lays it
// out, one hostile file per defect class (each must give ridge::Error naming the defect), atomic writes.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "common/tmpdir.hpp"
#include "ridge/model/safetensors.hpp"

namespace {

using namespace ridge;
using namespace ridge::model;
using ridge::test::TempDir;

// header length (u64 LE) + header + data, exactly the file layout, built independently of the writer.
std::string raw_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

std::string expect_load_error(const std::string& path) {
  try {
    SafetensorsFile::load(path);
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("safetensors file '" + path + "': ", 0), 0u) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  }
  ADD_FAILURE() << "loaded " << path;
  return "";
}

void expect_contains(const std::string& msg, const std::string& part) {
  EXPECT_NE(msg.find(part), std::string::npos) << "'" << msg << "' lacks '" << part << "'";
}

TEST(Safetensors, EveryDtypeRoundTripsBitExactly) {
  TempDir dir;
  std::mt19937 rng(7);
  const DType all[] = {DType::f64,      DType::f32,      DType::bf16, DType::fp16,
                       DType::fp8_e4m3, DType::fp8_e5m2, DType::i8,   DType::i32};
  std::vector<std::vector<unsigned char>> buffers;
  std::vector<std::vector<int64_t>> shapes = {{3, 5}, {7}, {2, 3, 4}, {}, {0, 4}, {1, 1, 1, 9}, {13}, {4, 4}};
  SafetensorsWriter w;
  for (size_t i = 0; i < std::size(all); ++i) {
    int64_t n = 1;
    for (int64_t d : shapes[i]) n *= d;
    std::vector<unsigned char> b(static_cast<size_t>(n) * dtype_size(all[i]));
    for (auto& c : b) c = static_cast<unsigned char>(rng());
    buffers.push_back(b);
    w.add(std::string("t.") + dtype_name(all[i]), all[i], shapes[i], buffers.back().data());
  }
  w.set_metadata("step", "12");
  w.set_metadata("note", "a \"quoted\" value");
  const std::string path = dir.file("all.safetensors");
  w.write(path);

  const auto f = SafetensorsFile::load(path);
  ASSERT_EQ(f.names().size(), std::size(all));
  for (size_t i = 0; i < std::size(all); ++i) {
    const std::string name = std::string("t.") + dtype_name(all[i]);
    EXPECT_EQ(f.names()[i], name);  // written in the order added, read in the order of the data
    const auto& e = f.at(name);
    EXPECT_EQ(e.dtype, all[i]);
    EXPECT_EQ(e.shape, shapes[i]);
    ASSERT_EQ(e.bytes, buffers[i].size());
    if (e.bytes > 0) {
      EXPECT_EQ(std::memcmp(e.data, buffers[i].data(), e.bytes), 0) << name;
    }
  }
  EXPECT_EQ(f.metadata().at("step"), "12");
  EXPECT_EQ(f.metadata().at("note"), "a \"quoted\" value");
  // The data section starts 8-byte aligned, as the Python writer makes it.
  const std::string bytes = ridge::test::read_bytes(path);
  uint64_t hlen = 0;
  std::memcpy(&hlen, bytes.data(), 8);
  EXPECT_EQ(hlen % 8, 0u);
}

TEST(Safetensors, ConversionsToFloatAndDouble) {
  TempDir dir;
  const std::vector<double> d = {1.5, -2.25, 1e-300};
  const std::vector<float> f = {3.0f, -0.125f};
  const std::vector<bf16> b = {to_bf16(1.0f), to_bf16(-3.5f)};
  const std::vector<fp16> h = {to_fp16(0.5f), to_fp16(65504.0f)};
  const std::vector<int32_t> i = {-7, 1 << 20};
  SafetensorsWriter w;
  w.add("d", DType::f64, {3}, d.data());
  w.add("f", DType::f32, {2}, f.data());
  w.add("b", DType::bf16, {2}, b.data());
  w.add("h", DType::fp16, {2}, h.data());
  w.add("i", DType::i32, {2}, i.data());
  w.write(dir.file("c.safetensors"));
  const auto r = SafetensorsFile::load(dir.file("c.safetensors"));
  EXPECT_EQ(r.to_f64("d"), d);
  EXPECT_EQ(r.to_f32("f"), f);
  EXPECT_EQ(r.to_f32("b"), (std::vector<float>{1.0f, -3.5f}));
  EXPECT_EQ(r.to_f64("h"), (std::vector<double>{0.5, 65504.0}));
  EXPECT_EQ(r.to_f64("i"), (std::vector<double>{-7.0, 1048576.0}));
  EXPECT_EQ(r.to_f32("d")[1], -2.25f);
  try {
    r.at("missing");
    ADD_FAILURE();
  } catch (const Error& e) {
    expect_contains(e.what(), "c.safetensors");
    expect_contains(e.what(), "'missing'");
  }
  EXPECT_FALSE(r.contains("missing"));
  EXPECT_TRUE(r.contains("h"));
}

// The layout Python's safetensors writes: compact JSON, __metadata__ first, keys not in data order,
// header padded with spaces to a multiple of 8, little-endian data.
TEST(Safetensors, ReadsAFileLaidOutAsPythonWritesIt) {
  TempDir dir;
  std::string header =
      R"({"__metadata__":{"format":"pt"},"bias":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
      R"("weight":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  // weight bf16 [[1, -2], [0.5, 3]] = 0x3F80 0xC000 0x3F00 0x4040; bias f32 [1.25, -4] = 0x3FA00000
  // 0xC0800000.
  const std::string data(
      "\x80\x3F\x00\xC0\x00\x3F\x40\x40"
      "\x00\x00\xA0\x3F\x00\x00\x80\xC0",
      16);
  const std::string path = dir.file("py.safetensors");
  ridge::test::write_bytes(path, raw_file(header, data));
  const auto f = SafetensorsFile::load(path);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(f.at("weight").dtype, DType::bf16);
  EXPECT_EQ(f.at("weight").shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(f.to_f32("weight"), (std::vector<float>{1.0f, -2.0f, 0.5f, 3.0f}));
  EXPECT_EQ(f.to_f32("bias"), (std::vector<float>{1.25f, -4.0f}));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.at("bias").numel(), 2);
}

struct Defect {
  const char* what;
  std::string file;
  const char* expect;  // a part of the message that names the defect
};

TEST(Safetensors, EachDefectClassIsOneClearError) {
  TempDir dir;
  const std::string ok_data(8, '\0');
  auto one = [&](const std::string& entry, const std::string& data = std::string(8, '\0')) {
    return raw_file(R"({"x":)" + entry + "}", data);
  };
  std::string huge_len(8, '\xFF');
  const std::vector<Defect> defects = {
      {"empty", "", "shorter than the 8-byte header length"},
      {"short", "abc", "shorter than the 8-byte header length"},
      {"header past end", huge_len + "{}", "runs past the end of the file"},
      {"header past end by one", raw_file("{}", "").substr(0, 9), "runs past the end"},
      {"json syntax", raw_file(R"({"x": {"dtype": "F32",)", ok_data), "not valid JSON"},
      {"not an object", raw_file("[1,2]", ""), "not a JSON object"},
      {"deep nesting", raw_file(std::string(100000, '[') + std::string(100000, ']'), ""), "nests deeper"},
      {"unknown dtype", one(R"({"dtype":"F4","shape":[2],"data_offsets":[0,8]})"), "unknown dtype 'F4'"},
      {"unsupported dtype", one(R"({"dtype":"U64","shape":[1],"data_offsets":[0,8]})"),
       "unknown dtype 'U64'"},
      {"byte count", one(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"),
       "hold 8 bytes but F32 [3] needs 12"},
      {"outside", one(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})"), "outside the 8 bytes of data"},
      {"reversed", one(R"({"dtype":"F32","shape":[0],"data_offsets":[8,0]})"), "end before they begin"},
      {"overlap",
       raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                ok_data),
       "'a' and 'b' overlap"},
      {"duplicate",
       raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                ok_data),
       "'a' appears twice"},
      {"negative dim", one(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), "negative dimension -2"},
      {"float dim", one(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"), "not an integer"},
      {"numel overflow", one(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})"),
       "overflows"},
      {"bytes overflow", one(R"({"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]})"),
       "overflows"},
      {"negative offset", one(R"({"dtype":"F32","shape":[2],"data_offsets":[-8,0]})"), "non-negative"},
      {"missing offsets", one(R"({"dtype":"F32","shape":[2]})"), "data_offsets"},
      {"missing dtype", one(R"({"shape":[2],"data_offsets":[0,8]})"), "dtype"},
      {"entry not object", one("7"), "not an object"},
      {"metadata not strings", raw_file(R"({"__metadata__":{"step":3}})", ""), "not a string"},
  };
  for (size_t i = 0; i < defects.size(); ++i) {
    SCOPED_TRACE(defects[i].what);
    const std::string path = dir.file("bad" + std::to_string(i) + ".safetensors");
    ridge::test::write_bytes(path, defects[i].file);
    expect_contains(expect_load_error(path), defects[i].expect);
  }
}

// Every prefix of a valid file and every single-byte corruption of its header either loads or raises
// ridge::Error: never a crash, a hang or another exception.
TEST(Safetensors, TruncationsAndCorruptionsNeverCrash) {
  TempDir dir;
  const std::vector<float> x = {1, 2, 3};
  const std::vector<int32_t> y = {4, 5};
  SafetensorsWriter w;
  w.add("x", DType::f32, {3}, x.data());
  w.add("y", DType::i32, {1, 2}, y.data());
  w.set_metadata("k", "v");
  const std::string good = dir.file("good.safetensors");
  w.write(good);
  const std::string bytes = ridge::test::read_bytes(good);
  const std::string path = dir.file("mutant.safetensors");
  int loaded = 0, refused = 0;
  auto attempt = [&](const std::string& content) {
    ridge::test::write_bytes(path, content);
    try {
      const auto f = SafetensorsFile::load(path);
      for (const auto& n : f.names()) (void)f.to_f64(n);  // every entry readable within the mapping
      ++loaded;
    } catch (const Error&) {
      ++refused;
    }
  };
  for (size_t n = 0; n < bytes.size(); ++n) attempt(bytes.substr(0, n));
  EXPECT_EQ(loaded, 0);  // every proper prefix lacks data the header promises
  std::mt19937 rng(3);
  uint64_t hlen = 0;
  std::memcpy(&hlen, bytes.data(), 8);
  for (int i = 0; i < 300; ++i) {
    std::string m = bytes;
    const size_t at = rng() % (8 + hlen);
    m[at] = static_cast<char>(rng());
    attempt(m);
  }
  EXPECT_GT(refused, 0);
}

TEST(Safetensors, NonRegularFilesAreRefusedWithoutBlocking) {
  TempDir dir;
  expect_contains(expect_load_error(dir.path().string()), "not a regular file");
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_contains(expect_load_error(fifo), "not a regular file");  // opening it would block forever
  expect_contains(expect_load_error(dir.file("absent.safetensors")), "cannot open it");
}

TEST(Safetensors, WriterRejectsBadTensors) {
  SafetensorsWriter w;
  float x[2] = {1, 2};
  w.add("a", DType::f32, {2}, x);
  auto expect_add_error = [&](const std::string& name, std::vector<int64_t> shape, const void* data,
                              const std::string& part) {
    try {
      w.add(name, DType::f32, std::move(shape), data);
      ADD_FAILURE() << "accepted " << name;
    } catch (const Error& e) {
      expect_contains(e.what(), "SafetensorsWriter::add");
      expect_contains(e.what(), part);
    }
  };
  expect_add_error("a", {2}, x, "already added");
  expect_add_error("", {2}, x, "empty");
  expect_add_error("__metadata__", {2}, x, "reserved");
  expect_add_error("n", {-1}, x, "negative");
  expect_add_error("o", {int64_t{1} << 40, int64_t{1} << 40}, x, "overflows");
  expect_add_error("p", {2}, nullptr, "null");
}

TEST(Safetensors, AFailedWriteLeavesNothingBehindAndKeepsTheOldFile) {
  TempDir dir;
  float x[3] = {1, 2, 3};
  SafetensorsWriter w;
  w.add("x", DType::f32, {3}, x);

  const std::string missing = dir.file("no/such/dir/out.safetensors");
  try {
    w.write(missing);
    ADD_FAILURE() << "wrote into a missing directory";
  } catch (const Error& e) {
    expect_contains(e.what(), "safetensors write '" + missing + "'");
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("no")));

  // An existing file survives a write that fails: the directory is made read-only so the temporary file
  // cannot be created (root ignores permissions, so this part only runs for other users).
  const std::string keep = dir.file("ro/keep.safetensors");
  std::filesystem::create_directory(dir.file("ro"));
  w.write(keep);
  const std::string before = ridge::test::read_bytes(keep);
  SafetensorsWriter w2;
  float y[1] = {9};
  w2.add("y", DType::f32, {1}, y);
  if (::geteuid() != 0) {
    ::chmod(dir.file("ro").c_str(), 0500);
    EXPECT_THROW(w2.write(keep), Error);
    ::chmod(dir.file("ro").c_str(), 0700);
    EXPECT_EQ(ridge::test::read_bytes(keep), before);
  }
  // A target that is a directory: the write fails, the directory and its contents are untouched, and
  // no temporary is left beside it.
  std::filesystem::create_directory(dir.file("ro/sub"));
  ridge::test::write_bytes(dir.file("ro/sub/inner"), "inner");
  try {
    w2.write(dir.file("ro/sub"));
    ADD_FAILURE() << "wrote over a directory";
  } catch (const Error& e) {
    expect_contains(e.what(), "is a folder");
  }
  EXPECT_EQ(ridge::test::read_bytes(dir.file("ro/sub/inner")), "inner");
  size_t entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("ro"))) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 2u);  // keep.safetensors and sub, no temporary
  // A successful overwrite replaces the file whole.
  w2.write(keep);
  EXPECT_EQ(SafetensorsFile::load(keep).to_f32("y"), std::vector<float>{9});
}

}  // namespace

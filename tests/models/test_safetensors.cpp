// models/io/safetensors.h: round trips for every dtype (0-d, empty, metadata, many tensors), a
// file laid out byte for byte as Python's safetensors writes it, every malformed case and its
// message, truncation at every length and seeded byte flips (open() succeeds consistently or
// throws strata::Error, never reads outside the file), and the writer's errors and atomic
// replace.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "models/io/safetensors.h"

namespace strata::models {
namespace {

namespace fs = std::filesystem;

using Bytes = std::vector<std::byte>;

bool contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

#define EXPECT_HAS(s, part) \
  EXPECT_TRUE(contains((s), (part))) << "'" << (s) << "' lacks '" << (part) << "'"

// Deterministic bytes: `n` bytes starting from `seed` (splitmix64), the same on every host.
std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

Bytes pattern(std::size_t n, std::uint64_t seed) {
  Bytes out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>(splitmix64(seed));
  return out;
}

// A file as the spec lays it out: u64 LE header size, the header, then the data area. With
// `pad`, the header is padded with spaces to a multiple of 8 (as every writer does).
Bytes file_bytes(std::string header, const Bytes& data, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  Bytes out(8);
  const std::uint64_t n = header.size();
  for (int b = 0; b < 8; ++b) out[static_cast<std::size_t>(b)] = std::byte((n >> (8 * b)) & 0xFF);
  for (const char c : header) out.push_back(static_cast<std::byte>(c));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

Bytes read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::vector<char> chars{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  Bytes out(chars.size());
  std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "strata_safetensors_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static void write_file(const std::string& p, const Bytes& bytes) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(f.good()) << p;
  }

  // The names in the test folder (to check that no temporary file is left behind).
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  // Runs f, expects a strata::Error, and returns it.
  template <typename F>
  static Error expect_error(F&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e;
    }
    ADD_FAILURE() << "no strata::Error thrown";
    return Error("none");
  }

  // Writes `bytes` as a file and expects open() to reject it with a message containing
  // `needle` and naming the path. Returns the Error for further checks.
  Error expect_rejected(const Bytes& bytes, std::string_view needle) {
    const std::string p = path("bad.safetensors");
    write_file(p, bytes);
    const Error e = expect_error([&] { (void)SafetensorsFile::open(p); });
    EXPECT_HAS(std::string(e.what()), needle);
    EXPECT_HAS(e.where(), p);
    return e;
  }

  // The same for a header with a data area.
  Error expect_rejected(const std::string& header, const Bytes& data, std::string_view needle) {
    SCOPED_TRACE(header);
    return expect_rejected(file_bytes(header, data), needle);
  }

  fs::path dir_;
};

// ---- dtypes -----------------------------------------------------------------------------------

TEST(TensorDTypeTest, NamesSizesAndConversions) {
  struct Row {
    TensorDType dtype;
    const char* name;
    std::size_t size;
  };
  const Row rows[] = {{TensorDType::f32, "F32", 4},
                      {TensorDType::f16, "F16", 2},
                      {TensorDType::bf16, "BF16", 2},
                      {TensorDType::i32, "I32", 4},
                      {TensorDType::i64, "I64", 8}};
  for (const Row& r : rows) {
    EXPECT_EQ(tensor_dtype_name(r.dtype), r.name);
    EXPECT_EQ(tensor_dtype_size(r.dtype), r.size);
    EXPECT_EQ(parse_tensor_dtype(r.name), r.dtype);
  }
  EXPECT_FALSE(parse_tensor_dtype("F64"));
  EXPECT_FALSE(parse_tensor_dtype("f32"));  // names are exact
  EXPECT_FALSE(parse_tensor_dtype(""));
  EXPECT_EQ(to_dtype(TensorDType::f32), DType::f32);
  EXPECT_EQ(to_dtype(TensorDType::f16), DType::f16);
  EXPECT_EQ(to_dtype(TensorDType::bf16), DType::bf16);
  EXPECT_FALSE(to_dtype(TensorDType::i32));
  EXPECT_FALSE(to_dtype(TensorDType::i64));
  for (const DType d : {DType::f32, DType::f16, DType::bf16}) {
    EXPECT_EQ(to_dtype(to_tensor_dtype(d)), d);
  }
}

// ---- round trips ------------------------------------------------------------------------------

struct Spec {
  std::string name;
  TensorDType dtype;
  std::vector<std::int64_t> shape;
};

std::uint64_t numel_of(const std::vector<std::int64_t>& shape) {
  std::uint64_t n = 1;
  for (const std::int64_t d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

// Writes `specs` (with pattern data) and `metadata`, opens the file and checks everything.
void round_trip(const std::string& p, const std::vector<Spec>& specs,
                const std::map<std::string, std::string>& metadata) {
  std::vector<Bytes> data;
  SafetensorsWriter writer;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const Spec& s = specs[i];
    data.push_back(pattern(numel_of(s.shape) * tensor_dtype_size(s.dtype), 1000 + i));
    writer.add(s.name, s.dtype, s.shape, std::span<const std::byte>(data.back()));
  }
  for (const auto& [key, value] : metadata) writer.metadata(key, value);
  writer.write(p);

  const SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(f.path(), p);
  EXPECT_EQ(f.metadata(), metadata);
  ASSERT_EQ(f.tensors().size(), specs.size());
  // tensors() is in offset order (empty tensors may share an offset, in any order).
  for (std::size_t i = 1; i < f.tensors().size(); ++i) {
    const TensorInfo& a = f.tensors()[i - 1];
    const TensorInfo& b = f.tensors()[i];
    EXPECT_TRUE(a.begin < b.begin || (a.begin == b.begin && a.end <= b.end))
        << a.name << " before " << b.name;
  }
  // The writer lays tensors out back to back in the order added.
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const Spec& s = specs[i];
    SCOPED_TRACE(s.name);
    const TensorInfo* found = f.find(s.name);
    ASSERT_NE(found, nullptr);
    const TensorInfo& t = *found;
    EXPECT_EQ(t.name, s.name);
    EXPECT_EQ(t.dtype, s.dtype);
    EXPECT_EQ(t.shape, s.shape);
    EXPECT_EQ(t.numel, numel_of(s.shape));
    EXPECT_EQ(t.begin, offset);
    EXPECT_EQ(t.end, offset + data[i].size());
    offset = t.end;
    const std::span<const std::byte> got = f.bytes(t);
    ASSERT_EQ(got.size(), data[i].size());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), data[i].begin()));
  }
  EXPECT_EQ(f.find("absent"), nullptr);
  EXPECT_EQ(f.find(""), nullptr);
  EXPECT_EQ(f.find("__metadata__"), nullptr);

  // Header size is a multiple of 8 and the file is exactly 8 + header + data.
  const Bytes raw = read_file(p);
  ASSERT_GE(raw.size(), 8u);
  std::uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, raw.data(), 8);
  EXPECT_EQ(header_bytes % 8, 0u);
  EXPECT_EQ(raw.size(), 8 + header_bytes + offset);
}

TEST_F(SafetensorsTest, RoundTripEveryDType) {
  round_trip(path("dtypes.safetensors"),
             {{"f32", TensorDType::f32, {3, 5}},
              {"f16", TensorDType::f16, {7}},
              {"bf16", TensorDType::bf16, {2, 3, 4}},
              {"i32", TensorDType::i32, {1, 9}},
              {"i64", TensorDType::i64, {5}}},
             {});
}

TEST_F(SafetensorsTest, RoundTripScalarEmptyAndMetadata) {
  round_trip(path("odd.safetensors"),
             {{"scalar", TensorDType::f32, {}},
              {"empty", TensorDType::bf16, {4, 0, 3}},
              {"also.empty", TensorDType::i64, {0}},
              {"after", TensorDType::f16, {3}},
              {"scalar.i64", TensorDType::i64, {}},
              {"last.empty", TensorDType::f32, {0, 2}}},
             {{"format", "pt"}, {"note", "ünïcødé ✓"}, {"empty", ""}});
}

TEST_F(SafetensorsTest, RoundTripManyTensors) {
  std::vector<Spec> specs;
  const TensorDType dtypes[] = {TensorDType::f32, TensorDType::f16, TensorDType::bf16,
                                TensorDType::i32, TensorDType::i64};
  for (int i = 0; i < 600; ++i) {
    specs.push_back({"layer." + std::to_string(i) + ".weight", dtypes[i % 5],
                     {static_cast<std::int64_t>(i % 7), static_cast<std::int64_t>(1 + i % 3)}});
  }
  round_trip(path("many.safetensors"), specs, {{"k", "v"}});
}

TEST_F(SafetensorsTest, NoTensorsAtAll) {
  round_trip(path("none.safetensors"), {}, {});
  round_trip(path("meta.safetensors"), {}, {{"only", "metadata"}});
}

TEST_F(SafetensorsTest, MovedFileKeepsItsMapping) {
  const Bytes d = pattern(16, 7);
  SafetensorsWriter w;
  w.add("x", TensorDType::i32, {4}, std::span<const std::byte>(d));
  w.write(path("m.safetensors"));
  SafetensorsFile a = SafetensorsFile::open(path("m.safetensors"));
  SafetensorsFile b = std::move(a);
  ASSERT_NE(b.find("x"), nullptr);
  const auto got = b.bytes(*b.find("x"));
  EXPECT_TRUE(std::equal(got.begin(), got.end(), d.begin(), d.end()));
  a = std::move(b);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), a.bytes(*a.find("x")).begin()));
}

// ---- a file as Python's safetensors writes it -------------------------------------------------

// safetensors.torch.save_file({"weight": torch.arange(6.).reshape(2, 3),
//                              "bias": torch.tensor([1, 2])}, path, metadata={"format": "pt"})
// writes compact JSON, __metadata__ first, tensors ordered by alignment then name (the I64
// first), the header padded with spaces to a multiple of 8.
TEST_F(SafetensorsTest, OpensAFileLaidOutAsPythonWritesIt) {
  const std::string json =
      R"({"__metadata__":{"format":"pt"},"bias":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
      R"("weight":{"dtype":"F32","shape":[2,3],"data_offsets":[16,40]}})";
  ASSERT_EQ(json.size(), 151u);
  Bytes raw = {std::byte{152}, std::byte{0}, std::byte{0}, std::byte{0},
               std::byte{0},   std::byte{0}, std::byte{0}, std::byte{0}};
  for (const char c : json) raw.push_back(static_cast<std::byte>(c));
  raw.push_back(std::byte{' '});  // 151 -> 152
  const std::int64_t bias[2] = {1, 2};
  const float weight[6] = {0, 1, 2, 3, 4, 5};
  const auto* b = reinterpret_cast<const std::byte*>(bias);
  const auto* w = reinterpret_cast<const std::byte*>(weight);
  raw.insert(raw.end(), b, b + sizeof bias);
  raw.insert(raw.end(), w, w + sizeof weight);
  ASSERT_EQ(raw.size(), 8u + 152 + 40);
  write_file(path("py.safetensors"), raw);

  const SafetensorsFile f = SafetensorsFile::open(path("py.safetensors"));
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].name, "bias");
  EXPECT_EQ(f.tensors()[1].name, "weight");
  const TensorInfo* tw = f.find("weight");
  ASSERT_NE(tw, nullptr);
  EXPECT_EQ(tw->dtype, TensorDType::f32);
  EXPECT_EQ(tw->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(tw->numel, 6u);
  EXPECT_EQ(tw->begin, 16u);
  EXPECT_EQ(tw->end, 40u);
  float got_w[6];
  ASSERT_EQ(f.bytes(*tw).size(), sizeof got_w);
  std::memcpy(got_w, f.bytes(*tw).data(), sizeof got_w);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(got_w[i], static_cast<float>(i));
  const TensorInfo* tb = f.find("bias");
  ASSERT_NE(tb, nullptr);
  EXPECT_EQ(tb->dtype, TensorDType::i64);
  std::int64_t got_b[2];
  ASSERT_EQ(f.bytes(*tb).size(), sizeof got_b);
  std::memcpy(got_b, f.bytes(*tb).data(), sizeof got_b);
  EXPECT_EQ(got_b[0], 1);
  EXPECT_EQ(got_b[1], 2);
  EXPECT_EQ(f.find("Weight"), nullptr);
}

TEST_F(SafetensorsTest, TensorsComeInOffsetOrderWhateverTheHeaderOrder) {
  // Header lists c, a, b; offsets put a first, then b (empty, sharing a's end), then c.
  const std::string header =
      R"({"c":{"dtype":"I32","shape":[2],"data_offsets":[8,16]},)"
      R"("a":{"dtype":"F16","shape":[4],"data_offsets":[0,8]},)"
      R"("b":{"data_offsets":[8,8],"shape":[0,5],"dtype":"F32"}})";  // any field order
  write_file(path("order.safetensors"), file_bytes(header, pattern(16, 3), /*pad=*/false));
  const SafetensorsFile f = SafetensorsFile::open(path("order.safetensors"));
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.tensors()[0].name, "a");
  EXPECT_EQ(f.tensors()[1].name, "b");
  EXPECT_EQ(f.tensors()[2].name, "c");
  EXPECT_TRUE(f.bytes(f.tensors()[1]).empty());
  EXPECT_TRUE(f.metadata().empty());
}

// ---- malformed files --------------------------------------------------------------------------

const Bytes kData8 = pattern(8, 11);  // one F32 [2] tensor's worth

std::string one(const std::string& entry) { return R"({"t":)" + entry + "}"; }

TEST_F(SafetensorsTest, RejectsBadSizeField) {
  for (std::size_t n = 0; n < 8; ++n) {
    expect_rejected(Bytes(n, std::byte{1}), "too short for the 8-byte header size");
  }
  // Header size 0.
  expect_rejected(file_bytes("", kData8, false), "outside (0, 100 MB]");
  // Header size larger than the file.
  Bytes big = file_bytes(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})"), kData8);
  big[0] = std::byte{0xF0};
  big[1] = std::byte{0x01};
  expect_rejected(big, "larger than the");
  // Absurd header size (> 100 MB), and all ones.
  Bytes absurd = big;
  absurd[3] = std::byte{0x10};  // 0x100001F0 > 1e8
  expect_rejected(absurd, "outside (0, 100 MB]");
  std::fill(absurd.begin(), absurd.begin() + 8, std::byte{0xFF});
  expect_rejected(absurd, "outside (0, 100 MB]");
}

TEST_F(SafetensorsTest, RejectsBadJson) {
  expect_rejected("{\"t\":", {}, "not valid JSON");
  expect_rejected("not json at all", {}, "not valid JSON");
  expect_rejected(std::string("{\"a\xff\":1}"), {}, "not valid JSON");  // not UTF-8
  expect_rejected("{} trailing", {}, "not valid JSON");  // only spaces may follow the JSON
  expect_rejected(std::string("{}\0\0\0\0\0\0", 8), {}, "not valid JSON");
  expect_rejected("[1,2]", {}, "a JSON array, not an object");
  expect_rejected("\"str\"", {}, "a JSON string, not an object");
  expect_rejected(std::string(200, '[') + std::string(200, ']'), {}, "nests deeper");
  // Duplicate tensor name: nlohmann would silently keep the last one.
  expect_rejected(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                  kData8, "key \"t\" twice");
  // ... or a duplicate field within an entry.
  expect_rejected(one(R"({"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]})"),
                  kData8, "key \"dtype\" twice");
}

TEST_F(SafetensorsTest, RejectsBadEntries) {
  Error e = expect_rejected(one("5"), kData8, "the entry is a JSON number, not an object");
  EXPECT_HAS(e.where(), "tensor \"t\"");
  expect_rejected(one("[0,8]"), kData8, "not an object");
  e = expect_rejected(one(R"({"dtype":"F32","shape":[2]})"), kData8, "no \"data_offsets\"");
  EXPECT_HAS(e.where(), "tensor \"t\"");
  expect_rejected(one(R"({"shape":[2],"data_offsets":[0,8]})"), kData8, "no \"dtype\"");
  expect_rejected(one(R"({"dtype":"F32","data_offsets":[0,8]})"), kData8, "no \"shape\"");
  expect_rejected(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1})"), kData8,
                  "unknown field \"extra\"");
  // Unknown dtype: the message lists what strata reads.
  e = expect_rejected(one(R"({"dtype":"F64","shape":[1],"data_offsets":[0,8]})"), kData8,
                      "unsupported dtype \"F64\"");
  EXPECT_HAS(std::string(e.what()), "F32, F16, BF16, I32 and I64");
  expect_rejected(one(R"({"dtype":"f32","shape":[2],"data_offsets":[0,8]})"), kData8,
                  "unsupported dtype");
  expect_rejected(one(R"({"dtype":4,"shape":[2],"data_offsets":[0,8]})"), kData8,
                  "dtype must be a string");
  // Shapes.
  expect_rejected(one(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), kData8,
                  "every dimension of shape must be a non-negative integer");
  expect_rejected(one(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"), kData8,
                  "every dimension of shape must be a non-negative integer");
  expect_rejected(one(R"({"dtype":"F32","shape":["2"],"data_offsets":[0,8]})"), kData8,
                  "every dimension of shape must be a non-negative integer");
  expect_rejected(one(R"({"dtype":"F32","shape":2,"data_offsets":[0,8]})"), kData8,
                  "shape must be an array");
  expect_rejected(
      one(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})"), kData8,
      "overflows 64 bits");
  expect_rejected(one(R"({"dtype":"I64","shape":[2305843009213693952],"data_offsets":[0,8]})"),
                  kData8, "overflows 64 bits");
  // Overflowing prefix hidden by a zero dimension.
  expect_rejected(
      one(R"({"dtype":"F32","shape":[18446744073709551615,0],"data_offsets":[0,0]})"), {},
      "overflows 64 bits");
  // Offsets.
  expect_rejected(one(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})"), kData8,
                  "end is before begin");
  expect_rejected(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})"), kData8,
                  "data_offsets must be [begin, end]");
  expect_rejected(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,-8]})"), kData8,
                  "data_offsets[1] (end) must be a non-negative integer");
  expect_rejected(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})"), pattern(5, 1),
                  "reach past the end of the data area (5 bytes)");
  expect_rejected(one(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), kData8,
                  "wrong byte size");
  expect_rejected(one(R"({"dtype":"BF16","shape":[2],"data_offsets":[0,8]})"), kData8,
                  "wrong byte size");
}

TEST_F(SafetensorsTest, RejectsBadLayout) {
  const Bytes d16 = pattern(16, 5);
  expect_rejected(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                  R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                  d16, "overlap tensor \"a\"");
  expect_rejected(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                  d16, "overlap");
  expect_rejected(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                  R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                  d16, "a hole");
  expect_rejected(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", d16, "a hole");
  expect_rejected(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", d16,
                  "trailing bytes");
  expect_rejected(R"({"__metadata__":{"k":"v"}})", d16, "trailing bytes");
}

TEST_F(SafetensorsTest, RejectsBadMetadata) {
  expect_rejected(R"({"__metadata__":{"format":"pt","step":5}})", {},
                  "__metadata__ value of \"step\" must be a string");
  expect_rejected(R"({"__metadata__":{"k":null}})", {}, "must be a string");
  expect_rejected(R"({"__metadata__":["a"]})", {}, "__metadata__ must be an object");
}

TEST_F(SafetensorsTest, RejectsMissingFileAndFolder) {
  const std::string missing = path("no_such.safetensors");
  Error e = expect_error([&] { (void)SafetensorsFile::open(missing); });
  EXPECT_HAS(std::string(e.what()), missing);
  EXPECT_HAS(std::string(e.what()), "cannot open");
  EXPECT_EQ(e.where(), missing);

  fs::create_directory(path("folder"));
  e = expect_error([&] { (void)SafetensorsFile::open(path("folder")); });
  EXPECT_HAS(std::string(e.what()), "not a regular file");
  EXPECT_EQ(e.where(), path("folder"));
}

// ---- robustness -------------------------------------------------------------------------------

// A valid file with several tensors (and metadata) to cut and corrupt.
Bytes sample_file(const std::string& p) {
  const Bytes a = pattern(6 * 4, 1), b = pattern(5 * 2, 2), c = pattern(8, 3), d = pattern(4, 4);
  SafetensorsWriter w;
  w.add("a.weight", TensorDType::f32, {2, 3}, std::span<const std::byte>(a));
  w.add("b", TensorDType::bf16, {5}, std::span<const std::byte>(b));
  w.add("empty", TensorDType::f16, {0, 4}, nullptr);
  w.add("c", TensorDType::i64, {}, std::span<const std::byte>(c));
  w.add("d", TensorDType::i32, {1, 1, 1}, std::span<const std::byte>(d));
  w.metadata("format", "pt");
  w.write(p);
  return read_file(p);
}

// open() on `raw` either throws strata::Error (returns false) or gives a file whose tensors
// cover its data area exactly, each bytes() span inside the file (returns true).
bool open_is_consistent(const std::string& p, const Bytes& raw) {
  try {
    const SafetensorsFile f = SafetensorsFile::open(p);
    EXPECT_GE(raw.size(), 8u);
    std::uint64_t header_bytes = 0;
    std::memcpy(&header_bytes, raw.data(), 8);
    EXPECT_LE(header_bytes, raw.size() - 8);
    const std::uint64_t data_bytes = raw.size() - 8 - header_bytes;
    std::uint64_t covered = 0;
    for (const TensorInfo& t : f.tensors()) {
      EXPECT_EQ(t.begin, covered) << t.name;
      EXPECT_LE(t.begin, t.end) << t.name;
      EXPECT_LE(t.end, data_bytes) << t.name;
      EXPECT_EQ(t.end - t.begin, t.numel * tensor_dtype_size(t.dtype)) << t.name;
      EXPECT_EQ(f.find(t.name), &t);
      covered = t.end;
      const std::span<const std::byte> s = f.bytes(t);
      EXPECT_EQ(s.size(), t.end - t.begin);
      // The span is where the file says: compare with the bytes on disk.
      const std::size_t at = 8 + header_bytes + t.begin;
      if (at + s.size() <= raw.size()) {
        EXPECT_TRUE(std::equal(s.begin(), s.end(), raw.begin() + static_cast<std::ptrdiff_t>(at)));
      } else {
        ADD_FAILURE() << "tensor " << t.name << " reaches past the file";
      }
    }
    EXPECT_EQ(covered, data_bytes);
    return true;
  } catch (const Error& e) {
    EXPECT_FALSE(std::string(e.what()).empty());
    return false;
  }
}

TEST_F(SafetensorsTest, TruncatedAtEveryLength) {
  const Bytes full = sample_file(path("full.safetensors"));
  const std::string p = path("cut.safetensors");
  for (std::size_t n = 0; n <= full.size(); ++n) {
    SCOPED_TRACE(n);
    const Bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    write_file(p, cut);
    // Only the whole file is valid: any cut loses header or data bytes.
    EXPECT_EQ(open_is_consistent(p, cut), n == full.size());
  }
}

TEST_F(SafetensorsTest, SeededByteFlipsNeverCrash) {
  const Bytes full = sample_file(path("full.safetensors"));
  std::uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, full.data(), 8);
  const std::string p = path("flipped.safetensors");
  std::uint64_t rng = 20241123;
  int opened = 0;
  for (int iter = 0; iter < 600; ++iter) {
    SCOPED_TRACE(iter);
    Bytes raw = full;
    const int flips = 1 + static_cast<int>(splitmix64(rng) % 3);
    for (int k = 0; k < flips; ++k) {
      const std::uint64_t r = splitmix64(rng);
      if (iter % 4 == 0) {
        // The size field: any byte, any value.
        raw[r % 8] ^= static_cast<std::byte>(1 + (r >> 8) % 255);
        continue;
      }
      const std::size_t at = 8 + (r >> 8) % header_bytes;
      const auto c = static_cast<char>(raw[at]);
      if (c >= '0' && c <= '9') {
        // A digit becomes another: shapes and offsets stay well-formed JSON but change.
        raw[at] = static_cast<std::byte>('0' + (r >> 40) % 10);
      } else {
        raw[at] ^= static_cast<std::byte>(1 + (r >> 40) % 255);
      }
    }
    write_file(p, raw);
    if (open_is_consistent(p, raw)) ++opened;
  }
  // Some flips are harmless (padding, a digit replaced by itself, a metadata value).
  EXPECT_GT(opened, 0);
  EXPECT_LT(opened, 600);
}

// ---- writer -----------------------------------------------------------------------------------

TEST_F(SafetensorsTest, WriterRejectsBadTensors) {
  const Bytes d = pattern(8, 1);
  SafetensorsWriter w;
  w.add("x", TensorDType::f32, {2}, std::span<const std::byte>(d));
  Error e = expect_error([&] { w.add("x", TensorDType::f32, {2}, d.data()); });
  EXPECT_HAS(std::string(e.what()), "added twice");
  EXPECT_HAS(e.where(), "\"x\"");
  e = expect_error([&] { w.add("y", TensorDType::f32, {2, -1}, d.data()); });
  EXPECT_HAS(std::string(e.what()), "negative dimension -1");
  expect_error([&] { w.add("", TensorDType::f32, {2}, d.data()); });
  expect_error([&] { w.add("__metadata__", TensorDType::f32, {2}, d.data()); });
  e = expect_error([&] { w.add(std::string("bad\xff"), TensorDType::f32, {2}, d.data()); });
  EXPECT_HAS(std::string(e.what()), "not valid UTF-8");
  e = expect_error(
      [&] { w.add("huge", TensorDType::f32, {std::int64_t{1} << 62, 8}, d.data()); });
  EXPECT_HAS(std::string(e.what()), "overflows 64 bits");
  e = expect_error([&] { w.add("z", TensorDType::f32, {3}, std::span<const std::byte>(d)); });
  EXPECT_HAS(std::string(e.what()), "the data has 8 bytes, dtype and shape need 12");
  expect_error([&] { w.metadata(std::string("k\xc3"), "v"); });
  // A rejected add leaves nothing behind: "z" and "y" can still be added, and the file
  // holds exactly what was accepted.
  w.add("z", TensorDType::f16, {4}, std::span<const std::byte>(d));
  w.write(path("w.safetensors"));
  const SafetensorsFile f = SafetensorsFile::open(path("w.safetensors"));
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].name, "x");
  EXPECT_EQ(f.tensors()[1].name, "z");
}

TEST_F(SafetensorsTest, WriteIntoAMissingFolderFailsCleanly) {
  const Bytes d = pattern(8, 1);
  SafetensorsWriter w;
  w.add("x", TensorDType::f32, {2}, std::span<const std::byte>(d));
  const std::string p = path("no/such/folder/x.safetensors");
  const Error e = expect_error([&] { w.write(p); });
  EXPECT_HAS(std::string(e.what()), p);
  EXPECT_EQ(e.where(), p);
  EXPECT_TRUE(listing().empty());
  // The same writer still works afterwards.
  w.write(path("x.safetensors"));
  EXPECT_EQ(listing(), std::vector<std::string>{"x.safetensors"});
}

TEST_F(SafetensorsTest, WriteOverAFolderFailsAndLeavesNoTemporaryFile) {
  fs::create_directory(path("taken"));
  const Bytes d = pattern(8, 1);
  SafetensorsWriter w;
  w.add("x", TensorDType::f32, {2}, std::span<const std::byte>(d));
  const Error e = expect_error([&] { w.write(path("taken")); });
  EXPECT_EQ(e.where(), path("taken"));
  EXPECT_EQ(listing(), std::vector<std::string>{"taken"});
}

TEST_F(SafetensorsTest, RewriteReplacesAtomically) {
  const std::string p = path("model.safetensors");
  const Bytes old_data = pattern(4000, 1);
  SafetensorsWriter first;
  first.add("old", TensorDType::f32, {1000}, std::span<const std::byte>(old_data));
  first.metadata("version", "1");
  first.write(p);

  // Opened before the rewrite: the mapping keeps the old contents (rename, not overwrite).
  const SafetensorsFile before = SafetensorsFile::open(p);

  const Bytes new_data = pattern(6, 2);
  SafetensorsWriter second;
  second.add("new", TensorDType::f16, {3}, std::span<const std::byte>(new_data));
  second.write(p);

  const SafetensorsFile after = SafetensorsFile::open(p);
  EXPECT_EQ(after.find("old"), nullptr);
  ASSERT_NE(after.find("new"), nullptr);
  EXPECT_TRUE(after.metadata().empty());
  const auto got = after.bytes(*after.find("new"));
  EXPECT_TRUE(std::equal(got.begin(), got.end(), new_data.begin(), new_data.end()));
  EXPECT_EQ(listing(), std::vector<std::string>{"model.safetensors"});

  ASSERT_NE(before.find("old"), nullptr);
  const auto old_got = before.bytes(*before.find("old"));
  EXPECT_TRUE(std::equal(old_got.begin(), old_got.end(), old_data.begin(), old_data.end()));
}

TEST_F(SafetensorsTest, HeaderSizeIsAMultipleOfEight) {
  // Names of every length mod 8 exercise every amount of padding.
  for (int len = 1; len <= 16; ++len) {
    SCOPED_TRACE(len);
    const std::string name(static_cast<std::size_t>(len), 'n');
    const Bytes d = pattern(2, 9);
    SafetensorsWriter w;
    w.add(name, TensorDType::bf16, {1}, std::span<const std::byte>(d));
    const std::string p = path("pad.safetensors");
    w.write(p);
    const Bytes raw = read_file(p);
    std::uint64_t header_bytes = 0;
    std::memcpy(&header_bytes, raw.data(), 8);
    EXPECT_EQ(header_bytes % 8, 0u);
    ASSERT_EQ(raw.size(), 8 + header_bytes + 2);
    // The padding is spaces after the JSON's closing brace.
    const std::string header(reinterpret_cast<const char*>(raw.data()) + 8, header_bytes);
    const std::size_t close = header.find_last_of('}');
    ASSERT_NE(close, std::string::npos);
    EXPECT_LT(header.size() - close - 1, 8u);
    EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos);
    EXPECT_EQ(SafetensorsFile::open(p).tensors().at(0).name, name);
  }
}

// A write that fails halfway (EFBIG from a file size limit here, as ENOSPC would) throws an
// Error naming the path, removes the temporary file and leaves the old file as it was.
TEST_F(SafetensorsTest, WriteErrorMidFileKeepsTheOldFile) {
  const std::string p = path("model.safetensors");
  const Bytes old_data = pattern(8, 3);
  SafetensorsWriter old_writer;
  old_writer.add("old", TensorDType::i32, {2}, std::span<const std::byte>(old_data));
  old_writer.write(p);
  const Bytes old_bytes = read_file(p);

  const Bytes big = pattern(256 * 1024, 4);
  SafetensorsWriter w;
  w.add("big", TensorDType::f32, {64 * 1024}, std::span<const std::byte>(big));

  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto* saved_handler = std::signal(SIGXFSZ, SIG_IGN);  // get EFBIG instead of the signal
  rlimit limited = saved;
  limited.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
  std::string message;
  std::string where;
  try {
    w.write(p);
  } catch (const Error& e) {
    message = e.what();
    where = e.where();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, saved_handler);

  EXPECT_EQ(where, p);
  EXPECT_HAS(message, "File too large");
  EXPECT_EQ(listing(), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(read_file(p), old_bytes);
}

}  // namespace
}  // namespace strata::models

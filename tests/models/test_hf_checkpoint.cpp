// models/io/hf_checkpoint.h: the Hugging Face model-folder layout. Round trips as one file and
// as 3+ shards (names, bytes, index JSON, shard names and __metadata__), an oversized tensor in
// a shard of its own, the index winning over model.safetensors, every inconsistent folder and
// its message (naming the files and the tensor), done_with() dropping resident pages without
// breaking later reads, and the writer's refusals and failed writes leaving nothing that looks
// complete.
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

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/io/hf_checkpoint.h"
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

// Deterministic bytes (splitmix64), the same on every host.
Bytes pattern(std::size_t n, std::uint64_t seed) {
  Bytes out(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t z = (seed += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    out[i] = static_cast<std::byte>(z ^ (z >> 31));
  }
  return out;
}

struct Tensor {
  std::string name;
  TensorDType dtype;
  std::vector<std::int64_t> shape;
  Bytes data;
};

// A small model's worth of tensors: 12 of them, 64 to 1024 bytes, every dtype, a 0-d one and
// an empty one.
std::vector<Tensor> sample_tensors() {
  std::vector<Tensor> out;
  for (int layer = 0; layer < 4; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    out.push_back({p + "attn.weight", TensorDType::bf16, {16, 32}, {}});
    out.push_back({p + "mlp.weight", TensorDType::f32, {8, 16}, {}});
  }
  out.push_back({"model.embed.weight", TensorDType::f16, {64, 8}, {}});
  out.push_back({"lm_head.bias", TensorDType::i64, {8}, {}});
  out.push_back({"step", TensorDType::i32, {}, {}});
  out.push_back({"empty", TensorDType::f32, {0, 4}, {}});
  std::uint64_t seed = 1;
  for (Tensor& t : out) {
    std::uint64_t numel = 1;
    for (const std::int64_t d : t.shape) numel *= static_cast<std::uint64_t>(d);
    t.data = pattern(numel * tensor_dtype_size(t.dtype), seed++);
  }
  return out;
}

std::uint64_t total_bytes(const std::vector<Tensor>& tensors) {
  std::uint64_t n = 0;
  for (const Tensor& t : tensors) n += t.data.size();
  return n;
}

std::string read_text(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

class HfCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "strata_hf_checkpoint_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add);
    fs::remove_all(dir_);
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // The file names in `folder`, sorted.
  static std::vector<std::string> listing(const std::string& folder) {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(folder)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  // Writes `tensors` into `folder` with shards of at most `max_shard_bytes`.
  static void write_model(const std::string& folder, const std::vector<Tensor>& tensors,
                          std::uint64_t max_shard_bytes,
                          const std::map<std::string, std::string>& metadata = {}) {
    HfCheckpointWriter w(folder, max_shard_bytes);
    for (const Tensor& t : tensors) w.add(t.name, t.dtype, t.shape, t.data);
    EXPECT_EQ(w.total_bytes(), total_bytes(tensors));
    w.finish(metadata);
  }

  // Every tensor is there with its dtype, shape and bytes, and nothing else.
  static void expect_same(const HfCheckpoint& c, const std::vector<Tensor>& tensors) {
    std::vector<std::string> names;
    for (const Tensor& t : tensors) names.push_back(t.name);
    std::sort(names.begin(), names.end());
    EXPECT_EQ(c.names(), names);
    for (const Tensor& t : tensors) {
      const TensorInfo* info = c.find(t.name);
      ASSERT_NE(info, nullptr) << t.name;
      EXPECT_EQ(info->dtype, t.dtype) << t.name;
      EXPECT_EQ(info->shape, t.shape) << t.name;
      const std::span<const std::byte> b = c.bytes(*info);
      EXPECT_TRUE(std::equal(b.begin(), b.end(), t.data.begin(), t.data.end())) << t.name;
    }
    EXPECT_EQ(c.find("no.such.tensor"), nullptr);
    EXPECT_EQ(c.file_of("no.such.tensor"), "");
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

  // A sharded folder by hand: each shard file gets the tensors named for it (data from
  // sample-like patterns) and the index gets `weight_map` as given.
  void write_by_hand(const std::map<std::string, std::vector<std::string>>& shards,
                     const nlohmann::json& weight_map) {
    std::uint64_t seed = 100;
    for (const auto& [file, names] : shards) {
      std::vector<Bytes> keep;
      keep.reserve(names.size());
      SafetensorsWriter w;
      for (const std::string& name : names) {
        keep.push_back(pattern(16, seed++));
        w.add(name, TensorDType::f32, {4}, std::span<const std::byte>(keep.back()));
      }
      w.metadata("format", "pt");
      w.write(path(file));
    }
    nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
    std::ofstream(path(kHfIndexFile)) << index.dump(2);
  }

  fs::path dir_;
};

TEST_F(HfCheckpointTest, RoundTripSingleFile) {
  const std::vector<Tensor> tensors = sample_tensors();
  const std::string model = path("model");
  write_model(model, tensors, 1 << 20, {{"source", "strata test"}});
  EXPECT_EQ(listing(model), std::vector<std::string>{"model.safetensors"});

  const SafetensorsFile raw = SafetensorsFile::open(model + "/model.safetensors");
  EXPECT_EQ(raw.metadata().at("format"), "pt");
  EXPECT_EQ(raw.metadata().at("source"), "strata test");

  for (const std::string& p : {model, model + "/model.safetensors", model + "/"}) {
    const HfCheckpoint c = HfCheckpoint::open(p);
    EXPECT_EQ(c.shard_count(), 1u);
    EXPECT_EQ(c.index_path(), "");
    EXPECT_EQ(c.metadata().at("source"), "strata test");
    EXPECT_HAS(c.file_of("step"), "model.safetensors");
    expect_same(c, tensors);
  }
}

TEST_F(HfCheckpointTest, RoundTripSharded) {
  const std::vector<Tensor> tensors = sample_tensors();
  const std::string model = path("model");
  write_model(model, tensors, 1500, {{"source", "strata test"}});

  // 3+ shards named as transformers names them, and the index; nothing else.
  const std::vector<std::string> files = listing(model);
  ASSERT_GE(files.size(), 4u);
  const std::size_t n = files.size() - 1;
  std::vector<std::string> expected;
  for (std::size_t i = 1; i <= n; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i, n);
    expected.push_back(name);
  }
  expected.push_back("model.safetensors.index.json");
  EXPECT_EQ(files, expected);

  // The index: total_size, user metadata, every name (sorted) mapped to the shard holding it.
  const nlohmann::json index = nlohmann::json::parse(read_text(model + "/" + kHfIndexFile));
  EXPECT_EQ(index["metadata"]["total_size"].get<std::uint64_t>(), total_bytes(tensors));
  EXPECT_EQ(index["metadata"]["source"], "strata test");
  EXPECT_EQ(index["weight_map"].size(), tensors.size());
  for (std::size_t i = 0; i < n; ++i) {
    const SafetensorsFile shard = SafetensorsFile::open(model + "/" + files[i]);
    EXPECT_EQ(shard.metadata().at("format"), "pt") << files[i];
    std::uint64_t bytes = 0;
    for (const TensorInfo& t : shard.tensors()) {
      EXPECT_EQ(index["weight_map"][t.name], files[i]) << t.name;
      bytes += t.end - t.begin;
    }
    EXPECT_LE(bytes, 1500u) << files[i];
  }
  // Sorted keys in the text itself (nlohmann would re-sort on parse).
  const std::string text = read_text(model + "/" + kHfIndexFile);
  EXPECT_LT(text.find("\"empty\""), text.find("\"lm_head.bias\""));
  EXPECT_LT(text.find("\"lm_head.bias\""), text.find("\"model.embed.weight\""));

  const HfCheckpoint c = HfCheckpoint::open(model);
  EXPECT_EQ(c.shard_count(), n);
  EXPECT_EQ(c.index_path(), model + "/" + kHfIndexFile);
  EXPECT_EQ(c.metadata().at("total_size"), std::to_string(total_bytes(tensors)));
  EXPECT_EQ(c.metadata().at("source"), "strata test");
  EXPECT_EQ(c.file_of("step"), model + "/" + index["weight_map"]["step"].get<std::string>());
  expect_same(c, tensors);
  // The index file itself opens the same checkpoint.
  expect_same(HfCheckpoint::open(model + "/" + kHfIndexFile), tensors);
}

// A tensor over the limit goes alone into a shard of its own, written at once; the tensors
// around it share the shard that was open.
TEST_F(HfCheckpointTest, OversizedTensorGetsItsOwnShard) {
  std::vector<Tensor> tensors;
  tensors.push_back({"a", TensorDType::f32, {10}, pattern(40, 1)});
  tensors.push_back({"huge", TensorDType::f32, {1000}, pattern(4000, 2)});
  tensors.push_back({"b", TensorDType::f32, {10}, pattern(40, 3)});
  const std::string model = path("model");
  write_model(model, tensors, 100);

  const nlohmann::json index = nlohmann::json::parse(read_text(model + "/" + kHfIndexFile));
  EXPECT_EQ(index["weight_map"]["huge"], "model-00001-of-00002.safetensors");
  EXPECT_EQ(index["weight_map"]["a"], "model-00002-of-00002.safetensors");
  EXPECT_EQ(index["weight_map"]["b"], "model-00002-of-00002.safetensors");
  EXPECT_EQ(SafetensorsFile::open(model + "/model-00001-of-00002.safetensors").tensors().size(),
            1u);
  expect_same(HfCheckpoint::open(model), tensors);
}

// With the limit exactly met, a shard is full; one byte more starts the next.
TEST_F(HfCheckpointTest, ShardLimitIsInclusive) {
  std::vector<Tensor> tensors;
  for (int i = 0; i < 4; ++i) {
    tensors.push_back({"t" + std::to_string(i), TensorDType::i32, {4}, pattern(16, 9 + i)});
  }
  const std::string model = path("model");
  write_model(model, tensors, 32);
  EXPECT_EQ(listing(model).size(), 3u);  // 2 shards of 2 tensors, and the index
  expect_same(HfCheckpoint::open(model), tensors);
}

TEST_F(HfCheckpointTest, IndexWinsOverSingleFile) {
  const std::vector<Tensor> tensors = sample_tensors();
  const std::string model = path("model");
  write_model(model, tensors, 1500);
  // A stray model.safetensors with other tensors beside the index: ignored.
  const Bytes other = pattern(8, 7);
  SafetensorsWriter w;
  w.add("stray", TensorDType::f32, {2}, std::span<const std::byte>(other));
  w.write(model + "/model.safetensors");

  const HfCheckpoint c = HfCheckpoint::open(model);
  EXPECT_NE(c.index_path(), "");
  EXPECT_EQ(c.find("stray"), nullptr);
  expect_same(c, tensors);
}

TEST_F(HfCheckpointTest, FolderWithNeitherFileNamesBoth) {
  std::ofstream(path("config.json")) << "{}";
  const Error e = expect_error([&] { HfCheckpoint::open(dir_.string()); });
  EXPECT_HAS(std::string(e.what()), "model.safetensors.index.json");
  EXPECT_HAS(std::string(e.what()), "model.safetensors ");
  EXPECT_EQ(e.where(), dir_.string());

  const Error missing = expect_error([&] { HfCheckpoint::open(path("nowhere")); });
  EXPECT_EQ(missing.where(), path("nowhere"));
}

TEST_F(HfCheckpointTest, MissingShardNamesShardAndIndex) {
  write_by_hand({{"model-00001-of-00002.safetensors", {"a"}}},
                {{"a", "model-00001-of-00002.safetensors"},
                 {"b", "model-00002-of-00002.safetensors"}});
  const Error e = expect_error([&] { HfCheckpoint::open(dir_.string()); });
  EXPECT_HAS(std::string(e.what()), "model-00002-of-00002.safetensors");
  EXPECT_HAS(std::string(e.what()), path(kHfIndexFile));
  EXPECT_EQ(e.where(), path("model-00002-of-00002.safetensors"));
}

TEST_F(HfCheckpointTest, TensorListedButNotInItsShard) {
  write_by_hand({{"s1.safetensors", {"a"}}, {"s2.safetensors", {"b"}}},
                {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}, {"c", "s2.safetensors"}});
  const Error e = expect_error([&] { HfCheckpoint::open(dir_.string()); });
  EXPECT_HAS(std::string(e.what()), "\"c\"");
  EXPECT_HAS(std::string(e.what()), path("s2.safetensors"));
  EXPECT_HAS(std::string(e.what()), path(kHfIndexFile));
  EXPECT_EQ(e.where(), path("s2.safetensors") + ", tensor \"c\"");
}

TEST_F(HfCheckpointTest, TensorInTwoShards) {
  write_by_hand({{"s1.safetensors", {"a", "b"}}, {"s2.safetensors", {"b"}}},
                {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}});
  const Error e = expect_error([&] { HfCheckpoint::open(dir_.string()); });
  EXPECT_HAS(std::string(e.what()), "two shards");
  EXPECT_HAS(std::string(e.what()), "\"b\"");
  EXPECT_HAS(std::string(e.what()), path("s1.safetensors"));
  EXPECT_HAS(std::string(e.what()), path("s2.safetensors"));
}

TEST_F(HfCheckpointTest, TensorInAShardButNotInTheIndex) {
  write_by_hand({{"s1.safetensors", {"a", "extra"}}}, {{"a", "s1.safetensors"}});
  const Error e = expect_error([&] { HfCheckpoint::open(dir_.string()); });
  EXPECT_HAS(std::string(e.what()), "\"extra\"");
  EXPECT_HAS(std::string(e.what()), "does not list it");
  EXPECT_HAS(std::string(e.what()), path("s1.safetensors"));
}

TEST_F(HfCheckpointTest, ShardNamesOutsideTheFolderAreRefused) {
  fs::create_directory(path("sub"));
  for (const std::string file :
       {"../model.safetensors", "sub/s1.safetensors", "/etc/passwd", "..", ""}) {
    write_by_hand({}, {{"a", file}});
    const Error e = expect_error([&] { HfCheckpoint::open(dir_.string()); });
    EXPECT_HAS(std::string(e.what()), "not a plain file name");
    EXPECT_HAS(std::string(e.what()), "\"" + file + "\"");
    EXPECT_EQ(e.where(), path(kHfIndexFile) + ", tensor \"a\"");
  }
}

TEST_F(HfCheckpointTest, MalformedIndexIsAnErrorNamingIt) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{not json", "not valid JSON"},
      {"[1, 2]", "not an object"},
      {R"({"metadata": {}})", "no \"weight_map\""},
      {R"({"weight_map": []})", "no \"weight_map\""},
      {R"({"weight_map": {"a": 3}})", "must be a file name"},
      {R"({"metadata": [], "weight_map": {}})", "\"metadata\" must be an object"},
      {R"({"weight_map": {"a": "s.safetensors", "a": "t.safetensors"}})", "key \"a\" twice"},
  };
  for (const auto& [text, needle] : cases) {
    std::ofstream(path(kHfIndexFile), std::ios::trunc) << text;
    const Error e = expect_error([&] { HfCheckpoint::open(dir_.string()); });
    EXPECT_HAS(std::string(e.what()), needle);
    EXPECT_HAS(e.where(), path(kHfIndexFile));
  }
}

// A malformed shard is SafetensorsFile's Error, naming the shard.
TEST_F(HfCheckpointTest, CorruptShardIsAnErrorNamingIt) {
  write_model(path("model"), sample_tensors(), 1500);
  const std::string shard = path("model") + "/model-00002-of-" +
                            listing(path("model"))[0].substr(15, 5) + ".safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 1);
  const Error e = expect_error([&] { HfCheckpoint::open(path("model")); });
  EXPECT_HAS(e.where(), shard);
}

// RssFile of this process, from /proc/self/status, in KiB.
long rss_file_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("RssFile:", 0) == 0) return std::atol(line.c_str() + 8);
  }
  return -1;
}

// done_with() drops the tensor's pages from the resident set; its bytes and every other
// tensor's still read back right.
TEST_F(HfCheckpointTest, DoneWithDropsPagesAndLaterReadsStillWork) {
  std::vector<Tensor> tensors;
  for (int i = 0; i < 3; ++i) {
    tensors.push_back({"w" + std::to_string(i), TensorDType::f32, {1024, 1024},
                       pattern(4 << 20, 50 + i)});  // 4 MiB each
  }
  tensors.push_back({"small", TensorDType::f32, {3}, pattern(12, 60)});
  const std::string model = path("model");
  write_model(model, tensors, 5 << 20);  // one big tensor (+ the small one) per shard

  const HfCheckpoint c = HfCheckpoint::open(model);
  const TensorInfo& w0 = *c.find("w0");
  std::uint64_t sum = 0;
  for (const std::byte b : c.bytes(w0)) sum += static_cast<std::uint8_t>(b);  // fault all in
  const long before = rss_file_kib();
  c.done_with(w0);
  const long after = rss_file_kib();
  ASSERT_GE(before, 0) << "no RssFile in /proc/self/status";
  EXPECT_GE(before - after, 3 * 1024) << "before " << before << " KiB, after " << after;
  EXPECT_GT(sum, 0u);

  for (const Tensor& t : tensors) c.done_with(*c.find(t.name));  // even ones never read
  c.done_with(*c.find("small"));  // smaller than a page: nothing to drop, no error
  expect_same(c, tensors);        // everything reads back from the page cache or the file
}

TEST_F(HfCheckpointTest, WriterRefusesAFolderWithModelFiles) {
  for (const std::string stale : {"model.safetensors", "model-00001-of-00002.safetensors",
                                  "model.safetensors.index.json",
                                  "model-00001.safetensors.partial"}) {
    const std::string folder = path("m-" + stale);
    fs::create_directory(folder);
    std::ofstream(folder + "/config.json") << "{}";  // other files are fine
    std::ofstream(folder + "/" + stale) << "x";
    const Error e = expect_error([&] { HfCheckpointWriter w(folder, 100); });
    EXPECT_EQ(e.where(), folder + "/" + stale);
    EXPECT_HAS(std::string(e.what()), "mix");
  }
  std::ofstream(path("a_file")) << "x";
  expect_error([&] { HfCheckpointWriter w(path("a_file"), 100); });
  expect_error([&] { HfCheckpointWriter w(path("zero"), 0); });
  // The folder is created, with its parents.
  HfCheckpointWriter(path("new/deeper"), 100).finish();
  EXPECT_EQ(listing(path("new/deeper")), std::vector<std::string>{"model.safetensors"});
}

TEST_F(HfCheckpointTest, WriterRejectsBadTensorsAndReservedMetadata) {
  HfCheckpointWriter w(path("model"), 64);
  w.add("a", TensorDType::f32, {4}, pattern(16, 1));
  EXPECT_HAS(std::string(expect_error([&] {
                           w.add("a", TensorDType::f32, {4}, pattern(16, 2));
                         }).what()),
             "added twice");
  expect_error([&] { w.add("short", TensorDType::f32, {4}, pattern(15, 2)); });
  expect_error([&] { w.add("neg", TensorDType::f32, {-1}, {}); });
  expect_error([&] { w.add("", TensorDType::f32, {1}, pattern(4, 2)); });
  // A rejected tensor did not flush the open shard.
  EXPECT_EQ(listing(path("model")), std::vector<std::string>{});
  w.add("b", TensorDType::f32, {16}, pattern(64, 3));  // flushes "a"; "b" is added after it
  EXPECT_EQ(listing(path("model")), std::vector<std::string>{"model-00001.safetensors.partial"});
  EXPECT_HAS(std::string(expect_error([&] { w.finish({{"format", "np"}}); }).what()),
             "reserved");
  w.finish();
  EXPECT_EQ(listing(path("model")),
            (std::vector<std::string>{"model-00001-of-00002.safetensors",
                                      "model-00002-of-00002.safetensors",
                                      "model.safetensors.index.json"}));
}

// A writer dropped before finish() removes its shards: the folder is as it was.
TEST_F(HfCheckpointTest, UnfinishedWriterLeavesNothing) {
  {
    HfCheckpointWriter w(path("model"), 20);
    for (int i = 0; i < 5; ++i) {
      w.add("t" + std::to_string(i), TensorDType::f32, {4}, pattern(16, i));
    }
    EXPECT_EQ(listing(path("model")).size(), 4u);
  }
  EXPECT_EQ(listing(path("model")), std::vector<std::string>{});
}

// Sets RLIMIT_FSIZE (SIGXFSZ ignored: writes past it fail with EFBIG, as ENOSPC would) for the
// lifetime of the object.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limited = saved_;
    limited.rlim_cur = bytes;
    ok_ = ::setrlimit(RLIMIT_FSIZE, &limited) == 0;
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, handler_);
  }
  bool ok() const { return ok_; }

 private:
  rlimit saved_{};
  void (*handler_)(int) = nullptr;
  bool ok_ = false;
};

// A shard write that fails is an Error naming the shard file; the writer refuses to go on, and
// once dropped leaves no file behind.
TEST_F(HfCheckpointTest, FailedShardWriteNamesTheFileAndLeavesNothing) {
  const std::string model = path("model");
  {
    HfCheckpointWriter w(model, 4096);
    w.add("small", TensorDType::f32, {4}, pattern(16, 1));
    Error e("none");
    {
      FileSizeLimit limit(2048);
      ASSERT_TRUE(limit.ok());
      e = expect_error([&] { w.add("big", TensorDType::f32, {2048}, pattern(8192, 2)); });
    }
    EXPECT_EQ(e.where(), model + "/model-00001.safetensors.partial");
    EXPECT_HAS(std::string(e.what()), "File too large");
    EXPECT_HAS(std::string(expect_error([&] { w.finish(); }).what()), "earlier write");
    EXPECT_HAS(std::string(expect_error([&] {
                             w.add("more", TensorDType::f32, {1}, pattern(4, 3));
                           }).what()),
               "earlier write");
  }
  EXPECT_EQ(listing(model), std::vector<std::string>{});
}

// The index is written last: when it fails (here each 1-tensor shard fits under the file size
// limit, the index listing all 40 does not), the Error names it, there is no index, and the
// folder does not open as a checkpoint; dropping the writer removes the shards.
TEST_F(HfCheckpointTest, FailedIndexWriteNamesTheIndexAndLeavesNothingComplete) {
  const std::string model = path("model");
  {
    HfCheckpointWriter w(model, 4);
    Error e("none");
    {
      FileSizeLimit limit(1024);
      ASSERT_TRUE(limit.ok());
      for (int i = 0; i < 40; ++i) {
        w.add("model.layers." + std::to_string(i) + ".weight", TensorDType::f32, {1},
              pattern(4, i));
      }
      e = expect_error([&] { w.finish(); });
    }
    EXPECT_EQ(e.where(), model + "/" + kHfIndexFile);
    EXPECT_HAS(std::string(e.what()), "File too large");
    const std::vector<std::string> files = listing(model);
    EXPECT_EQ(files.size(), 40u);  // the shards, under their final names; no index, no tmp
    EXPECT_EQ(std::count(files.begin(), files.end(), std::string(kHfIndexFile)), 0);
    EXPECT_HAS(std::string(expect_error([&] { HfCheckpoint::open(model); }).what()),
               "neither");
  }
  EXPECT_EQ(listing(model), std::vector<std::string>{});
}

// Without write permission the ctor's folder check passes but the first shard write fails,
// naming the file. (Root ignores permissions: skipped there.)
TEST_F(HfCheckpointTest, UnwritableFolderIsAnErrorNamingTheFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: permissions are not enforced";
  const std::string model = path("model");
  fs::create_directory(model);
  fs::permissions(model, fs::perms::owner_read | fs::perms::owner_exec);
  HfCheckpointWriter w(model, 1 << 20);
  w.add("a", TensorDType::f32, {1}, pattern(4, 1));
  const Error e = expect_error([&] { w.finish(); });
  EXPECT_EQ(e.where(), model + "/model.safetensors");
  fs::permissions(model, fs::perms::owner_all);
}

}  // namespace
}  // namespace strata::models

// runtime/checkpoint: the manifest and its self-checksum, the shard file layout and its
// checksummed round trip through the I/O engine, the folder's atomic publish / latest /
// keep_last / leftovers, resolving --resume, and the engine-level save (overlapped with the
// next steps on the optimizer worker) and resume into another tier, bit for bit.
#include <gtest/gtest.h>

#include <cstdio>
#include <fcntl.h>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "offload/aio_engine.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/checkpoint/checkpoint_loader.h"
#include "runtime/checkpoint/checkpoint_saver.h"
#include "runtime/checkpoint/manifest.h"
#include "runtime/checkpoint/shard_file.h"
#include "tests/runtime/zero/engine_fixture.h"

using namespace strata;
using namespace strata::runtime;
using namespace strata::runtime::engine_test;
namespace fs = std::filesystem;

namespace {

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string read_bytes(const std::string& path) { return strata::read_text_file(path); }

void flip_byte(const std::string& path, std::uint64_t at) {
  std::string b = read_bytes(path);
  ASSERT_LT(at, b.size());
  b[at] = static_cast<char>(b[at] ^ 0x20);
  write_bytes(path, b);
}

// The error text of f(), or "" when it does not throw strata::Error.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Manifest, RoundTripsAndRefusesAnyChange) {
  checkpoint::Manifest m;
  m.step = 42;
  m.shards = 2;
  m.files = {{"meta.json", 100, 0x0123456789abcdefULL}, {"shard-00000-of-00002.bin", 8192, 7}};
  const std::string text = m.to_json();
  const checkpoint::Manifest back = checkpoint::Manifest::parse(text, "m.json");
  EXPECT_EQ(back.step, 42u);
  EXPECT_EQ(back.shards, 2);
  ASSERT_EQ(back.files.size(), 2u);
  EXPECT_EQ(back.files[0].xxh3, 0x0123456789abcdefULL);
  EXPECT_EQ(back.file("shard-00000-of-00002.bin", "m").bytes, 8192u);
  EXPECT_NE(error_of([&] { (void)back.file("nope", "m.json"); }).find("does not list nope"), std::string::npos);

  // Any digit of the step or a size changed, or the text cut: refused, naming the file.
  std::string changed = text;
  changed.replace(changed.find("8192"), 4, "8193");
  EXPECT_NE(error_of([&] { checkpoint::Manifest::parse(changed, "m.json"); }).find("m.json is damaged"),
            std::string::npos);
  EXPECT_NE(error_of([&] { checkpoint::Manifest::parse(text.substr(0, text.size() / 2), "m.json"); }).find("m.json"),
            std::string::npos);
}

TEST(Manifest, RefusesNumbersThatAreNotIntegersInRangeEvenWhenSigned) {
  // Found by tests/fuzz: nlohmann's get<>() converted a float step (1.8e22) to uint64
  // (undefined behaviour), wrapped a negative size and truncated shards 2^32 + 1 to 1. A
  // manifest with a correct checksum over such a body must still be refused.
  checkpoint::Manifest m;
  m.step = 42;
  m.files = {{"meta.json", 100, 7}};
  nlohmann::json good = nlohmann::json::parse(m.to_json());
  good.erase("checksum");
  auto signed_with = [&](const nlohmann::json::json_pointer& key, const nlohmann::json& value) {
    nlohmann::json body = good;
    body[key] = value;
    body["checksum"] = checkpoint::xxh3_hex(checkpoint::xxh3_of(body.dump()));
    return body.dump();
  };
  using P = nlohmann::json::json_pointer;
  EXPECT_EQ(checkpoint::Manifest::parse(signed_with(P("/step"), 43), "m.json").step, 43u);
  const std::vector<std::pair<P, nlohmann::json>> bad = {
      {P("/step"), 1.8446744073709552e22}, {P("/step"), -1},           {P("/step"), 1.5},
      {P("/shards"), 4294967297ULL},       {P("/shards"), -2},         {P("/version"), 1.0},
      {P("/version"), 4294967297ULL},      {P("/files/0/bytes"), -1},  {P("/files/0/bytes"), 1e30},
      {P("/files/0/bytes"), "100"}};
  for (const auto& entry : bad) {
    const P& key = entry.first;  // not a structured binding: clang 14 cannot capture one
    const nlohmann::json& value = entry.second;
    const std::string error = error_of([&] { checkpoint::Manifest::parse(signed_with(key, value), "m.json"); });
    EXPECT_NE(error.find("m.json is damaged"), std::string::npos) << key << " = " << value << ": " << error;
  }
}

TEST(ShardLayout, EntriesAreAlignedAndTheHeaderReadsBack) {
  const std::vector<checkpoint::ShardModule> modules = {{"a", 1000, 512}, {"b", 70, 64}, {"c", 10, 64}};
  const checkpoint::ShardLayout l = checkpoint::ShardLayout::make(1, 2, modules);
  ASSERT_EQ(l.entries.size(), 9u);
  for (const checkpoint::ShardEntry& e : l.entries) EXPECT_EQ(e.offset % 4096, 0u);
  EXPECT_EQ(l.entry(0, tiers::OptimState::master).real_numel, 488u);  // 1000 - 512
  EXPECT_EQ(l.entry(1, tiers::OptimState::exp_avg).real_numel, 6u);   // 70 - 64
  EXPECT_EQ(l.entry(2, tiers::OptimState::exp_avg_sq).real_numel, 0u);
  EXPECT_EQ(l.header().size(), l.header_bytes);

  const std::string path = ::testing::TempDir() + "/layout.bin";
  write_bytes(path, l.header());
  const int fd = ::open(path.c_str(), O_RDONLY);
  const checkpoint::ShardLayout back = checkpoint::ShardLayout::read(fd, path);
  ::close(fd);
  EXPECT_EQ(back.file_bytes, l.file_bytes);
  EXPECT_EQ(back.entries.size(), l.entries.size());
  EXPECT_EQ(back.entries[4].offset, l.entries[4].offset);
}

// A shard header's integers are read as integers in range (json_fields.h): a float, a negative
// or a count beyond 2^60 elements is damage, not a converted value.
TEST(ShardLayout, RefusesHeaderIntegersOutOfRange) {
  const checkpoint::ShardLayout l = checkpoint::ShardLayout::make(0, 1, {{"a", 1000, 0}});
  const std::string header = l.header();
  const std::size_t json_at = header.find('\n') + 1;
  const nlohmann::json good = nlohmann::json::parse(header.substr(json_at));
  const std::string path = ::testing::TempDir() + "/layout-bad.bin";
  auto read_with = [&](const nlohmann::json& j) {
    std::string text = j.dump();
    EXPECT_LE(json_at + text.size(), header.size());
    text.resize(header.size() - json_at, ' ');  // the same header size: padded as the writer pads
    write_bytes(path, header.substr(0, json_at) + text);
    const int fd = ::open(path.c_str(), O_RDONLY);
    const std::string error = error_of([&] { checkpoint::ShardLayout::read(fd, path); });
    ::close(fd);
    return error;
  };
  EXPECT_EQ(read_with(good), "");
  using P = nlohmann::json::json_pointer;
  const std::vector<std::pair<P, nlohmann::json>> bad = {
      {P("/shard"), -1},           {P("/shards"), 1.5},         {P("/shard"), 3},
      {P("/entries/0/numel"), -1}, {P("/entries/0/numel"), 1e30}, {P("/entries/0/offset"), "4096"},
      {P("/entries/0/numel"), std::uint64_t{1} << 62},           {P("/entries/0/index"), 4294967297ULL}};
  for (const auto& entry : bad) {
    nlohmann::json j = good;
    j[entry.first] = entry.second;
    EXPECT_NE(read_with(j).find("is damaged"), std::string::npos) << entry.first << " = " << entry.second;
  }
}

TEST(ShardFile, WritesAndReadsBackThroughTheEngineAndCatchesAFlippedByte) {
  const std::string dir = ::testing::TempDir() + "/shardfile";
  fs::remove_all(dir);
  fs::create_directories(dir);
  offload::AioOptions o;
  o.block_size = 65536;
  offload::AioEngine io(o);
  const std::size_t chunk = 4096;  // elements: 16 KiB pieces, several per entry
  const std::vector<checkpoint::ShardModule> modules = {{"a", 10000, 10048}, {"b", 300, 320}};
  const checkpoint::ShardLayout layout = checkpoint::ShardLayout::make(0, 1, modules);
  auto value = [](std::size_t e, std::size_t i) {
    return static_cast<float>(e) * 1000.0f + static_cast<float>(i) * 0.5f;
  };
  const std::string path = dir + "/" + checkpoint::shard_file_name(0, 1);
  checkpoint::CrashPoints crash;
  checkpoint::ManifestFile written;
  {
    checkpoint::ShardFileWriter w(path, layout, io, chunk * 4, &crash);
    for (std::size_t e = 0; e < layout.entries.size(); ++e) {
      const std::size_t n_all = layout.entries[e].numel;
      for (std::size_t off = 0; off < n_all; off += chunk) {
        const std::size_t n = std::min(chunk, n_all - off);
        float* b = w.buffer();
        for (std::size_t i = 0; i < n; ++i) b[i] = value(e, off + i);
        w.submit(n * 4, off + n == n_all);
      }
    }
    written = w.finish();
  }
  EXPECT_EQ(written.bytes, layout.file_bytes);
  EXPECT_EQ(fs::file_size(path), layout.file_bytes);
  EXPECT_GT(crash.hits(), 3u);  // pieces and the fdatasync are crash points
  checkpoint::verify_file(path, written);

  auto read_all = [&] {
    checkpoint::ShardFileReader r(path, written, io, chunk * 4);
    for (std::size_t e = 0; e < r.layout().entries.size(); ++e) {
      const std::size_t n_all = r.layout().entries[e].numel;
      for (std::size_t off = 0; off < n_all; off += chunk) {
        const std::size_t n = std::min(chunk, n_all - off);
        const float* b = r.read(n * 4, off + n == n_all);
        for (std::size_t i = 0; i < n; ++i) {
          if (b[i] != value(e, off + i)) throw std::runtime_error("value differs");
        }
      }
    }
    r.finish();
  };
  EXPECT_NO_THROW(read_all());
  // A flipped bit in the padding of the last entry (no value changes): the checksum still says so.
  flip_byte(path, layout.file_bytes - 8);
  EXPECT_NE(error_of(read_all).find(path), std::string::npos);
  EXPECT_NE(error_of([&] { checkpoint::verify_file(path, written); }).find("checksum"), std::string::npos);
  fs::resize_file(path, layout.file_bytes - 4096);
  EXPECT_NE(error_of(read_all).find("bytes; its manifest says"), std::string::npos);
  fs::remove_all(dir);
}

TEST(CheckpointDir, PublishesAtomicallyKeepsTheLastAndResolvesLatest) {
  const std::string root = ::testing::TempDir() + "/ckdir";
  fs::remove_all(root);
  const checkpoint::CheckpointDir dir(root);
  EXPECT_NE(error_of([&] { checkpoint::resolve_checkpoint(root); }).find("holds no checkpoint"), std::string::npos);
  for (std::uint64_t step : {2, 4, 6, 8}) {
    const std::string p = dir.begin_partial(step);
    write_bytes(p + "/manifest.json", "{}");
    dir.publish(step, 2, nullptr);
    EXPECT_EQ(checkpoint::resolve_checkpoint(root), root + "/" + checkpoint::checkpoint_name(step));
  }
  EXPECT_EQ(dir.complete_steps(), (std::vector<std::uint64_t>{6, 8}));
  EXPECT_EQ(dir.leftovers().size(), 2u);  // steps 2 and 4, renamed to .deleting
  dir.remove_leftovers();
  EXPECT_TRUE(dir.leftovers().empty());
  EXPECT_EQ(read_bytes(root + "/latest"), "step-00000008\n");

  // A partial folder left by a crash is never a checkpoint; the next publish removes it.
  dir.begin_partial(10);
  EXPECT_EQ(dir.leftovers().size(), 1u);
  EXPECT_EQ(checkpoint::resolve_checkpoint(root), root + "/step-00000008");
  write_bytes(dir.begin_partial(12) + "/manifest.json", "{}");
  dir.publish(12, 0, nullptr);
  dir.remove_leftovers();
  EXPECT_TRUE(dir.leftovers().empty());
  EXPECT_EQ(dir.complete_steps(), (std::vector<std::uint64_t>{6, 8, 12}));

  // A step published again (a run resumed from step 6 reaches step 8 again): the two folders
  // swap in one rename; step 8 holds the new one, the old one is on its way out; step 12, later
  // than 8 (from before the resume), is not pruned.
  write_bytes(dir.begin_partial(8) + "/manifest.json", "{\"again\": 1}");
  dir.publish(8, 1, nullptr);
  EXPECT_EQ(read_bytes(root + "/step-00000008/manifest.json"), "{\"again\": 1}");
  EXPECT_EQ(read_bytes(root + "/latest"), "step-00000008\n");
  EXPECT_EQ(dir.complete_steps(), (std::vector<std::uint64_t>{8, 12}));
  dir.remove_leftovers();
  EXPECT_TRUE(dir.leftovers().empty());

  // latest naming a folder that is gone: an error that says what to do.
  fs::remove_all(root + "/step-00000008");
  EXPECT_NE(error_of([&] { checkpoint::resolve_checkpoint(root); }).find("not a complete checkpoint"),
            std::string::npos);
  write_bytes(dir.begin_partial(8) + "/manifest.json", "{}");
  dir.publish(8, 0, nullptr);
  EXPECT_EQ(checkpoint::resolve_checkpoint(root + "/step-00000008"), root + "/step-00000008");
  EXPECT_NE(error_of([&] { checkpoint::resolve_checkpoint(root + "/nope"); }).find("no such folder"),
            std::string::npos);
  EXPECT_EQ(checkpoint::checkpoint_step("step-00000120"), std::optional<std::uint64_t>(120));
  EXPECT_FALSE(checkpoint::checkpoint_step(".step-00000120.partial").has_value());
  fs::remove_all(root);
}

// A run killed between publishing its first checkpoint (the rename into step-N) and writing
// `latest` (a window found while writing tests/soak) leaves step-N and no `latest`: --resume of
// the folder takes the newest complete checkpoint; a save that did not finish still never counts.
TEST(CheckpointDir, ResolvesTheNewestCompleteCheckpointWithoutLatest) {
  const std::string root = ::testing::TempDir() + "/ckdir-no-latest";
  fs::remove_all(root);
  const checkpoint::CheckpointDir dir(root);
  write_bytes(dir.begin_partial(2) + "/manifest.json", "{}");
  dir.publish(2, 0, nullptr);
  fs::remove(root + "/latest");  // what the kill leaves
  dir.begin_partial(4);
  EXPECT_EQ(checkpoint::complete_checkpoint_steps(root), (std::vector<std::uint64_t>{2}));
  EXPECT_EQ(checkpoint::resolve_checkpoint(root), root + "/step-00000002");
  fs::remove_all(root + "/step-00000002");
  EXPECT_NE(error_of([&] { checkpoint::resolve_checkpoint(root); }).find("holds no checkpoint"), std::string::npos);
  fs::remove_all(root);
}

// The engine-level checkpoint: 2 steps, a save that overlaps the next 2 steps, then a fresh
// engine with its states in another tier resumes from it; its 2 steps give the same bits as the
// first engine's steps 3 and 4.
TEST(CheckpointEngine, ResumeInAnotherTierGivesTheSameBits) {
  struct Placement {
    config::OffloadDevice params, optimizer;
  };
  const Placement saves[] = {{config::OffloadDevice::kNvme, config::OffloadDevice::kNvme},
                             {config::OffloadDevice::kCpu, config::OffloadDevice::kCpu}};
  const Placement loads[] = {{config::OffloadDevice::kCpu, config::OffloadDevice::kCpu},
                             {config::OffloadDevice::kNone, config::OffloadDevice::kNone}};
  for (int c = 0; c < 2; ++c) {
    TempDir tmp;
    const std::string ck = tmp.path() + "/ck";
    std::vector<std::vector<float>> straight;
    {
      EngineRun run(make_config(3, saves[c].params, saves[c].optimizer, tmp.path(), c == 0 ? 1.0 : 0.0));
      checkpoint::CrashPoints crash;
      checkpoint::CheckpointSaver saver(checkpoint::CheckpointDir(ck), 2, *run.engine, *run.device, *run.comm,
                                        run.engine->tiers().io(), crash);
      run.step(0);
      run.step(0);
      saver.begin(2, "{}");
      run.step(0);  // overlaps the shard write
      const std::optional<checkpoint::SaveResult> r = saver.finish();
      ASSERT_TRUE(r && r->ok) << (r ? r->error : "no save");
      EXPECT_GT(r->bytes, 0u);
      run.step(0);
      straight = run.weights();
    }
    EngineRun resumed(make_config(3, loads[c].params, loads[c].optimizer, tmp.path(), c == 0 ? 1.0 : 0.0));
    const checkpoint::CheckpointFiles files = checkpoint::open_checkpoint(ck);
    EXPECT_EQ(files.manifest.step, 2u);
    EXPECT_EQ(files.meta_json, "{}");
    checkpoint::load_states(files, *resumed.engine, resumed.engine->tiers().io());
    zero::ZeroEngine::TrainState state;
    state.adam_steps = 2;
    state.loss_scaler = resumed.engine->train_state().loss_scaler;
    resumed.engine->restore_train_state(state);
    resumed.step(0);
    resumed.step(0);
    EXPECT_TRUE(same_bits(straight, resumed.weights())) << "case " << c;

    // The export reads the same masters the engine had at step 2: a module's values are whole.
    checkpoint::CheckpointStates masters(files);
    ASSERT_EQ(masters.module_count(), kModules);
    for (int m = 0; m < kModules; ++m) EXPECT_EQ(masters.module_numel(m), module_numel(m));
  }
}

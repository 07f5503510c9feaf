// models/io/token_file.h and batch_loader.h: llm.c token files (round trip, every malformed
// case and its message; the uint32 kind in test_token_file_wide.cpp), bytes as tokens, vocabulary checks, and the loader's windows,
// wrap-around, ranks, seeded shuffle and bit-exact resume.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/io/batch_loader.h"
#include "models/io/token_file.h"
#include "tests/models/token_file_test_util.h"

namespace strata::models {
namespace {

namespace fs = std::filesystem;

class TokenFileTest : public testing::TokenFolderTest {};



// ---- token files --------------------------------------------------------------------------

TEST_F(TokenFileTest, RoundTripAndLittleEndianLayout) {
  std::vector<std::uint16_t> tokens = {0x1234, 0, 1, 50256, 65535};
  for (int i = 0; i < 1000; ++i) tokens.push_back(static_cast<std::uint16_t>(i * 7919));
  const std::string p = path("data.bin");
  write_token_file(p, tokens);

  const std::vector<unsigned char> raw = read_bytes(p);
  ASSERT_EQ(raw.size(), 1024 + 2 * tokens.size());
  // magic 20240520 = 0x0134D888, version 1, count, then zeros.
  EXPECT_EQ(raw[0], 0x88);
  EXPECT_EQ(raw[1], 0xD8);
  EXPECT_EQ(raw[2], 0x34);
  EXPECT_EQ(raw[3], 0x01);
  EXPECT_EQ(raw[4], 1);
  EXPECT_EQ(raw[5], 0);
  EXPECT_EQ(raw[6], 0);
  EXPECT_EQ(raw[7], 0);
  EXPECT_EQ(raw[8] | (raw[9] << 8) | (raw[10] << 16) | (raw[11] << 24),
            static_cast<int>(tokens.size()));
  EXPECT_TRUE(
      std::all_of(raw.begin() + 12, raw.begin() + 1024, [](unsigned char c) { return c == 0; }));
  EXPECT_EQ(raw[1024], 0x34);  // first token 0x1234, little-endian
  EXPECT_EQ(raw[1025], 0x12);

  const TokenData data = read_token_file(p);
  EXPECT_EQ(data.tokens, tokens);
  EXPECT_EQ(data.path, p);
  EXPECT_EQ(data.format, TokenFormat::kLlmc);
  EXPECT_EQ(data.min_vocab_size(), 65536);
}

TEST_F(TokenFileTest, WriteReplacesAtomicallyAndLeavesNoTemporaryFile) {
  const std::string p = path("data.bin");
  write_token_file(p, std::vector<std::uint16_t>(100, 7));
  write_token_file(p, std::vector<std::uint16_t>{1, 2, 3});
  EXPECT_EQ(read_token_file(p).tokens, (std::vector<std::uint16_t>{1, 2, 3}));
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    ++files;
    EXPECT_EQ(entry.path().filename(), "data.bin");
  }
  EXPECT_EQ(files, 1);
}

TEST_F(TokenFileTest, WriteIntoAMissingFolderFailsCleanly) {
  const Error e = expect_error(
      [&] { write_token_file(path("no/such/folder/x.bin"), std::vector<std::uint16_t>{1}); });
  EXPECT_HAS(std::string(e.what()), "open");
}

TEST_F(TokenFileTest, MissingFile) {
  const std::string p = path("absent.bin");
  const Error e = expect_error([&] { read_token_file(p); });
  EXPECT_EQ(e.what_happened(), "token file not found");
  EXPECT_EQ(e.where(), p);
  EXPECT_HAS(e.hint(), "check the path");
}

TEST_F(TokenFileTest, AFolderIsNotATokenFile) {
  const Error e = expect_error([&] { read_token_file(dir_.string()); });
  EXPECT_HAS(e.what_happened(), "not a regular file");
}

TEST_F(TokenFileTest, ShorterThanTheHeader) {
  const std::string p = path("short.bin");
  std::vector<unsigned char> bytes = file_bytes(kTokenFileMagic, 1, 10, 0);
  bytes.resize(100);  // the magic is right, the rest of the header is cut off
  write_bytes(p, bytes);
  const Error e = expect_error([&] { read_token_file(p); });
  EXPECT_HAS(e.what_happened(), "is 100 bytes, shorter than the 1024-byte header");
  EXPECT_EQ(e.where(), p);
  EXPECT_HAS(e.hint(), "cut off");

  write_bytes(p, {0x88, 0xD8});  // too short even for the magic
  EXPECT_HAS(expect_error([&] { read_token_file(p); }).what_happened(), "is 2 bytes, shorter");
  write_bytes(p, {});
  EXPECT_HAS(expect_error([&] { read_token_file(p); }).what_happened(), "is 0 bytes, shorter");
}

TEST_F(TokenFileTest, WrongMagicSuggestsText) {
  const std::string p = path("story.txt");
  const std::string text = "Once upon a time there was a token file that was really text.\n";
  std::vector<unsigned char> bytes;
  for (int i = 0; i < 40; ++i) bytes.insert(bytes.end(), text.begin(), text.end());
  write_bytes(p, bytes);
  const Error e = expect_error([&] { read_token_file(p); });
  EXPECT_HAS(e.what_happened(), "not an llm.c token file");
  EXPECT_HAS(e.what_happened(), "magic number 20240520");
  EXPECT_HAS(e.what_happened(), "plain text file");
  EXPECT_HAS(e.hint(), "--text");
  EXPECT_EQ(e.where(), p);

  // A short text file gets the same message, not "shorter than the header".
  write_bytes(p, {'h', 'e', 'l', 'l', 'o', '\n'});
  EXPECT_HAS(expect_error([&] { read_token_file(p); }).hint(), "--text");
}

TEST_F(TokenFileTest, UnsupportedVersion) {
  const std::string p = path("v2.bin");
  write_bytes(p, file_bytes(kTokenFileMagic, 2, 4, 16));  // version 2: uint32 tokens
  Error e = expect_error([&] { read_token_file(p); });
  EXPECT_HAS(e.what_happened(), "unsupported token file version 2");
  EXPECT_HAS(e.hint(), "\"llama-3\" for uint32");
  write_bytes(p, file_bytes(kTokenFileMagic, 7, 4, 8));
  e = expect_error([&] { read_token_file(p); });
  EXPECT_HAS(e.what_happened(), "version 7");
}

TEST_F(TokenFileTest, TruncatedBody) {
  const std::string p = path("cut.bin");
  write_bytes(p, file_bytes(kTokenFileMagic, 1, 100, 150));  // needs 200 body bytes
  const Error e = expect_error([&] { read_token_file(p); });
  EXPECT_HAS(e.what_happened(), "truncated");
  EXPECT_HAS(e.what_happened(), "says 100 tokens (1224 bytes in all) but the file has 1174 bytes");
  EXPECT_EQ(e.where(), p);
}

TEST_F(TokenFileTest, TrailingBytes) {
  const std::string p = path("long.bin");
  write_bytes(p, file_bytes(kTokenFileMagic, 1, 100, 203));
  const Error e = expect_error([&] { read_token_file(p); });
  EXPECT_HAS(e.what_happened(), "3 trailing bytes");
  EXPECT_HAS(e.what_happened(), "says 100 tokens (1224 bytes in all) but the file has 1227 bytes");
}

TEST_F(TokenFileTest, ZeroOrNegativeCount) {
  const std::string p = path("count.bin");
  write_bytes(p, file_bytes(kTokenFileMagic, 1, 0, 0));
  EXPECT_HAS(expect_error([&] { read_token_file(p); }).what_happened(), "holds no tokens");
  write_bytes(p, file_bytes(kTokenFileMagic, 1, -5, 0));
  EXPECT_HAS(expect_error([&] { read_token_file(p); }).what_happened(),
             "negative token count (-5)");
}

// ---- bytes as tokens ----------------------------------------------------------------------

TEST_F(TokenFileTest, TextFileAsBytes) {
  const std::string p = path("hello.txt");
  write_bytes(p, {'h', 'i', '!', '\n'});
  const TokenData data = read_bytes_as_tokens(p);
  EXPECT_EQ(data.tokens, (std::vector<std::uint16_t>{'h', 'i', '!', '\n'}));
  EXPECT_EQ(data.format, TokenFormat::kBytes);
  EXPECT_EQ(data.path, p);
  EXPECT_STREQ(token_format_name(data.format), "bytes");
}

TEST_F(TokenFileTest, BinaryFileAsBytesIsUnsignedAndSpansChunks) {
  const std::string p = path("all.bin");
  std::vector<unsigned char> bytes(3 * (1 << 20) + 17);  // crosses the 1 MiB read chunks
  for (std::size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<unsigned char>(i * 31 + i / 256);
  write_bytes(p, bytes);
  const TokenData data = read_bytes_as_tokens(p);
  ASSERT_EQ(data.size(), bytes.size());
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), data.tokens.begin()));
  EXPECT_EQ(data.min_vocab_size(), 256);
  data.validate(256);
}

TEST_F(TokenFileTest, EmptyTextFileIsAnError) {
  const std::string p = path("empty.txt");
  write_bytes(p, {});
  const Error e = expect_error([&] { read_bytes_as_tokens(p); });
  EXPECT_EQ(e.what_happened(), "the text file is empty");
  EXPECT_EQ(e.where(), p);
  EXPECT_EQ(expect_error([&] { read_bytes_as_tokens(path("absent.txt")); }).what_happened(),
            "text file not found");
}

// ---- vocabulary ---------------------------------------------------------------------------

TEST(TokenData, ValidateNamesTheFirstTokenOutsideTheVocabulary) {
  TokenData data;
  data.tokens = {1, 2, 300, 5, 1000, 4};
  data.path = "/data/x.bin";
  data.validate(1001);
  data.validate(65536);
  EXPECT_EQ(data.min_vocab_size(), 1001);
  try {
    data.validate(256);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.what_happened(),
              "token 300 at position 2 is outside the model's vocabulary (vocab_size 256)");
    EXPECT_EQ(e.where(), "/data/x.bin");
    EXPECT_EQ(e.hint(),
              "the file was made for a bigger vocabulary; use a model with vocab_size >= 1001");
  }
  try {
    data.validate(1000);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_HAS(e.what_happened(), "token 1000 at position 4");
  }
  data.format = TokenFormat::kBytes;
  data.tokens = {10, 200};
  try {
    data.validate(100);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.hint(),
              "byte-level text needs a vocabulary of 256 (any byte may occur; this file's largest "
              "is 200); use a model with vocab_size >= 256");
  }
}

// ---- the loader ---------------------------------------------------------------------------

TokenData iota_tokens(std::size_t n) {
  TokenData data;
  data.tokens.resize(n);
  std::iota(data.tokens.begin(), data.tokens.end(), std::uint16_t{0});
  data.path = "iota";
  return data;
}

struct Batch {
  std::vector<std::int32_t> inputs, targets;
  bool operator==(const Batch&) const = default;
};

Batch next_batch(BatchLoader& loader) {
  Batch b{std::vector<std::int32_t>(loader.tokens_per_batch()),
          std::vector<std::int32_t>(loader.tokens_per_batch())};
  loader.next(b.inputs.data(), b.targets.data());
  return b;
}

// With tokens[i] = i, the window a batch came from, after checking the batch is exactly that
// window: inputs = [w*BT, (w+1)*BT), targets = inputs + 1.
std::uint64_t window_of(const Batch& b) {
  const auto bt = static_cast<std::int32_t>(b.inputs.size());
  const std::int32_t w = b.inputs[0] / bt;
  EXPECT_EQ(b.inputs[0] % bt, 0);
  for (std::int32_t i = 0; i < bt; ++i) {
    EXPECT_EQ(b.inputs[static_cast<std::size_t>(i)], w * bt + i);
    EXPECT_EQ(b.targets[static_cast<std::size_t>(i)], w * bt + i + 1);
  }
  return static_cast<std::uint64_t>(w);
}

TEST(BatchLoader, WindowCount) {
  EXPECT_EQ(BatchLoader(iota_tokens(2 * 8 + 1), 2, 4, 0, 1).windows(), 2u);  // exactly 2 windows
  EXPECT_EQ(BatchLoader(iota_tokens(2 * 8), 2, 4, 0, 1).windows(), 1u);      // one token short of 2
  EXPECT_EQ(BatchLoader(iota_tokens(9), 2, 4, 0, 1).windows(), 1u);
  EXPECT_EQ(BatchLoader(iota_tokens(1000), 3, 5, 0, 1).windows(), 999u / 15u);
}

TEST(BatchLoader, TooShortDataIsAnError) {
  const TokenData data = iota_tokens(8);  // B*T = 8 needs 9
  try {
    BatchLoader loader(data, 2, 4, 0, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.what_happened(),
              "not enough tokens for one batch: B=2 x T=4 needs at least B*T+1 = 9 tokens, and "
              "the data has 8");
    EXPECT_EQ(e.where(), "iota");
    EXPECT_HAS(e.hint(), "lower the batch size or the sequence length");
  }
  EXPECT_THROW(BatchLoader(data, std::int64_t{1} << 40, std::int64_t{1} << 40, 0, 1), Error);
}

TEST(BatchLoader, SequentialWindowsAndWrapAround) {
  const TokenData data = iota_tokens(3 * 8 + 5);  // W = 3; the last 4 tokens are never read
  BatchLoader loader(data, 2, 4, 0, 1);
  ASSERT_EQ(loader.windows(), 3u);
  // Exactly as specified, checked against indices for the first batch.
  Batch first = next_batch(loader);
  EXPECT_EQ(first.inputs, (std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(first.targets, (std::vector<std::int32_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  for (std::uint64_t k = 1; k < 10; ++k) {
    EXPECT_EQ(loader.window_at(k), k % 3);
    EXPECT_EQ(window_of(next_batch(loader)), k % 3) << "micro-batch " << k;
  }
  EXPECT_EQ(loader.micro_batches(), 10u);
}

TEST(BatchLoader, LastWindowUsesTheLastToken) {
  const TokenData data = iota_tokens(2 * 6 + 1);
  BatchLoader loader(data, 1, 6, 0, 1);
  next_batch(loader);
  const Batch b = next_batch(loader);
  EXPECT_EQ(b.targets.back(), 12);
}

TEST(BatchLoader, RanksInterleaveAndTogetherReadTheSingleRankOrder) {
  const TokenData data = iota_tokens(7 * 6 + 1);  // W = 7, coprime with world = 3
  for (const bool shuffle : {false, true}) {
    const LoaderOptions options{shuffle, 42};
    BatchLoader single(data, 2, 3, 0, 1, options);
    std::vector<BatchLoader> ranks;
    for (int r = 0; r < 3; ++r) ranks.emplace_back(data, 2, 3, r, 3, options);
    for (std::uint64_t k = 0; k < 20; ++k) {  // almost 9 epochs
      for (int r = 0; r < 3; ++r) {
        const Batch mine = next_batch(ranks[static_cast<std::size_t>(r)]);
        if (!shuffle) {
          EXPECT_EQ(window_of(mine), (k * 3 + static_cast<std::uint64_t>(r)) % 7);
        }
        EXPECT_EQ(mine, next_batch(single))
            << "step " << k << " rank " << r << " shuffle " << shuffle;
      }
    }
  }
}

TEST(BatchLoader, ShuffleIsAPermutationPerEpoch) {
  const std::uint64_t w = 50;
  const TokenData data = iota_tokens(w * 4 + 1);
  BatchLoader loader(data, 1, 4, 0, 1, {true, 1234});
  std::vector<std::vector<std::uint64_t>> epochs;
  for (int e = 0; e < 4; ++e) {
    std::vector<std::uint64_t> order;
    for (std::uint64_t i = 0; i < w; ++i) order.push_back(window_of(next_batch(loader)));
    std::vector<std::uint64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::uint64_t> all(w);
    std::iota(all.begin(), all.end(), 0u);
    EXPECT_EQ(sorted, all) << "epoch " << e;
    EXPECT_EQ(order, shuffled_windows(w, 1234, static_cast<std::uint64_t>(e)));
    epochs.push_back(order);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  std::vector<std::uint64_t> identity(w);
  std::iota(identity.begin(), identity.end(), 0u);
  EXPECT_NE(epochs[0], identity);
}

TEST(BatchLoader, ShuffleIsDeterministicGivenTheSeedAndDiffersAcrossSeeds) {
  const TokenData data = iota_tokens(64 * 4 + 1);
  auto run = [&](std::uint64_t seed) {
    BatchLoader loader(data, 2, 2, 0, 1, {true, seed});
    std::vector<Batch> out;
    for (int i = 0; i < 200; ++i) out.push_back(next_batch(loader));
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
  // seed+1 does not replay seed's second epoch (the seed is mixed before the epoch is added).
  EXPECT_NE(shuffled_windows(64, 7, 1), shuffled_windows(64, 8, 0));
}

TEST(BatchLoader, ShuffleOrderIsPinned) {
  // The same on every machine and standard library (values from an independent Python
  // transcription of splitmix64 + Fisher-Yates): a change here changes every shuffled run.
  EXPECT_EQ(shuffled_windows(10, 0, 0), (std::vector<std::uint64_t>{6, 3, 2, 9, 8, 1, 4, 7, 0, 5}));
  EXPECT_EQ(shuffled_windows(10, 12345, 3),
            (std::vector<std::uint64_t>{4, 5, 0, 1, 8, 6, 2, 7, 9, 3}));
  EXPECT_EQ(shuffled_windows(1, 99, 5), (std::vector<std::uint64_t>{0}));
  EXPECT_TRUE(shuffled_windows(0, 99, 5).empty());
}

TEST(BatchLoader, SaveAndRestoreResumesBitExactly) {
  const TokenData data = iota_tokens(13 * 10 + 3);  // W = 13
  for (const bool shuffle : {false, true}) {
    for (int rank = 0; rank < 2; ++rank) {
      const LoaderOptions options{shuffle, 99};
      BatchLoader original(data, 2, 5, rank, 2, options);
      for (int i = 0; i < 11; ++i) next_batch(original);  // mid-epoch (22 slots of 13)
      const std::string saved = original.state().to_json();
      const LoaderState state = LoaderState::from_json(saved);
      EXPECT_EQ(state, original.state());
      EXPECT_EQ(state.micro_batches, 11u);

      BatchLoader resumed(data, 2, 5, rank, 2, options);
      next_batch(resumed);  // a position to be overwritten
      resumed.restore(state);
      for (int i = 0; i < 30; ++i)  // across several epochs
        ASSERT_EQ(next_batch(resumed), next_batch(original))
            << "batch " << i << " shuffle " << shuffle;
      EXPECT_EQ(resumed.state(), original.state());
    }
  }
}

TEST(BatchLoader, RestoreRefusesAStateForAnotherShape) {
  const TokenData data = iota_tokens(200);
  BatchLoader loader(data, 2, 5, 0, 2, {true, 1});
  const LoaderState good = loader.state();
  auto refuse = [&](LoaderState s, const std::string& field) {
    try {
      loader.restore(s);
      ADD_FAILURE() << "restored a state with another " << field;
    } catch (const Error& e) {
      EXPECT_HAS(e.what_happened(), "saved with " + field);
      EXPECT_HAS(e.hint(), "start a new run");
    }
  };
  LoaderState s = good;
  s.batch_size = 4;
  refuse(s, "batch_size");
  s = good;
  s.seq_len = 4;
  refuse(s, "seq_len");
  s = good;
  s.world = 1;
  refuse(s, "world");
  s = good;
  s.ntokens = 201;
  refuse(s, "ntokens");
  s = good;
  s.shuffle = false;
  refuse(s, "shuffle");
  s = good;
  s.seed = 2;
  refuse(s, "seed");
  s = good;
  s.micro_batches = 1000;
  loader.restore(s);
  EXPECT_EQ(loader.micro_batches(), 1000u);
}

TEST(LoaderState, FromJsonValidates) {
  LoaderState s;
  s.micro_batches = 123456789012345ULL;
  s.batch_size = 4;
  s.seq_len = 1024;
  s.world = 8;
  s.ntokens = 1000000;
  s.shuffle = true;
  s.seed = 0xFFFFFFFFFFFFFFFFULL;  // the whole uint64 range survives JSON
  const std::string json = s.to_json();
  EXPECT_EQ(LoaderState::from_json(json), s);

  auto what = [](const std::string& text) {
    try {
      LoaderState::from_json(text, "ckpt/loader.json");
    } catch (const Error& e) {
      EXPECT_EQ(e.where(), "ckpt/loader.json");
      return e.what_happened();
    }
    ADD_FAILURE() << "accepted " << text;
    return std::string();
  };
  auto with = [&](const std::string& key, const std::string& value) {
    std::string out = json;
    const std::size_t at = out.find("\"" + key + "\":");
    const std::size_t begin = at + key.size() + 3;
    const std::size_t end = out.find_first_of(",}", begin);
    return out.replace(begin, end - begin, value);
  };
  EXPECT_HAS(what("{not json"), "not valid JSON");
  EXPECT_HAS(what("[1,2]"), "not a JSON object");
  EXPECT_HAS(what(with("format", "\"other\"")), "not a loader state");
  EXPECT_HAS(what(with("version", "2")), "unsupported loader state version 2");
  EXPECT_HAS(what(with("micro_batches", "-1")), "\"micro_batches\" must be a non-negative integer");
  EXPECT_HAS(what(with("micro_batches", "1.5")),
             "\"micro_batches\" must be a non-negative integer");
  EXPECT_HAS(what(with("batch_size", "0")), "\"batch_size\" is 0");
  EXPECT_HAS(what(with("seq_len", "\"1024\"")), "\"seq_len\" must be a non-negative integer");
  EXPECT_HAS(what(with("world", "4294967296")), "\"world\" is 4294967296");
  EXPECT_HAS(what(with("ntokens", "1")), "\"ntokens\" must be at least 2");
  EXPECT_HAS(what(with("shuffle", "1")), "\"shuffle\" must be true or false");
  EXPECT_HAS(what(R"({"format":"strata.loader_state","version":1})"), "has no \"micro_batches\"");
}

}  // namespace
}  // namespace strata::models

// models/io/token_file.h, llm.c's uint32 kind ("llama-3": magic 20240801, version 7): round trip
// and byte layout, the vocabulary check, magic and version pairs, sizes of 4 bytes a token, and
// the loader widening uint32 tokens into a batch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/io/batch_loader.h"
#include "models/io/token_file.h"
#include "tests/models/token_file_test_util.h"

namespace strata::models {
namespace {

namespace fs = std::filesystem;

class WideTokenFileTest : public testing::TokenFolderTest {};



TEST_F(WideTokenFileTest, Uint32RoundTripAndLayout) {
  std::vector<std::uint32_t> tokens = {0x01020304u, 0, 65535, 65536, 128255, 0x7fffffffu};
  for (std::uint32_t i = 0; i < 1000; ++i) tokens.push_back(i * 104729u % 128256u);
  const std::string p = path("llama.bin");
  write_token_file(p, tokens);

  const std::vector<unsigned char> raw = read_bytes(p);
  ASSERT_EQ(raw.size(), 1024 + 4 * tokens.size());
  // magic 20240801 = 0x0134D9A1, version 7, count, then zeros.
  EXPECT_EQ(raw[0], 0xA1);
  EXPECT_EQ(raw[1], 0xD9);
  EXPECT_EQ(raw[2], 0x34);
  EXPECT_EQ(raw[3], 0x01);
  EXPECT_EQ(raw[4], 7);
  EXPECT_EQ(raw[8] | (raw[9] << 8) | (raw[10] << 16) | (raw[11] << 24), static_cast<int>(tokens.size()));
  EXPECT_TRUE(std::all_of(raw.begin() + 12, raw.begin() + 1024, [](unsigned char c) { return c == 0; }));
  EXPECT_EQ(raw[1024], 0x04);  // first token 0x01020304, little-endian
  EXPECT_EQ(raw[1025], 0x03);
  EXPECT_EQ(raw[1026], 0x02);
  EXPECT_EQ(raw[1027], 0x01);

  const TokenData data = read_token_file(p);
  EXPECT_TRUE(data.wide);
  EXPECT_TRUE(data.tokens.empty());
  EXPECT_EQ(data.wide_tokens, tokens);
  EXPECT_EQ(data.size(), tokens.size());
  EXPECT_EQ(data.token_bytes(), 4u);
  EXPECT_EQ(data.at(4), 128255u);
  EXPECT_EQ(data.min_vocab_size(), 0x80000000LL);
  std::vector<std::int32_t> widened(3);
  data.copy_to(2, 3, widened.data());
  EXPECT_EQ(widened, (std::vector<std::int32_t>{65535, 65536, 128255}));

  // Written back through TokenData: the same bytes.
  const std::string q = path("again.bin");
  write_token_file(q, data);
  EXPECT_EQ(read_bytes(q), raw);
}

TEST_F(WideTokenFileTest, Uint32FileValidatesAgainstTheVocabulary) {
  const std::string p = path("llama.bin");
  write_token_file(p, std::vector<std::uint32_t>{1, 128000, 70000, 128255});
  const TokenData data = read_token_file(p);
  data.validate(128256);
  try {
    data.validate(100000);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.what_happened(), "token 128000 at position 1 is outside the model's vocabulary (vocab_size 100000)");
    EXPECT_HAS(e.hint(), "vocab_size >= 128256");
  }
}

TEST_F(WideTokenFileTest, MagicAndVersionMustBeLlmcsPairs) {
  const std::string p = path("mixed.bin");
  write_bytes(p, file_bytes(kTokenFileMagicU32, 1, 4, 16));  // the uint32 magic with version 1
  Error e = expect_error([&] { read_token_file(p); });
  EXPECT_HAS(e.what_happened(), "unsupported token file version 1 with magic 20240801");
  write_bytes(p, file_bytes(kTokenFileMagic, 7, 4, 16));  // the uint16 magic with version 7
  e = expect_error([&] { read_token_file(p); });
  EXPECT_HAS(e.what_happened(), "version 7 with magic 20240520");
  EXPECT_HAS(e.hint(), "strata tokenize");
}

TEST_F(WideTokenFileTest, Uint32SizesCountFourBytesAToken) {
  const std::string p = path("cut.bin");
  write_bytes(p, file_bytes(kTokenFileMagicU32, kTokenFileVersionU32, 100, 200));  // needs 400
  EXPECT_HAS(expect_error([&] { read_token_file(p); }).what_happened(),
             "says 100 tokens (1424 bytes in all) but the file has 1224 bytes");
  write_bytes(p, file_bytes(kTokenFileMagicU32, kTokenFileVersionU32, 100, 401));
  EXPECT_HAS(expect_error([&] { read_token_file(p); }).what_happened(), "1 trailing bytes");
  write_bytes(p, file_bytes(kTokenFileMagicU32, kTokenFileVersionU32, 100, 400));
  EXPECT_EQ(read_token_file(p).size(), 100u);
}

TEST(BatchLoader, WideTokensFillTheBatchAsInt32) {
  TokenData data;
  data.wide = true;
  for (std::uint32_t i = 0; i < 9; ++i) data.wide_tokens.push_back(100000 + i);
  BatchLoader loader(data, 2, 2, 0, 1);
  std::vector<std::int32_t> inputs(4), targets(4);
  loader.next(inputs.data(), targets.data());
  EXPECT_EQ(inputs, (std::vector<std::int32_t>{100000, 100001, 100002, 100003}));
  EXPECT_EQ(targets, (std::vector<std::int32_t>{100001, 100002, 100003, 100004}));
  loader.next(inputs.data(), targets.data());
  EXPECT_EQ(inputs, (std::vector<std::int32_t>{100004, 100005, 100006, 100007}));
  EXPECT_EQ(targets, (std::vector<std::int32_t>{100005, 100006, 100007, 100008}));
}

}  // namespace
}  // namespace strata::models

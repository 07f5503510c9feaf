// models/text_tokens.h and tokenizer_files.h: text cut into pieces tokenized in parallel gives
// exactly the ids of the whole text (the three byte-level fixtures, on the repository's docs plus
// Unicode), cuts refused where the tokenizer adds a prefix space, documents with an EOS between
// them, uint32 tokens above 65,536 ids, errors naming the file and bytes, the tokenizer of a model
// folder (refused when larger than the model's vocabulary or unloadable), and the tokenizer files
// read and written byte for byte.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/text_tokens.h"
#include "models/tokenizer/tokenizer.h"
#include "models/tokenizer_files.h"

namespace strata::models {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = STRATA_TOKENIZER_FIXTURES;
const fs::path kSource = STRATA_SOURCE_DIR;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
  ASSERT_TRUE(out.good());
}

// About 150 KB of real text: the repository's docs, with Unicode lines, digits and the fixtures'
// special tokens between some paragraphs.
std::string corpus() {
  std::string text = read_file(kSource / "README.md") + "\n" + read_file(kSource / "docs/architecture.md");
  text += "\n\nCafé naïve — 東京 2024年\n42 apples\n<|endoftext|>Next document\n<|end_of_text|>\nemoji 🦙 end\n";
  return text;
}

std::vector<std::int32_t> all_tokens(const TokenData& data) {
  std::vector<std::int32_t> ids(data.size());
  data.copy_to(0, data.size(), ids.data());
  return ids;
}

class TextTokensTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "strata_text_tokens_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(TextTokensTest, PiecesGiveTheIdsOfTheWholeText) {
  const std::string text = corpus();
  const fs::path file = dir_ / "corpus.txt";
  write_file(file, text);
  for (const char* name : {"gpt2", "llama3", "qwen2"}) {
    SCOPED_TRACE(name);
    const Tokenizer tokenizer = Tokenizer::load((kFixtures / name).string());
    const std::vector<std::size_t> cuts = cut_points(tokenizer, text, 2048);
    EXPECT_GT(cuts.size(), text.size() / 2048 / 2) << "too few cuts: the rules refuse good places";
    for (std::size_t c : cuts) EXPECT_TRUE(text[c - 1] == '\n' && std::isalnum(static_cast<unsigned char>(text[c])));

    TextTokensOptions options;
    options.threads = 3;
    options.piece_bytes = 2048;
    int calls = 0;
    bool finished = false;
    options.progress = [&](const TextTokensProgress& p) {
      ++calls;
      finished = p.finished;
      EXPECT_LE(p.bytes_done, p.bytes_total);
    };
    const TokenData data = tokenize_files(tokenizer, {file.string()}, options);
    EXPECT_EQ(all_tokens(data), tokenizer.encode(text));
    EXPECT_FALSE(data.wide);
    EXPECT_EQ(data.format, TokenFormat::kTokenized);
    EXPECT_EQ(data.path, file.string());
    EXPECT_GE(calls, 1);
    EXPECT_TRUE(finished);
  }
}

TEST_F(TextTokensTest, APrefixSpaceRefusesTheCutsAndKeepsTheIds) {
  // GPT-2's fixture with add_prefix_space: every piece would start with "Ġ".
  nlohmann::json j = nlohmann::json::parse(read_file(kFixtures / "gpt2/tokenizer.json"));
  j["pre_tokenizer"]["add_prefix_space"] = true;
  fs::create_directories(dir_ / "prefix");
  write_file(dir_ / "prefix/tokenizer.json", j.dump());
  const Tokenizer tokenizer = Tokenizer::load((dir_ / "prefix").string());
  const std::string text = corpus().substr(0, 40000);
  EXPECT_TRUE(cut_points(tokenizer, text, 1024).empty());
  write_file(dir_ / "t.txt", text);
  TextTokensOptions options;
  options.piece_bytes = 1024;
  options.threads = 2;
  EXPECT_EQ(all_tokens(tokenize_files(tokenizer, {(dir_ / "t.txt").string()}, options)), tokenizer.encode(text));
}

TEST_F(TextTokensTest, DocumentsWithASeparatorBetween) {
  const Tokenizer tokenizer = Tokenizer::load((kFixtures / "gpt2").string());
  write_file(dir_ / "a.txt", "Hello world\n");
  write_file(dir_ / "b.txt", "strata tokenize\n");
  write_file(dir_ / "c.txt", "");
  write_file(dir_ / "d.txt", "the end");
  const std::int32_t eos = *tokenizer.eos_id();
  TextTokensOptions options;
  options.separator = eos;
  const std::vector<std::string> paths = {(dir_ / "a.txt").string(), (dir_ / "b.txt").string(),
                                          (dir_ / "c.txt").string(), (dir_ / "d.txt").string()};
  std::vector<std::int32_t> want = tokenizer.encode("Hello world\n");
  want.push_back(eos);
  for (std::int32_t id : tokenizer.encode("strata tokenize\n")) want.push_back(id);
  want.push_back(eos);  // the empty document
  want.push_back(eos);
  for (std::int32_t id : tokenizer.encode("the end")) want.push_back(id);
  EXPECT_EQ(all_tokens(tokenize_files(tokenizer, paths, options)), want);
  // Without a separator the documents just follow each other.
  options.separator.reset();
  EXPECT_EQ(tokenize_files(tokenizer, paths, options).size(), want.size() - 3);
}

TEST_F(TextTokensTest, AVocabularyAbove65536GivesUint32Tokens) {
  // The Llama 3 fixture with one more added token at id 70000.
  nlohmann::json j = nlohmann::json::parse(read_file(kFixtures / "llama3/tokenizer.json"));
  j["added_tokens"].push_back({{"id", 70000}, {"content", "<|big|>"}, {"single_word", false}, {"lstrip", false},
                               {"rstrip", false}, {"normalized", false}, {"special", true}});
  fs::create_directories(dir_ / "big");
  write_file(dir_ / "big/tokenizer.json", j.dump());
  const Tokenizer tokenizer = Tokenizer::load((dir_ / "big").string());
  ASSERT_EQ(tokenizer.vocab_size(), 70001);
  write_file(dir_ / "t.txt", "a<|big|>b\nc");
  const TokenData data = tokenize_files(tokenizer, {(dir_ / "t.txt").string()});
  EXPECT_TRUE(data.wide);
  EXPECT_TRUE(data.tokens.empty());
  EXPECT_EQ(all_tokens(data), tokenizer.encode("a<|big|>b\nc"));
  EXPECT_EQ(data.min_vocab_size(), 70001);

  // A model folder whose config is smaller than the tokenizer: refused, naming both sizes.
  try {
    training_tokenizer((dir_ / "big").string(), 65536);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.what_happened().find("70001 ids, more than the model's vocab_size 65536"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(training_tokenizer((dir_ / "big").string(), 70001).has_value());
}

TEST_F(TextTokensTest, NotUtf8IsAnErrorNamingTheFileAndBytes) {
  const Tokenizer tokenizer = Tokenizer::load((kFixtures / "gpt2").string());
  std::string text = corpus().substr(0, 20000);
  text[15000] = '\xff';
  write_file(dir_ / "bad.txt", text);
  TextTokensOptions options;
  options.piece_bytes = 1000;
  options.threads = 2;
  try {
    tokenize_files(tokenizer, {(dir_ / "bad.txt").string()}, options);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.where().find("bad.txt (bytes "), std::string::npos) << e.what();
  }
  try {
    tokenize_files(tokenizer, {(dir_ / "absent.txt").string()});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.what_happened(), "text file not found");
  }
}

TEST_F(TextTokensTest, TheTokenizerOfAModelFolder) {
  // None: a folder without one, a config.json path, a preset's empty path.
  fs::create_directories(dir_ / "plain");
  write_file(dir_ / "plain/config.json", "{}");
  EXPECT_FALSE(training_tokenizer((dir_ / "plain").string(), 1000).has_value());
  EXPECT_FALSE(training_tokenizer((dir_ / "plain/config.json").string(), 1000).has_value());
  EXPECT_FALSE(training_tokenizer("", 1000).has_value());
  // A tokenizer that does not load: the loader's message, and what to do.
  write_file(dir_ / "plain/tokenizer.json", "{\"model\": {\"type\": \"WordPiece\"}}");
  try {
    training_tokenizer((dir_ / "plain").string(), 1000);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.what_happened().find("the model folder's tokenizer could not be loaded"), std::string::npos);
    EXPECT_NE(e.hint().find("--data"), std::string::npos);
  }
  const std::optional<Tokenizer> gpt2 = training_tokenizer((kFixtures / "gpt2").string(), 50257);
  ASSERT_TRUE(gpt2.has_value());
  EXPECT_EQ(gpt2->vocab_size(), 1200);
}

TEST_F(TextTokensTest, TokenizerFilesByteForByte) {
  fs::create_directories(dir_ / "src");
  fs::create_directories(dir_ / "dst");
  write_file(dir_ / "src/tokenizer.json", read_file(kFixtures / "llama3/tokenizer.json"));
  write_file(dir_ / "src/tokenizer_config.json", "{\"eos_token\": \"<|end_of_text|>\"}\n");
  write_file(dir_ / "src/generation_config.json", std::string("{\"eos_token_id\": [1]}\0x", 23));
  write_file(dir_ / "src/chat_template.jinja", "{{ messages[0].content }}");
  write_file(dir_ / "src/config.json", "{}");
  write_file(dir_ / "src/notes.txt", "not a tokenizer file");
  EXPECT_TRUE(has_tokenizer((dir_ / "src").string()));
  EXPECT_FALSE(has_tokenizer((dir_ / "dst").string()));
  const std::vector<ModelFile> files = read_tokenizer_files((dir_ / "src").string());
  EXPECT_EQ(file_names_text(files), "tokenizer.json, tokenizer_config.json, chat_template.jinja, generation_config.json");
  write_tokenizer_files((dir_ / "dst").string(), files);
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"}) {
    EXPECT_EQ(read_file(dir_ / "dst" / name), read_file(dir_ / "src" / name)) << name;
  }
  EXPECT_FALSE(fs::exists(dir_ / "dst/notes.txt"));
  EXPECT_FALSE(fs::exists(dir_ / "dst/config.json"));
  EXPECT_TRUE(read_tokenizer_files((dir_ / "src/config.json").string()).empty());
  EXPECT_EQ(file_names_text({}), "none");
  // GPT-2's older pair is a tokenizer too.
  EXPECT_TRUE(has_tokenizer((kFixtures / "gpt2_files").string()));
}

}  // namespace
}  // namespace strata::models

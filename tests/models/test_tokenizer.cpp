// models/tokenizer/tokenizer.h against Hugging Face `tokenizers`: for small BPE tokenizers shaped
// like GPT-2, Llama 3 and Qwen2 (byte-level; and GPT-2's vocab.json + merges.txt form) and Llama 2
// and Mistral v0.3 (SentencePiece-style), and variants of them,
// every golden string's ids (without and with special tokens), decode with and without
// skip_special, decode of each id alone (lossy UTF-8) and the streaming decoder must match what
// `tokenizers` 0.23.3 produced (tokenizer_fixtures/make_fixtures.py), and decode(encode(s)) == s.
// Then the API (ids, specials, bos/eos), UTF-8 repair as Rust's from_utf8_lossy, every refusal
// and its message, a long word (no quadratic merge) and concurrent encodes.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tests/models/model_test_util.h"
#include "models/tokenizer/tokenizer.h"

namespace strata::models {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using Ids = std::vector<std::int32_t>;

const fs::path kFixtures = STRATA_TOKENIZER_FIXTURES;

bool contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

#define EXPECT_HAS(s, part) \
  EXPECT_TRUE(contains((s), (part))) << "'" << (s) << "' lacks '" << (part) << "'"

const Json& golden() {
  static const Json g = [] {
    std::ifstream in(kFixtures / "golden.json");
    return Json::parse(in);
  }();
  return g;
}

bool valid_utf8(const std::string& s) {
  std::string copy = s;
  return utf8_take_valid(copy, true) == s;
}

// Every golden case of `name` through the tokenizer loaded from `path`.
void check_golden(const std::string& path, const std::string& name) {
  const Tokenizer tok = Tokenizer::load(path);
  const Json& cases = golden().at(name).at("cases");
  ASSERT_GT(cases.size(), 30u);
  for (const Json& c : cases) {
    const std::string text = c.at("text");
    SCOPED_TRACE(name + ": \"" + text.substr(0, 60) + "\"");
    const Ids want = c.at("ids").get<Ids>();
    const Ids got = tok.encode(text);
    EXPECT_EQ(got, want);
    EXPECT_EQ(tok.encode(text, true), c.at("ids_special").get<Ids>());
    EXPECT_EQ(tok.decode(want), c.at("decoded").get<std::string>());
    EXPECT_EQ(tok.decode(want, true), c.at("decoded_skip").get<std::string>());
    if (name == "gpt2" || name == "llama3") {  // the others normalize, or add "▁" and strip it
      EXPECT_EQ(tok.decode(got), text);
    }
    const auto each = c.at("decoded_each").get<std::vector<std::string>>();
    ASSERT_EQ(each.size(), want.size());
    for (std::size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(tok.decode(Ids{want[i]}), each[i]) << "id " << want[i];
    // Streaming: only whole characters come out, and together they are decode(ids).
    TokenStreamDecoder stream(tok);
    std::string streamed;
    for (const std::int32_t id : want) {
      const std::string part = stream.push(id);
      EXPECT_TRUE(valid_utf8(part));
      streamed += part;
    }
    streamed += stream.finish();
    EXPECT_EQ(streamed, c.at("decoded").get<std::string>());
  }
}

TEST(TokenizerGolden, Gpt2) { check_golden((kFixtures / "gpt2").string(), "gpt2"); }
TEST(TokenizerGolden, Gpt2TokenizerJsonPath) {
  check_golden((kFixtures / "gpt2" / "tokenizer.json").string(), "gpt2");
}
TEST(TokenizerGolden, Gpt2VocabAndMerges) { check_golden((kFixtures / "gpt2_files").string(), "gpt2"); }
TEST(TokenizerGolden, Llama3) { check_golden((kFixtures / "llama3").string(), "llama3"); }
TEST(TokenizerGolden, Qwen2) { check_golden((kFixtures / "qwen2").string(), "qwen2"); }
// SentencePiece-style: Llama 2's Prepend + Replace normalizer and no pre-tokenizer, and Mistral
// v0.3's Metaspace pre-tokenizer; byte_fallback, the Replace/ByteFallback/Fuse/Strip decoder.
TEST(TokenizerGolden, Llama2) { check_golden((kFixtures / "llama2").string(), "llama2"); }
TEST(TokenizerGolden, Mistral) { check_golden((kFixtures / "mistral").string(), "mistral"); }

// The variants: a base fixture with some top-level sections replaced ("set"), and the ids and
// decodes `tokenizers` gave for the result.
TEST(TokenizerGolden, Variants) {
  const Json& variants = golden().at("variants");
  ASSERT_EQ(variants.size(), 12u);
  for (const auto& [name, v] : variants.items()) {
    std::ifstream in(kFixtures / v.at("base").get<std::string>() / "tokenizer.json");
    Json j = Json::parse(in);
    for (const auto& [key, value] : v.at("set").items()) j[key] = value;
    test::TempDir dir;
    const fs::path path = fs::path(dir.path()) / "tokenizer.json";
    std::ofstream(path) << j.dump();
    const Tokenizer tok = Tokenizer::load(path.string());
    for (const Json& c : v.at("cases")) {
      const std::string text = c.at("text");
      SCOPED_TRACE(name + ": \"" + text.substr(0, 60) + "\"");
      const Ids want = c.at("ids").get<Ids>();
      EXPECT_EQ(tok.encode(text), want);
      EXPECT_EQ(tok.decode(want), c.at("decoded").get<std::string>());
      EXPECT_EQ(tok.decode(want, true), c.at("decoded_skip").get<std::string>());
      for (const bool skip : {false, true}) {  // the stream adds up to decode()
        TokenStreamDecoder stream(tok, skip);
        std::string streamed;
        for (const std::int32_t id : want) streamed += stream.push(id);
        streamed += stream.finish();
        EXPECT_EQ(streamed, c.at(skip ? "decoded_skip" : "decoded").get<std::string>());
      }
    }
  }
}

TEST(Tokenizer, Api) {
  const Tokenizer llama = Tokenizer::load((kFixtures / "llama3").string());
  EXPECT_EQ(llama.source(), (kFixtures / "llama3" / "tokenizer.json").string());
  EXPECT_EQ(llama.vocab_size(), 1001);  // 1000 trained + "Ġstrataword"
  EXPECT_EQ(llama.token_id("<|begin_of_text|>"), 0);
  EXPECT_EQ(llama.token_id("<|end_of_text|>"), 1);
  EXPECT_EQ(llama.token_id("Ġstrataword"), 1000);
  EXPECT_EQ(llama.token_id("no such token"), std::nullopt);
  EXPECT_EQ(llama.id_to_token(1000), "Ġstrataword");
  EXPECT_EQ(llama.id_to_token(1001), std::nullopt);
  EXPECT_EQ(llama.bos_id(), 0);
  EXPECT_EQ(llama.eos_id(), 1);
  EXPECT_TRUE(llama.is_special(0));
  EXPECT_FALSE(llama.is_special(1000));
  ASSERT_EQ(llama.added_tokens().size(), 2u);
  EXPECT_EQ(llama.added_tokens()[1].content, "<|end_of_text|>");
  EXPECT_TRUE(llama.added_tokens()[1].special);
  EXPECT_EQ(llama.token_bytes(1000), " strataword");
  // ignore_merges: the word is in the vocabulary, so it is one token.
  EXPECT_EQ(llama.encode(" strataword"), Ids{1000});
  EXPECT_EQ(llama.encode("hi", true).front(), 0);

  const Tokenizer gpt2 = Tokenizer::load((kFixtures / "gpt2_files").string());
  EXPECT_EQ(gpt2.source(), (kFixtures / "gpt2_files" / "vocab.json").string());
  EXPECT_EQ(gpt2.vocab_size(), 1200);
  EXPECT_EQ(gpt2.eos_id(), gpt2.token_id("<|endoftext|>"));
  EXPECT_EQ(gpt2.bos_id(), std::nullopt);  // GPT-2 adds none
  EXPECT_EQ(gpt2.encode("hi", true), gpt2.encode("hi"));

  const Tokenizer qwen = Tokenizer::load((kFixtures / "qwen2").string());
  EXPECT_EQ(qwen.eos_id(), qwen.token_id("<|endoftext|>"));
  // NFC: the decomposed and the precomposed é encode alike.
  EXPECT_EQ(qwen.encode("caf\u0065\u0301"), qwen.encode("caf\u00e9"));
  EXPECT_EQ(qwen.decode(qwen.encode("caf\u0065\u0301")), "caf\u00e9");
}

TEST(Tokenizer, SentencePieceApi) {
  const Tokenizer tok = Tokenizer::load((kFixtures / "llama2").string());
  EXPECT_EQ(tok.token_id("<unk>"), 0);
  EXPECT_EQ(tok.bos_id(), 1);  // the TemplateProcessing's <s>
  EXPECT_EQ(tok.eos_id(), 2);  // </s>
  EXPECT_EQ(tok.token_id("<0x41>"), 3 + 0x41);
  EXPECT_EQ(tok.token_bytes(3 + 0x41), "A");      // a byte token: its byte
  EXPECT_EQ(tok.token_bytes(3 + 0xE6), "\xE6");   // alone: part of a character
  const auto piece = tok.token_id("\u2581the");
  ASSERT_TRUE(piece.has_value());
  EXPECT_EQ(tok.token_bytes(*piece), " the");     // "▁" reads as a space after the first token
  EXPECT_EQ(tok.decode(Ids{*piece}), "the");      // Strip drops the first one
  EXPECT_EQ(tok.encode("the", true), (Ids{1, *piece}));
  // Byte fallback: a character outside the vocabulary is its UTF-8 bytes' tokens.
  const Ids rocket = tok.encode("\U0001F680");
  EXPECT_EQ(rocket.back(), 3 + 0x80);
  EXPECT_EQ(tok.decode(rocket), "\U0001F680");
  // An invalid run of byte tokens is one U+FFFD per byte (HF's ByteFallback decoder).
  EXPECT_EQ(tok.decode(Ids{3 + 0xF0, 3 + 0x9F}), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_TRUE(tok.is_special(1));
  EXPECT_FALSE(tok.is_special(*piece));
}

TEST(Tokenizer, TokenizerConfigNamesBosAndEos) {
  test::TempDir dir;
  fs::copy_file(kFixtures / "qwen2" / "tokenizer.json", fs::path(dir.path()) / "tokenizer.json");
  std::ofstream(fs::path(dir.path()) / "tokenizer_config.json")
      << R"({"bos_token": null, "eos_token": {"content": "<|im_end|>", "special": true}})";
  const Tokenizer tok = Tokenizer::load(dir.path());
  EXPECT_EQ(tok.bos_id(), std::nullopt);
  EXPECT_EQ(tok.eos_id(), tok.token_id("<|im_end|>"));
  std::ofstream(fs::path(dir.path()) / "tokenizer_config.json") << R"({"eos_token": "<|nope|>"})";
  try {
    (void)Tokenizer::load(dir.path());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_HAS(e.where(), "tokenizer_config.json");
    EXPECT_HAS(e.what_happened(), "<|nope|>");
  }
}

TEST(Tokenizer, Utf8RepairAsFromUtf8Lossy) {
  const std::string r = "\xEF\xBF\xBD";
  auto lossy = [](std::string s) { return utf8_take_valid(s, true); };
  EXPECT_EQ(lossy("abc"), "abc");
  EXPECT_EQ(lossy("\xF0\x9F\x98"), r);               // a truncated emoji: one U+FFFD
  EXPECT_EQ(lossy("a\xC3(b"), "a" + r + "(b");
  EXPECT_EQ(lossy("\xE0\x80\x80"), r + r + r);       // overlong: E0 needs A0..BF next
  EXPECT_EQ(lossy("\xED\xA0\x80"), r + r + r);       // a surrogate
  EXPECT_EQ(lossy("\xF4\x90\x80\x80"), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(lossy("\xFF\xC0\x80"), r + r + r);
  EXPECT_EQ(lossy("\xE4\xB8"), r);
  EXPECT_EQ(lossy("\xE4\xB8\xAD"), "\xE4\xB8\xAD");
  // Not final: an incomplete character at the end waits.
  std::string pending = "x\xF0\x9F";
  EXPECT_EQ(utf8_take_valid(pending, false), "x");
  EXPECT_EQ(pending, "\xF0\x9F");
  pending += "\x98\x80";
  EXPECT_EQ(utf8_take_valid(pending, false), "\xF0\x9F\x98\x80");
  EXPECT_TRUE(pending.empty());
}

TEST(Tokenizer, StreamingWaitsForWholeCharacters) {
  const Tokenizer tok = Tokenizer::load((kFixtures / "gpt2").string());
  const std::string text = "emoji 🚀 and 中文 done";
  const Ids ids = tok.encode(text);
  TokenStreamDecoder stream(tok);
  std::string out;
  int empty_pushes = 0;
  for (const std::int32_t id : ids) {
    const std::string part = stream.push(id);
    empty_pushes += part.empty();
    out += part;
  }
  EXPECT_GT(empty_pushes, 0);  // the emoji and the CJK are split into byte tokens
  EXPECT_EQ(out + stream.finish(), text);
  // A partial character at the end becomes U+FFFD on finish().
  const Ids rocket = tok.encode("🚀");
  ASSERT_GT(rocket.size(), 1u);
  EXPECT_EQ(stream.push(rocket[0]), "");
  EXPECT_EQ(stream.finish(), "\xEF\xBF\xBD");
  TokenStreamDecoder skip(tok, /*skip_special=*/true);
  EXPECT_EQ(skip.push(*tok.token_id("<|endoftext|>")), "");
}

// ---- errors ---------------------------------------------------------------------------------

// Loads `json` written as a tokenizer.json; returns the Error.
Error load_error(const std::string& json) {
  test::TempDir dir;
  const fs::path p = fs::path(dir.path()) / "tokenizer.json";
  std::ofstream(p) << json;
  try {
    (void)Tokenizer::load(p.string());
  } catch (const Error& e) {
    EXPECT_HAS(e.where(), p.string());
    return e;
  }
  ADD_FAILURE() << "no error for " << json.substr(0, 200);
  return Error("none");
}

// The Llama 3 fixture with one edit.
std::string llama_with(const std::function<void(Json&)>& edit) {
  std::ifstream in(kFixtures / "llama3" / "tokenizer.json");
  Json j = Json::parse(in);
  edit(j);
  return j.dump();
}

TEST(TokenizerErrors, MissingFilesAndBadJson) {
  try {
    (void)Tokenizer::load("/nonexistent/tok");
    FAIL();
  } catch (const Error& e) {
    EXPECT_HAS(e.what_happened(), "no such file or folder");
    EXPECT_HAS(e.where(), "/nonexistent/tok");
  }
  test::TempDir dir;
  try {
    (void)Tokenizer::load(dir.path());
    FAIL();
  } catch (const Error& e) {
    EXPECT_HAS(e.what_happened(), "neither tokenizer.json nor vocab.json + merges.txt");
  }
  EXPECT_HAS(load_error("{\"model\": ").what_happened(), "not valid JSON");
  // A number beyond a double is nlohmann's out_of_range, not a parse_error (found by tests/fuzz).
  EXPECT_HAS(load_error("{\"model\": 1e309}").what_happened(), "not valid JSON");
  EXPECT_HAS(load_error("[1, 2]").what_happened(), "expected a JSON object");
  EXPECT_HAS(load_error("{}").where(), "key \"model\"");
}

TEST(TokenizerErrors, RefusesWhatIsNotBpe) {
  Error e = load_error(llama_with([](Json& j) { j["model"]["type"] = "WordPiece"; }));
  EXPECT_HAS(e.where(), "key \"model.type\"");
  EXPECT_HAS(e.what_happened(), "WordPiece");
  EXPECT_HAS(e.what_happened(), "only BPE tokenizers are supported");

  e = load_error(llama_with([](Json& j) { j["model"]["type"] = "Unigram"; }));
  EXPECT_HAS(e.hint(), "ids");

  // A decoder chain is ByteLevel or SentencePiece-style, not both.
  e = load_error(llama_with([](Json& j) {
    j["decoder"] = Json{{"type", "Sequence"},
                        {"decoders", Json::array({Json{{"type", "ByteLevel"}},
                                                  Json{{"type", "ByteFallback"}}})}};
  }));
  EXPECT_HAS(e.where(), "decoder.decoders[1].type");
  EXPECT_HAS(e.what_happened(), "mixes ByteLevel");
  e = load_error(llama_with([](Json& j) {
    j["decoder"] = Json{{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 1}};
  }));
  EXPECT_HAS(e.where(), "decoder.stop");
  // Metaspace: one character; add_prefix_space false contradicting the scheme (as HF 0.23).
  e = load_error(llama_with([](Json& j) {
    j["pre_tokenizer"] = Json{{"type", "Metaspace"}, {"replacement", "ab"}};
  }));
  EXPECT_HAS(e.where(), "pre_tokenizer.replacement");
  e = load_error(llama_with([](Json& j) {
    j["pre_tokenizer"] = Json{{"type", "Metaspace"}, {"replacement", "\u2581"},
                              {"add_prefix_space", false}};
  }));
  EXPECT_HAS(e.where(), "pre_tokenizer.add_prefix_space");
  e = load_error(llama_with([](Json& j) {
    j["pre_tokenizer"] = Json{{"type", "Metaspace"}, {"replacement", "\u2581"},
                              {"prepend_scheme", "sometimes"}};
  }));
  EXPECT_HAS(e.where(), "pre_tokenizer.prepend_scheme");
  e = load_error(llama_with([](Json& j) { j["decoder"] = Json{{"type", "CTC"}}; }));
  EXPECT_HAS(e.where(), "decoder.type");
  EXPECT_HAS(e.what_happened(), "CTC");

  e = load_error(llama_with([](Json& j) { j["normalizer"] = Json{{"type", "Lowercase"}}; }));
  EXPECT_HAS(e.where(), "normalizer.type");
  EXPECT_HAS(e.what_happened(), "Lowercase");
  e = load_error(llama_with([](Json& j) {
    j["pre_tokenizer"]["pretokenizers"][0]["type"] = "Whitespace";
  }));
  EXPECT_HAS(e.where(), "pre_tokenizer.pretokenizers[0].type");
  e = load_error(llama_with([](Json& j) { j["post_processor"] = Json{{"type", "BertProcessing"}}; }));
  EXPECT_HAS(e.where(), "post_processor.type");
  e = load_error(llama_with([](Json& j) {
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  }));
  EXPECT_HAS(e.where(), "pre_tokenizer.pretokenizers[0].pattern.Regex");
  EXPECT_HAS(e.what_happened(), "PCRE2");
  e = load_error(llama_with([](Json& j) { j["model"]["dropout"] = 0.1; }));
  EXPECT_HAS(e.where(), "model.dropout");
}

TEST(TokenizerErrors, MalformedModel) {
  Error e = load_error(llama_with([](Json& j) { j["model"]["merges"][3] = Json::array({"Ġ", "zzzq"}); }));
  EXPECT_HAS(e.where(), "model.merges[3]");
  EXPECT_HAS(e.what_happened(), "missing from the vocabulary");
  e = load_error(llama_with([](Json& j) { j["model"]["merges"][5] = "a b c"; }));
  EXPECT_HAS(e.where(), "model.merges[5]");
  e = load_error(llama_with([](Json& j) { j["model"]["vocab"]["x"] = "seven"; }));
  EXPECT_HAS(e.where(), "model.vocab.x");
  // Found by tests/fuzz: an id of 2^31 - 1 overflowed id + 1 (undefined behaviour) and sized
  // arrays of 2^31 strings; ids are bounded (2^22).
  e = load_error(llama_with([](Json& j) { j["added_tokens"][1]["id"] = 2147483647; }));
  EXPECT_HAS(e.where(), "added_tokens[1].id");
  EXPECT_HAS(e.what_happened(), "2^22");
  e = load_error(llama_with([](Json& j) { j["model"]["vocab"]["zzzq"] = 1 << 22; }));
  EXPECT_HAS(e.where(), "model.vocab.zzzq");
  e = load_error(llama_with([](Json& j) { j["model"]["vocab"]["zzzq"] = 5; }));
  EXPECT_HAS(e.what_happened(), "given to two tokens");
  e = load_error(llama_with([](Json& j) { j["added_tokens"][1].erase("content"); }));
  EXPECT_HAS(e.where(), "added_tokens[1].content");
  e = load_error(llama_with([](Json& j) { j["model"].erase("vocab"); }));
  EXPECT_HAS(e.where(), "key \"model.vocab\"");
  EXPECT_HAS(e.what_happened(), "missing");

  test::TempDir dir;
  fs::copy_file(kFixtures / "gpt2_files" / "vocab.json", fs::path(dir.path()) / "vocab.json");
  std::ofstream(fs::path(dir.path()) / "merges.txt") << "#version: 0.2\nĠ t\nnot-a-merge\n";
  try {
    (void)Tokenizer::load(dir.path());
    FAIL();
  } catch (const Error& e2) {
    EXPECT_HAS(e2.where(), "merges.txt, line 3");
  }
}

TEST(TokenizerErrors, BadIdsAndText) {
  const Tokenizer tok = Tokenizer::load((kFixtures / "gpt2").string());
  try {
    (void)tok.decode(Ids{5, 1200});
    FAIL();
  } catch (const Error& e) {
    EXPECT_HAS(e.what_happened(), "token id 1200");
  }
  EXPECT_THROW((void)tok.decode(Ids{-1}), Error);
  TokenStreamDecoder stream(tok);
  EXPECT_THROW((void)stream.push(99999), Error);
  try {
    (void)tok.encode("ok\xC3");
    FAIL();
  } catch (const Error& e) {
    EXPECT_HAS(e.what_happened(), "not valid UTF-8 (byte 2 of 3)");
  }
}

// ---- speed and threads ------------------------------------------------------------------------

TEST(Tokenizer, LongWordIsNotQuadratic) {
  const Tokenizer tok = Tokenizer::load((kFixtures / "llama3").string());
  // One pre-tokenized word of 400k letters: a quadratic merge would take minutes.
  std::string word;
  for (int i = 0; i < 100000; ++i) word += "abcd"[i * 7 % 4];
  const auto t0 = std::chrono::steady_clock::now();
  const Ids ids = tok.encode(word);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(tok.decode(ids), word);
  EXPECT_LT(ms, 5000.0);
  std::printf("a 100000-letter word: %zu tokens in %.1f ms\n", ids.size(), ms);
}

TEST(Tokenizer, ConcurrentEncodesAgree) {
  const Tokenizer tok = Tokenizer::load((kFixtures / "qwen2").string());
  std::vector<std::string> texts;
  for (const Json& c : golden().at("qwen2").at("cases")) texts.push_back(c.at("text"));
  std::vector<Ids> want;
  for (const auto& t : texts) want.push_back(tok.encode(t));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round)
        for (std::size_t i = 0; i < texts.size(); ++i)
          mismatches[t] += tok.encode(texts[(i + t) % texts.size()]) != want[(i + t) % texts.size()];
    });
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

}  // namespace
}  // namespace strata::models

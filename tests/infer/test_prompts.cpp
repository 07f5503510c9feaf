// infer/prompts: --prompts FILE.jsonl (both forms, blank lines, every malformed line an error
// naming file:line) and OutputWriter (index order, flushed lines, early failure).
#include "infer/prompts.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace strata::infer {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "strata-infer-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(Prompts, ReadsBothFormsSkippingBlankLines) {
  TempDir dir;
  const std::string path = dir.file("p.jsonl");
  std::ofstream(path) << "{\"prompt\": \"Hello, world\"}\n"
                         "\n"
                         "   \r\n"
                         "{\"ids\": [1, 2, 2147483647, 0]}\r\n"
                         "{\"prompt\": \"caf\\u00e9 \\\"quoted\\\"\\nnewline\"}";  // no final newline
  const auto prompts = read_prompts(path);
  ASSERT_EQ(prompts.size(), 3u);
  EXPECT_EQ(prompts[0].index, 0u);
  EXPECT_TRUE(prompts[0].has_text);
  EXPECT_EQ(prompts[0].text, "Hello, world");
  EXPECT_TRUE(prompts[0].ids.empty());
  EXPECT_EQ(prompts[0].line, 1u);
  EXPECT_EQ(prompts[1].index, 1u);
  EXPECT_FALSE(prompts[1].has_text);
  EXPECT_EQ(prompts[1].ids, (std::vector<std::int32_t>{1, 2, 2147483647, 0}));
  EXPECT_EQ(prompts[1].line, 4u);
  EXPECT_EQ(prompts[2].index, 2u);
  EXPECT_EQ(prompts[2].text, "caf\xc3\xa9 \"quoted\"\nnewline");
  EXPECT_EQ(prompts[2].line, 5u);
}

// The message of the Error parse_prompts throws for `text`, or "" when none.
std::string error_of(const std::string& text) {
  try {
    parse_prompts(text, "in.jsonl");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Prompts, MalformedLinesNameFileAndLine) {
  const std::string good = "{\"prompt\": \"ok\"}\n\n";  // lines 1-2; the bad line is line 3
  const char* bad[] = {
      "{\"prompt\": \"unterminated}",       // bad JSON
      "[1, 2, 3]",                          // not an object
      "\"just a string\"",                  // not an object
      "{\"prompt\": \"a\", \"ids\": [1]}",  // both keys
      "{}",                                 // neither
      "{\"promt\": \"typo\"}",              // neither (a typo)
      "{\"prompt\": \"a\", \"max\": 3}",    // another key
      "{\"prompt\": \"\"}",                 // empty prompt
      "{\"prompt\": 42}",                   // not a string
      "{\"ids\": []}",                      // empty ids
      "{\"ids\": 5}",                       // not an array
      "{\"ids\": [1, -2]}",                 // negative
      "{\"ids\": [1, 2.5]}",                // not an integer
      "{\"ids\": [1, 3.0]}",                // a float, even if whole
      "{\"ids\": [\"7\"]}",                 // a string
      "{\"ids\": [true]}",                  // a bool
      "{\"ids\": [null]}",                  // null
      "{\"ids\": [2147483648]}",            // past int32
      "{\"ids\": [18446744073709551615]}",  // past int64
      "{\"prompt\": \"a\"} {\"prompt\": \"b\"}",  // two objects on one line
  };
  for (const char* line : bad) {
    const std::string what = error_of(good + line + "\n{\"ids\": [1]}\n");
    EXPECT_NE(what.find("in.jsonl:3"), std::string::npos) << line << " -> " << what;
    EXPECT_NE(what.find("--prompts"), std::string::npos) << line << " -> " << what;
  }
  EXPECT_NE(error_of("{\"ids\": [1, -2]}").find("negative"), std::string::npos);
  EXPECT_NE(error_of("{\"a\": 1, \"prompt\": \"x\"}").find("unknown key \"a\""), std::string::npos);
  // No prompt at all.
  EXPECT_NE(error_of("").find("no prompt"), std::string::npos);
  EXPECT_NE(error_of("\n  \n\n").find("no prompt"), std::string::npos);
}

TEST(Prompts, MissingFileIsAnError) {
  TempDir dir;
  try {
    read_prompts(dir.file("absent.jsonl"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("absent.jsonl"), std::string::npos) << e.what();
  }
}

TEST(Prompts, IdsOutsideTheVocabulary) {
  const auto prompts = parse_prompts("{\"prompt\": \"x\"}\n{\"ids\": [3, 9]}\n{\"ids\": [0, 10]}\n", "f.jsonl");
  EXPECT_NO_THROW(check_prompt_ids(prompts, 11, "f.jsonl"));
  try {
    check_prompt_ids(prompts, 10, "f.jsonl");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("f.jsonl:3"), std::string::npos) << what;
    EXPECT_NE(what.find("ids[1] = 10"), std::string::npos) << what;
  }
}

TEST(OutputWriter, CompletionJsonHasTheDocumentedKeys) {
  Completion c;
  c.index = 4;
  c.ids = {5, 6, 7};
  c.finish_reason = FinishReason::kStop;
  c.prompt_tokens = 12;
  EXPECT_EQ(completion_json(c),
            "{\"index\":4,\"ids\":[5,6,7],\"finish_reason\":\"stop\",\"prompt_tokens\":12}");
  c.text = "a \"b\"\n\xc3\xa9";
  c.finish_reason = FinishReason::kLength;
  c.ids.clear();
  EXPECT_EQ(completion_json(c),
            "{\"index\":4,\"ids\":[],\"text\":\"a \\\"b\\\"\\n\xc3\xa9\",\"finish_reason\":\"length\","
            "\"prompt_tokens\":12}");
  // A tokenizer that cut a character in half: U+FFFD, not an exception.
  c.text = std::string("ab\xc3");
  const auto j = nlohmann::json::parse(completion_json(c));
  EXPECT_EQ(j["text"], "ab\xef\xbf\xbd");
}

TEST(OutputWriter, WritesInIndexOrderLineByLine) {
  TempDir dir;
  const std::string path = dir.file("out.jsonl");
  OutputWriter out(path, 4);
  // Created at once, empty.
  ASSERT_TRUE(std::filesystem::exists(path));
  EXPECT_EQ(slurp(path), "");

  auto completion = [](std::size_t index) {
    Completion c;
    c.index = index;
    c.ids = {static_cast<std::int32_t>(100 + index)};
    c.text = "t" + std::to_string(index);
    c.finish_reason = index % 2 ? FinishReason::kStop : FinishReason::kLength;
    c.prompt_tokens = index + 1;
    return c;
  };
  out.add(completion(2));  // early: waits
  EXPECT_EQ(out.written(), 0u);
  EXPECT_EQ(out.waiting(), 1u);
  EXPECT_EQ(slurp(path), "");
  out.add(completion(0));  // 0 is written, 1 is still missing
  EXPECT_EQ(out.written(), 1u);
  EXPECT_EQ(lines_of(slurp(path)).size(), 1u);  // flushed: visible to another reader now
  out.add(completion(1));  // 1 and the waiting 2
  EXPECT_EQ(out.written(), 3u);
  EXPECT_EQ(out.waiting(), 0u);
  EXPECT_EQ(lines_of(slurp(path)).size(), 3u);
  out.add(completion(3));
  out.finish();

  const auto lines = lines_of(slurp(path));
  ASSERT_EQ(lines.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    const auto j = nlohmann::json::parse(lines[i]);
    EXPECT_EQ(j["index"], i);
    EXPECT_EQ(j["ids"], std::vector<int>{static_cast<int>(100 + i)});
    EXPECT_EQ(j["text"], "t" + std::to_string(i));
    EXPECT_EQ(j["finish_reason"], i % 2 ? "stop" : "length");
    EXPECT_EQ(j["prompt_tokens"], i + 1);
  }
}

TEST(OutputWriter, BorrowedStream) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    OutputWriter out(f, "tmpfile", 2);
    Completion c;
    c.index = 1;
    out.add(c);
    c.index = 0;
    out.add(c);
    out.finish();
  }
  // Not closed by the writer.
  ASSERT_EQ(std::fseek(f, 0, SEEK_SET), 0);
  char buf[256] = {};
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const auto lines = lines_of(std::string(buf, n));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(nlohmann::json::parse(lines[0])["index"], 0);
  EXPECT_EQ(nlohmann::json::parse(lines[1])["index"], 1);
}

TEST(OutputWriter, FailsEarlyOnAnUnwritablePath) {
  TempDir dir;
  // A folder that does not exist.
  try {
    OutputWriter out(dir.file("no/such/folder/out.jsonl"), 1);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--output"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
  // A path that is a folder.
  EXPECT_THROW(OutputWriter(dir.path(), 1), Error);
  // A read-only folder (root ignores permissions: skip that part).
  if (::geteuid() != 0) {
    const std::string ro = dir.file("ro");
    ASSERT_EQ(::mkdir(ro.c_str(), 0500), 0);
    try {
      OutputWriter out(ro + "/out.jsonl", 1);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("EACCES"), std::string::npos) << e.what();
    }
    ::chmod(ro.c_str(), 0700);
  }
}

TEST(OutputWriter, WriteFailureIsAnError) {
  // /dev/full: every write fails with ENOSPC, reported when the line is flushed.
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  OutputWriter out("/dev/full", 1);
  Completion c;
  try {
    out.add(c);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ENOSPC"), std::string::npos) << e.what();
  }
}

TEST(OutputWriterDeathTest, ProgrammingMistakesAssert) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // spdlog/OpenMP may have started threads
  TempDir dir;
  EXPECT_DEATH(
      {
        OutputWriter out(dir.file("a.jsonl"), 2);
        Completion c;
        c.index = 0;
        out.add(c);
        out.add(c);
      },
      "added twice");
  EXPECT_DEATH(
      {
        OutputWriter out(dir.file("b.jsonl"), 2);
        Completion c;
        c.index = 2;
        out.add(c);
      },
      "past the prompts");
  EXPECT_DEATH(
      {
        OutputWriter out(dir.file("c.jsonl"), 2);
        out.finish();
      },
      "before every prompt");
}

}  // namespace
}  // namespace strata::infer

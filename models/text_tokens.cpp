// Parallel tokenizing of documents (models/text_tokens.h): cut points, the worker pool, the
// batches of files, and the tokenizer of a model folder.
#include "models/text_tokens.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"
#include "models/tokenizer_files.h"

namespace strata::models {
namespace {

constexpr std::size_t kCheckBytes = 16 * 1024;         // the most context a cut's check reads a side
constexpr int kMaxFailedCuts = 16;                     // then the rest of a document is one piece
constexpr std::uint64_t kBatchBytes = 256ull << 20;    // text read before it is tokenized

bool ascii_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// Rule 2 of the header: the line before `cut` and the line after it give the same ids apart as
// together. `cut` follows a '\n'.
bool cut_keeps_ids(const Tokenizer& tokenizer, std::string_view text, std::size_t cut) {
  // The line before: from the '\n' before the one at cut - 1 (exclusive).
  std::size_t begin = 0;
  if (cut >= 2) {
    const std::size_t nl = text.rfind('\n', cut - 2);
    begin = nl == std::string_view::npos ? 0 : nl + 1;
  }
  // The line after: up to and including its '\n'.
  std::size_t end = text.find('\n', cut);
  end = end == std::string_view::npos ? text.size() : end + 1;
  if (cut - begin > kCheckBytes || end - cut > kCheckBytes) return false;
  try {
    std::vector<std::int32_t> apart = tokenizer.encode(text.substr(begin, cut - begin));
    const std::vector<std::int32_t> after = tokenizer.encode(text.substr(cut, end - cut));
    apart.insert(apart.end(), after.begin(), after.end());
    return apart == tokenizer.encode(text.substr(begin, end - begin));
  } catch (const Error&) {
    return false;  // not UTF-8 here: no cut; the piece's own encode reports it, with its place
  }
}

// One piece of one document of a batch.
struct Piece {
  std::size_t document = 0;  // in the batch
  std::size_t begin = 0;
  std::size_t end = 0;
};

// A document's file, read whole.
std::string read_document(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) throw Error("text file not found", path, "check the path");
    throw system_error(e, "open", path, "check the file's permissions");
  }
  std::string text;
  try {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw system_error(errno, "fstat", path);
    if (!S_ISREG(st.st_mode)) throw Error("the text file is not a regular file", path, "give a file");
    text.resize(static_cast<std::size_t>(st.st_size));
    std::size_t done = 0;
    for (;;) {  // to the end of the file, not to the size fstat saw
      if (done == text.size()) text.resize(std::max<std::size_t>(2 * text.size(), 4096));
      const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw system_error(errno, "read", path);
      }
      if (n == 0) break;
      done += static_cast<std::size_t>(n);
    }
    text.resize(done);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return text;
}

std::uint64_t file_bytes(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
}

// Tokenizes the pieces on progress.threads threads (ids[i] for pieces[i]) while the calling
// thread reports progress. On failure, the error of the first failing piece (lowest index) is
// rethrown, naming its file and bytes.
class PiecePool {
 public:
  PiecePool(const Tokenizer& tokenizer, const TextTokensOptions& options, TextTokensProgress& progress,
            std::chrono::steady_clock::time_point start)
      : tokenizer_(tokenizer), options_(options), progress_(progress), start_(start) {}

  std::vector<std::vector<std::int32_t>> run(const std::vector<std::string>& texts,
                                             const std::vector<std::string>& paths,
                                             const std::vector<Piece>& pieces) {
    ids_.assign(pieces.size(), {});
    errors_.assign(pieces.size(), std::nullopt);
    next_ = 0;
    finished_ = 0;
    first_failed_ = SIZE_MAX;
    const int n = std::max(1, std::min<int>(progress_.threads, static_cast<int>(pieces.size())));
    std::vector<std::thread> workers;
    workers.reserve(static_cast<std::size_t>(n));
    for (int t = 0; t < n; ++t) workers.emplace_back([&] { work(texts, pieces); });
    {
      std::unique_lock lock(mutex_);
      while (!done_.wait_for(lock, std::chrono::seconds(1), [&] { return finished_ == pieces.size(); })) {
        report_locked(false);
      }
    }
    for (std::thread& w : workers) w.join();
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      if (!errors_[i]) continue;
      const Error& e = *errors_[i];
      const Piece& p = pieces[i];
      throw Error(e.what_happened(),
                  fmt::format("{} (bytes {} to {})", paths[p.document], p.begin, p.end),
                  e.hint().empty() ? "the text must be UTF-8" : e.hint());
    }
    return std::move(ids_);
  }

  void report_locked(bool finished) {
    if (!options_.progress) return;
    progress_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    progress_.finished = finished;
    options_.progress(progress_);
  }
  std::mutex& mutex() { return mutex_; }

 private:
  void work(const std::vector<std::string>& texts, const std::vector<Piece>& pieces) {
    for (;;) {
      const std::size_t i = next_.fetch_add(1);
      if (i >= pieces.size()) return;
      const Piece& p = pieces[i];
      std::vector<std::int32_t> ids;
      std::optional<Error> error;
      // After a failure only the pieces before it still run: the error reported is the first
      // piece's that fails, whatever the threads' timing.
      if (i < first_failed_.load()) {
        try {
          ids = tokenizer_.encode(std::string_view(texts[p.document]).substr(p.begin, p.end - p.begin));
        } catch (const Error& e) {
          error = e;
          std::size_t seen = first_failed_.load();
          while (i < seen && !first_failed_.compare_exchange_weak(seen, i)) {
          }
        }
      }
      std::lock_guard lock(mutex_);
      progress_.bytes_done += p.end - p.begin;
      progress_.tokens += ids.size();
      ids_[i] = std::move(ids);
      errors_[i] = std::move(error);
      if (++finished_ == pieces.size()) done_.notify_one();
    }
  }

  const Tokenizer& tokenizer_;
  const TextTokensOptions& options_;
  TextTokensProgress& progress_;  // guarded by mutex_
  std::chrono::steady_clock::time_point start_;
  std::mutex mutex_;
  std::condition_variable done_;
  std::atomic<std::size_t> next_{0};
  std::atomic<std::size_t> first_failed_{SIZE_MAX};
  std::size_t finished_ = 0;  // guarded by mutex_
  std::vector<std::vector<std::int32_t>> ids_;
  std::vector<std::optional<Error>> errors_;
};

void append(TokenData& out, std::int32_t id) {
  if (out.wide) {
    out.wide_tokens.push_back(static_cast<std::uint32_t>(id));
  } else {
    STRATA_ASSERT(id >= 0 && id < kTokenFileMaxU16Vocab, "an id of a vocabulary of at most 65,536");
    out.tokens.push_back(static_cast<std::uint16_t>(id));
  }
}

}  // namespace

std::vector<std::size_t> cut_points(const Tokenizer& tokenizer, std::string_view text, std::size_t piece_bytes) {
  STRATA_ASSERT(piece_bytes > 0);
  std::vector<std::size_t> cuts;
  std::size_t start = 0;
  int failed = 0;
  while (text.size() - start > piece_bytes && failed < kMaxFailedCuts) {
    std::size_t from = start + piece_bytes - 1;  // a '\n' here or later: a cut at from + 1 or later
    bool cut = false;
    while (failed < kMaxFailedCuts) {
      const std::size_t nl = text.find('\n', from);
      if (nl == std::string_view::npos || nl + 1 >= text.size()) {
        failed = kMaxFailedCuts;  // no candidate left
        break;
      }
      from = nl + 1;
      if (!ascii_alnum(text[nl + 1])) continue;  // not a candidate (rule 1)
      if (cut_keeps_ids(tokenizer, text, nl + 1)) {
        cuts.push_back(nl + 1);
        start = nl + 1;
        cut = true;
        break;
      }
      ++failed;
    }
    if (!cut) break;
  }
  return cuts;
}

TokenData tokenize_files(const Tokenizer& tokenizer, const std::vector<std::string>& paths,
                         const TextTokensOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  TextTokensProgress progress;
  progress.documents = paths.size();
  progress.threads = options.threads > 0 ? options.threads
                                         : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  for (const std::string& p : paths) progress.bytes_total += file_bytes(p);

  TokenData out;
  out.format = TokenFormat::kTokenized;
  out.wide = tokenizer.vocab_size() > kTokenFileMaxU16Vocab;
  for (const std::string& p : paths) out.path += (out.path.empty() ? "" : ", ") + p;
  PiecePool pool(tokenizer, options, progress, start);

  std::size_t next_document = 0;
  while (next_document < paths.size()) {
    // A batch: documents until about kBatchBytes of text (at least one).
    std::vector<std::string> texts;
    std::vector<std::string> batch_paths;
    std::vector<Piece> pieces;
    std::uint64_t batch_bytes = 0;
    while (next_document < paths.size() && (texts.empty() || batch_bytes < kBatchBytes)) {
      texts.push_back(read_document(paths[next_document]));
      batch_paths.push_back(paths[next_document]);
      ++next_document;
      const std::string& text = texts.back();
      batch_bytes += text.size();
      std::size_t begin = 0;
      for (std::size_t cut : cut_points(tokenizer, text, options.piece_bytes)) {
        pieces.push_back({texts.size() - 1, begin, cut});
        begin = cut;
      }
      if (begin < text.size()) pieces.push_back({texts.size() - 1, begin, text.size()});
    }
    {
      std::lock_guard lock(pool.mutex());
      progress.pieces += pieces.size();
    }
    const std::size_t first_document = next_document - texts.size();
    std::vector<std::vector<std::int32_t>> ids = pool.run(texts, batch_paths, pieces);

    // In order: each document's pieces, a separator before every document but the first.
    std::size_t piece = 0;
    for (std::size_t d = 0; d < texts.size(); ++d) {
      if (options.separator && first_document + d > 0) {
        append(out, *options.separator);
        std::lock_guard lock(pool.mutex());
        ++progress.tokens;
      }
      for (; piece < pieces.size() && pieces[piece].document == d; ++piece) {
        for (std::int32_t id : ids[piece]) append(out, id);
        std::vector<std::int32_t>().swap(ids[piece]);
      }
    }
  }
  std::lock_guard lock(pool.mutex());
  pool.report_locked(true);
  return out;
}

std::optional<Tokenizer> training_tokenizer(const std::string& model_path, std::int64_t model_vocab_size) {
  if (!has_tokenizer(model_path)) return std::nullopt;
  std::optional<Tokenizer> tokenizer;
  try {
    tokenizer.emplace(Tokenizer::load(model_path));
  } catch (const Error& e) {
    throw Error("the model folder's tokenizer could not be loaded: " + e.what_happened() +
                    (e.where().empty() ? "" : " (" + e.where() + ")"),
                model_path,
                (e.hint().empty() ? std::string() : e.hint() + "; ") +
                    "or tokenize the text elsewhere and train on the token file with --data");
  }
  if (tokenizer->vocab_size() > model_vocab_size) {
    throw Error(fmt::format("the model folder's tokenizer ({}) has {} ids, more than the model's vocab_size {}",
                            tokenizer->source(), tokenizer->vocab_size(), model_vocab_size),
                model_path,
                "give the config.json the tokenizer was made for (vocab_size at least the tokenizer's), or the "
                "tokenizer made for this model");
  }
  return tokenizer;
}

}  // namespace strata::models

#include "models/io/batch_loader.h"

#include <fmt/format.h>

#include <cstddef>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/error.h"

namespace strata::models {
namespace {

constexpr const char* kStateFormat = "strata.loader_state";
constexpr std::int64_t kStateVersion = 1;

// splitmix64 (Steele, Lea, Flood 2014; the seeding generator of xoshiro): a 64-bit state
// advanced by the golden-ratio gamma, each output the state through a bijective mixer.
// Plain integer arithmetic, so every machine and standard library draws the same numbers.
std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t state) : state_(state) {}
  std::uint64_t next() { return mix64(state_ += 0x9e3779b97f4a7c15ULL); }

  // Uniform in [0, bound), bound >= 1, without modulo bias: draws below 2^64 mod bound are
  // rejected, so the accepted range is a whole number of copies of [0, bound).
  std::uint64_t below(std::uint64_t bound) {
    const std::uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    for (;;) {
      const std::uint64_t x = next();
      if (x >= threshold) return x % bound;
    }
  }

 private:
  std::uint64_t state_;
};

[[noreturn]] void bad_state(const std::string& what, const std::string& where) {
  throw Error(what, where,
              "the loader state comes from a strata checkpoint; use the file it wrote, unedited");
}

std::uint64_t get_u64(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end()) bad_state(fmt::format("the loader state has no \"{}\"", key), where);
  if (!it->is_number_unsigned())
    bad_state(fmt::format("the loader state's \"{}\" must be a non-negative integer, not {}", key,
                          it->dump()),
              where);
  return it->get<std::uint64_t>();
}

std::int64_t get_positive(const nlohmann::json& j, const char* key, std::uint64_t max,
                          const std::string& where) {
  const std::uint64_t v = get_u64(j, key, where);
  if (v == 0 || v > max)
    bad_state(fmt::format("the loader state's \"{}\" is {}; it must be in [1, {}]", key, v, max),
              where);
  return static_cast<std::int64_t>(v);
}

}  // namespace

std::vector<std::uint64_t> shuffled_windows(std::uint64_t windows, std::uint64_t seed,
                                            std::uint64_t epoch) {
  std::vector<std::uint64_t> perm(windows);
  for (std::uint64_t i = 0; i < windows; ++i) perm[i] = i;
  // Fisher-Yates from the back: position i takes a uniform pick among [0, i].
  SplitMix64 rng(mix64(seed) + epoch);
  for (std::uint64_t i = windows; i > 1; --i) std::swap(perm[i - 1], perm[rng.below(i)]);
  return perm;
}

// ---- LoaderState ----------------------------------------------------------------------

std::string LoaderState::to_json() const {
  nlohmann::ordered_json j;
  j["format"] = kStateFormat;
  j["version"] = kStateVersion;
  j["micro_batches"] = micro_batches;
  j["batch_size"] = batch_size;
  j["seq_len"] = seq_len;
  j["world"] = world;
  j["ntokens"] = ntokens;
  j["shuffle"] = shuffle;
  j["seed"] = seed;
  return j.dump();
}

LoaderState LoaderState::from_json(std::string_view json, const std::string& where) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) bad_state("the loader state is not valid JSON", where);
  if (!j.is_object()) bad_state("the loader state is not a JSON object", where);

  const auto format = j.find("format");
  if (format == j.end() || !format->is_string() || format->get<std::string>() != kStateFormat)
    bad_state(fmt::format("not a loader state: \"format\" must be \"{}\"", kStateFormat), where);
  const auto version = j.find("version");
  if (version == j.end() || !version->is_number_integer() ||
      version->get<std::int64_t>() != kStateVersion)
    bad_state(
        fmt::format("unsupported loader state version {} (this build reads version {})",
                    version == j.end() ? std::string("(none)") : version->dump(), kStateVersion),
        where);

  constexpr auto kMaxInt64 = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  constexpr auto kMaxInt = static_cast<std::uint64_t>(std::numeric_limits<int>::max());
  LoaderState s;
  s.micro_batches = get_u64(j, "micro_batches", where);
  s.batch_size = get_positive(j, "batch_size", kMaxInt64, where);
  s.seq_len = get_positive(j, "seq_len", kMaxInt64, where);
  s.world = get_positive(j, "world", kMaxInt, where);
  s.ntokens = get_u64(j, "ntokens", where);
  if (s.ntokens < 2) bad_state("the loader state's \"ntokens\" must be at least 2", where);
  const auto shuffle = j.find("shuffle");
  if (shuffle == j.end() || !shuffle->is_boolean())
    bad_state("the loader state's \"shuffle\" must be true or false", where);
  s.shuffle = shuffle->get<bool>();
  s.seed = get_u64(j, "seed", where);
  return s;
}

// ---- BatchLoader ----------------------------------------------------------------------

BatchLoader::BatchLoader(const TokenData& data, std::int64_t batch_size, std::int64_t seq_len,
                         int rank, int world, LoaderOptions options)
    : data_(data),
      batch_size_(batch_size),
      seq_len_(seq_len),
      rank_(rank),
      world_(world),
      options_(options) {
  STRATA_ASSERT(batch_size > 0 && seq_len > 0);
  STRATA_ASSERT(world > 0 && rank >= 0 && rank < world);
  const auto b = static_cast<std::uint64_t>(batch_size);
  const auto t = static_cast<std::uint64_t>(seq_len);
  const std::uint64_t ntokens = data.size();
  // B*T+1 tokens make one window; B*T itself may not even fit in 64 bits.
  const bool overflow = b > (std::numeric_limits<std::uint64_t>::max() - 1) / t;
  if (overflow || ntokens < b * t + 1)
    throw Error(
        fmt::format("not enough tokens for one batch: B={} x T={} needs at least "
                    "B*T+1 = {} tokens, and the data has {}",
                    batch_size, seq_len,
                    overflow ? std::string("(more than 2^64)") : fmt::format("{}", b * t + 1),
                    ntokens),
        data.path, "use more data, or lower the batch size or the sequence length");
  tokens_per_batch_ = b * t;
  windows_ = (ntokens - 1) / tokens_per_batch_;
}

const std::vector<std::uint64_t>& BatchLoader::permutation(std::uint64_t epoch) const {
  if (!perm_valid_ || perm_epoch_ != epoch) {
    perm_ = shuffled_windows(windows_, options_.seed, epoch);
    perm_epoch_ = epoch;
    perm_valid_ = true;
  }
  return perm_;
}

std::uint64_t BatchLoader::window_at(std::uint64_t k) const {
  const auto world = static_cast<std::uint64_t>(world_);
  const auto rank = static_cast<std::uint64_t>(rank_);
  STRATA_ASSERT(k <= (std::numeric_limits<std::uint64_t>::max() - rank) / world,
                "micro-batch index overflows 64 bits");
  const std::uint64_t slot = k * world + rank;  // global order: step-major, then rank
  if (!options_.shuffle) return slot % windows_;
  return permutation(slot / windows_)[slot % windows_];
}

void BatchLoader::next(std::int32_t* inputs, std::int32_t* targets) {
  STRATA_ASSERT(inputs != nullptr && targets != nullptr);
  const std::uint64_t window = window_at(micro_batches_);
  // Tokens [start, start + B*T] exist: (window + 1) * B*T <= W * B*T <= ntokens - 1.
  const std::uint64_t start = window * tokens_per_batch_;
  data_.copy_to(start, tokens_per_batch_, inputs);         // (B, T) row-major
  data_.copy_to(start + 1, tokens_per_batch_, targets);    // shifted by one
  ++micro_batches_;
}

LoaderState BatchLoader::state() const {
  LoaderState s;
  s.micro_batches = micro_batches_;
  s.batch_size = batch_size_;
  s.seq_len = seq_len_;
  s.world = world_;
  s.ntokens = data_.size();
  s.shuffle = options_.shuffle;
  s.seed = options_.seed;
  return s;
}

void BatchLoader::restore(const LoaderState& saved) {
  const LoaderState now = state();
  auto check = [&](const char* name, auto saved_value, auto current_value) {
    if (saved_value != current_value)
      throw Error(fmt::format("the loader state was saved with {} = {}, but this loader has {} = "
                              "{}; resuming would not read the same batches",
                              name, saved_value, name, current_value),
                  data_.path,
                  "resume with the same data, batch size, sequence length, world size, shuffle "
                  "and seed, or start a new run");
  };
  check("ntokens", saved.ntokens, now.ntokens);
  check("batch_size", saved.batch_size, now.batch_size);
  check("seq_len", saved.seq_len, now.seq_len);
  check("world", saved.world, now.world);
  check("shuffle", saved.shuffle, now.shuffle);
  check("seed", saved.seed, now.seed);
  micro_batches_ = saved.micro_batches;
}

}  // namespace strata::models

// Continuous batching (serve/batcher.h) on the host backend with llama-tiny (random weights):
// every request gets exactly the tokens `strata infer` gives its prompt alone (the generation
// loop with batch 1 and the prompt at index 0), whatever shares its batch, whenever it arrives,
// however its prompt is chunked; cancelling frees the row; a full queue and a drain refuse; the
// end tokens and max_tokens end a request; logprobs are the model's.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "infer/generator.h"
#include "infer/server.h"
#include "models/registry.h"
#include "runtime/device/device_config.h"
#include "serve/batcher.h"

namespace strata::serve {
namespace {

constexpr int kContext = 96;

std::unique_ptr<infer::Server> make_server(int batch, const std::string& kv_cache) {
  infer::ServerSetup s;
  s.spec = models::model_from_flags("", "llama-tiny");
  s.config = infer::inference_config("", *s.spec);
  s.device = runtime::device::device_options(s.config, "host", std::nullopt);
  s.batch = batch;
  s.kv_cache = kv_cache;
  s.prompts = static_cast<std::size_t>(batch);
  s.prompt_T = 48;
  s.max_T = kContext;
  s.seed = 7;
  return std::make_unique<infer::Server>(std::move(s), /*verbose=*/false);
}

struct Case {
  std::vector<std::int32_t> prompt;
  int max_tokens = 8;
  infer::SamplingOptions sampling;
};

// Prompts of 1..40 tokens, greedy and seeded sampling, 1..24 new tokens.
std::vector<Case> cases(int n) {
  std::vector<Case> out;
  for (int i = 0; i < n; ++i) {
    Case c;
    const int len = 1 + (i * 13) % 40;
    for (int t = 0; t < len; ++t) c.prompt.push_back(static_cast<std::int32_t>((i * 31 + t * 7 + 3) % 256));
    c.max_tokens = 1 + (i * 5) % 24;
    if (i % 3 != 0) {
      c.sampling.temperature = 0.8f + 0.1f * static_cast<float>(i % 4);
      c.sampling.top_k = i % 2 == 0 ? 40 : 0;
      c.sampling.top_p = i % 4 == 1 ? 0.9f : 1.0f;
      c.sampling.seed = 1000 + static_cast<std::uint64_t>(i);
    }
    out.push_back(c);
  }
  return out;
}

// What `strata infer` makes of the prompt alone: the generation loop, batch 1, prompt index 0.
std::vector<std::int32_t> alone(infer::Server& server, const Case& c, const std::vector<std::int32_t>& stop_ids = {}) {
  infer::GenerateOptions g;
  g.max_new_tokens = c.max_tokens;
  g.batch = 1;
  g.sampling = c.sampling;
  g.stop_ids = stop_ids;
  g.kv_cache = server.kv_cache_options();
  infer::Generator gen(server.model(), server.spec().vocab_size(), g,
                       static_cast<int>(c.prompt.size()) + c.max_tokens, server.hooks());
  infer::Prompt p;
  p.index = 0;
  p.ids = c.prompt;
  std::vector<std::int32_t> out;
  gen.run({p}, [&](infer::Completion done) { out = done.ids; });
  return out;
}

std::shared_ptr<RequestState> request(const Case& c, int top_logprobs = -1) {
  GenerationParams p;
  p.prompt = c.prompt;
  p.max_tokens = c.max_tokens;
  p.sampling = c.sampling;
  p.top_logprobs = top_logprobs;
  return std::make_shared<RequestState>(std::move(p));
}

struct Result {
  std::vector<GeneratedToken> tokens;
  EndReason end = EndReason::running;
  std::string error;
};

Result collect(RequestState& r) {
  Result out;
  for (;;) {
    RequestState::Update u = r.wait(std::chrono::milliseconds(100));
    for (auto& t : u.tokens) out.tokens.push_back(std::move(t));
    if (u.end != EndReason::running) {
      out.end = u.end;
      out.error = u.error;
      return out;
    }
  }
}

std::vector<std::int32_t> ids(const Result& r) {
  std::vector<std::int32_t> out;
  for (const auto& t : r.tokens) out.push_back(t.id);
  return out;
}

// Holds the engine at the start of its pass number `at` (1-based) until open(): what a test does
// before open() happens between two known passes, however slow or loaded the machine is, so the
// tests assert what the batcher does at a step, not what it happened to reach in some time.
class PassGate {
 public:
  explicit PassGate(int at) : at_(at) {}
  void pass() {
    std::unique_lock lock(mutex_);
    if (++count_ >= at_) opened_.wait(lock, [&] { return open_; });
  }
  void open() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    opened_.notify_all();
  }

 private:
  const int at_;
  std::mutex mutex_;
  std::condition_variable opened_;
  int count_ = 0;
  bool open_ = false;
};

std::unique_ptr<Batcher> make_batcher(infer::Server& server, int max_batch, int prefill_chunk, int max_queue = 64,
                                      std::vector<std::int32_t> stop_ids = {}, PassGate* gate = nullptr) {
  BatcherOptions o;
  o.max_batch = max_batch;
  o.max_queue = max_queue;
  o.prefill_chunk = prefill_chunk;
  o.context = kContext;
  o.kv_cache = server.kv_cache_options();
  o.stop_ids = std::move(stop_ids);
  infer::PassHooks hooks = server.hooks();
  if (gate != nullptr) {
    hooks.begin = [begin = hooks.begin, gate] {
      gate->pass();
      begin();
    };
  }
  return std::make_unique<Batcher>(server.model(), server.spec().vocab_size(), o, hooks, server.compute(), nullptr);
}

// A batcher whose passes a PassGate holds; the gate opens before the batcher is destroyed (a
// failed assertion must not leave its thread waiting).
struct GatedBatcher {
  GatedBatcher(infer::Server& server, int max_batch, int max_queue, int gate_at) : gate(gate_at) {
    batcher = make_batcher(server, max_batch, 512, max_queue, {}, &gate);
  }
  ~GatedBatcher() {
    gate.open();
    batcher.reset();
  }
  PassGate gate;
  std::unique_ptr<Batcher> batcher;
};

void expect_same_as_alone(const std::string& kv_cache, int max_batch, int prefill_chunk, bool staggered) {
  auto server = make_server(max_batch, kv_cache);
  const std::vector<Case> all = cases(14);
  std::vector<std::vector<std::int32_t>> expected;
  for (const Case& c : all) expected.push_back(alone(*server, c));
  auto batcher = make_batcher(*server, max_batch, prefill_chunk);
  std::vector<std::shared_ptr<RequestState>> states;
  for (std::size_t i = 0; i < all.size(); ++i) {
    states.push_back(request(all[i]));
    ASSERT_EQ(batcher->submit(states.back()), Admission::accepted);
    if (staggered && i % 3 == 2) std::this_thread::sleep_for(std::chrono::milliseconds(15));
  }
  for (std::size_t i = 0; i < all.size(); ++i) {
    const Result r = collect(*states[i]);
    EXPECT_EQ(r.end, EndReason::length) << "request " << i;
    EXPECT_EQ(ids(r), expected[i]) << "request " << i << " (prompt of " << all[i].prompt.size() << " tokens)";
  }
  EXPECT_TRUE(batcher->idle());
}

TEST(Batcher, EveryRequestGetsWhatItsPromptGetsAlone) { expect_same_as_alone("device", 4, 512, false); }

TEST(Batcher, RequestsJoiningWhileOthersDecodeGetTheSameTokens) { expect_same_as_alone("device", 3, 512, true); }

TEST(Batcher, ChunkedPrefillGivesTheSameTokens) { expect_same_as_alone("device", 4, 7, true); }

TEST(Batcher, KvCacheInPinnedHostMemoryGivesTheSameTokens) { expect_same_as_alone("host", 4, 9, true); }

TEST(Batcher, EndTokensEndARequestBeforeItsBudget) {
  auto server = make_server(2, "device");
  Case c = cases(3)[0];  // greedy
  c.max_tokens = 20;
  const std::vector<std::int32_t> full = alone(*server, c);
  ASSERT_GE(full.size(), 4u);
  const std::int32_t stop = full[3];
  std::vector<std::int32_t> expected(full.begin(), std::find(full.begin(), full.end(), stop));
  auto batcher = make_batcher(*server, 2, 512, 64, {stop});
  auto state = request(c);
  ASSERT_EQ(batcher->submit(state), Admission::accepted);
  const Result r = collect(*state);
  EXPECT_EQ(r.end, EndReason::stop_token);
  EXPECT_EQ(ids(r), expected);
}

TEST(Batcher, ACancelledRequestFreesItsRowForTheNext) {
  auto server = make_server(1, "device");
  // Pass 1 prefills the long request (its first token); pass 2, its first decoding step, waits.
  GatedBatcher g(*server, 1, 64, /*gate_at=*/2);
  Case long_one = cases(2)[1];
  long_one.max_tokens = kContext - static_cast<int>(long_one.prompt.size());
  auto a = request(long_one);
  ASSERT_EQ(g.batcher->submit(a), Admission::accepted);
  RequestState::Update u;
  do {
    u = a->wait(std::chrono::milliseconds(100));
  } while (u.tokens.empty() && u.end == EndReason::running);
  ASSERT_EQ(u.tokens.size(), 1u);
  a->cancel();  // the client goes away while pass 2 waits
  Case next = cases(3)[2];
  auto b = request(next);
  ASSERT_EQ(g.batcher->submit(b), Admission::accepted);  // waits: the one row is taken
  g.gate.open();
  const Result rb = collect(*b);
  EXPECT_EQ(rb.end, EndReason::length);
  EXPECT_EQ(ids(rb), alone(*server, next));
  const Result ra = collect(*a);
  EXPECT_EQ(ra.end, EndReason::cancelled);
  // Pass 2 was under way when the cancel came: its token is the one after the first, and the last;
  // the next turn frees the row.
  EXPECT_EQ(ra.tokens.size(), 1u);
  EXPECT_TRUE(g.batcher->idle());
}

TEST(Batcher, AFullQueueRefusesAndADrainRefusesWhileRunningOnesFinish) {
  auto server = make_server(1, "device");
  GatedBatcher g(*server, 1, /*max_queue=*/1, /*gate_at=*/1);  // nothing runs until the gate opens
  Case c = cases(2)[1];
  c.max_tokens = 30;
  auto a = request(c), b = request(c), d = request(c);
  ASSERT_EQ(g.batcher->submit(a), Admission::accepted);
  ASSERT_EQ(g.batcher->submit(b), Admission::accepted);
  EXPECT_EQ(g.batcher->submit(d), Admission::queue_full);  // a holds (or is about to hold) the row, b waits
  g.batcher->drain();
  EXPECT_EQ(g.batcher->submit(request(c)), Admission::draining);
  g.gate.open();
  EXPECT_EQ(collect(*a).end, EndReason::length);
  EXPECT_EQ(collect(*b).end, EndReason::length);
  EXPECT_TRUE(g.batcher->idle());
}

TEST(Batcher, CancelAllEndsQueuedAndRunningRequests) {
  auto server = make_server(2, "device");
  GatedBatcher g(*server, 2, 64, /*gate_at=*/1);
  Case c = cases(2)[1];
  c.max_tokens = kContext - static_cast<int>(c.prompt.size());
  std::vector<std::shared_ptr<RequestState>> states;
  for (int i = 0; i < 5; ++i) {
    states.push_back(request(c));
    ASSERT_EQ(g.batcher->submit(states.back()), Admission::accepted);
  }
  g.batcher->cancel_all();
  g.gate.open();
  for (auto& s : states) {
    const Result r = collect(*s);
    EXPECT_EQ(r.end, EndReason::cancelled);
    EXPECT_LE(r.tokens.size(), 2u);  // at most the passes already begun
  }
  EXPECT_TRUE(g.batcher->idle());
}

TEST(Batcher, LogprobsAreTheModelsLogSoftmax) {
  auto server = make_server(2, "device");
  auto batcher = make_batcher(*server, 2, 512);
  Case c = cases(1)[0];  // greedy
  c.max_tokens = 5;
  auto state = request(c, /*top_logprobs=*/4);
  ASSERT_EQ(batcher->submit(state), Admission::accepted);
  const Result r = collect(*state);
  ASSERT_EQ(r.tokens.size(), 5u);
  for (const GeneratedToken& t : r.tokens) {
    ASSERT_EQ(t.top.size(), 4u);
    EXPECT_EQ(t.top[0].id, t.id);  // greedy: the likeliest
    EXPECT_FLOAT_EQ(t.top[0].logprob, t.logprob);
    EXPECT_LE(t.logprob, 0.0f);
    double mass = 0;
    for (std::size_t k = 0; k < t.top.size(); ++k) {
      if (k > 0) {
        EXPECT_GE(t.top[k - 1].logprob, t.top[k].logprob);
      }
      mass += std::exp(static_cast<double>(t.top[k].logprob));
    }
    EXPECT_LE(mass, 1.0 + 1e-5);
  }
  EXPECT_EQ(ids(r), alone(*server, c));
}

}  // namespace
}  // namespace strata::serve

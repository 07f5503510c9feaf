// StopSignals: a signal sets a flag; optionally, the second one stops the process.
#include "train/stop_signals.h"

#include <atomic>
#include <cerrno>

#include "core/error.h"

namespace strata::train {
namespace {

// See the header: a handler can only reach these. Lock-free atomics: the handler may run on any
// thread (the optimizer worker, I/O threads) while the trainer reads the flag.
std::atomic<int> g_received{0};
std::atomic<bool> g_second_stops_now{false};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free);

void on_stop_signal(int sig) {
  if (g_received.load() != 0 && g_second_stops_now.load()) {
    // The second request: stop now, as if no handler were installed.
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  int none = 0;
  g_received.compare_exchange_strong(none, sig);
}

}  // namespace

StopSignals::StopSignals(std::initializer_list<int> signals, bool second_stops_now) : signals_(signals) {
  g_received.store(0);
  g_second_stops_now.store(second_stops_now);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  previous_.resize(signals_.size());
  for (std::size_t i = 0; i < signals_.size(); ++i) {
    if (::sigaction(signals_[i], nullptr, &previous_[i]) != 0) throw system_error(errno, "sigaction", "stop signals");
    // An ignored signal (SIGINT of a background job) stays ignored.
    if (previous_[i].sa_handler != SIG_IGN && ::sigaction(signals_[i], &action, nullptr) != 0) {
      throw system_error(errno, "sigaction", "stop signals");
    }
  }
}

StopSignals::~StopSignals() { restore(); }

void StopSignals::restore() {
  if (restored_) return;
  restored_ = true;
  for (std::size_t i = 0; i < signals_.size(); ++i) ::sigaction(signals_[i], &previous_[i], nullptr);
}

int StopSignals::received() const { return g_received.load(); }

}  // namespace strata::train

// StopSignals: a signal sets a flag; optionally, the second one stops the process.
#include "tools/stop_signals.h"

#include <cerrno>

#include "core/error.h"

namespace strata::tools {
namespace {

volatile std::sig_atomic_t g_received = 0;  // see the header: a handler can only reach this
volatile std::sig_atomic_t g_second_stops_now = 0;

void on_stop_signal(int sig) {
  if (g_received != 0 && g_second_stops_now != 0) {
    // The second request: stop now, as if no handler were installed.
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  if (g_received == 0) g_received = sig;
}

}  // namespace

StopSignals::StopSignals(std::initializer_list<int> signals, bool second_stops_now) : signals_(signals) {
  g_received = 0;
  g_second_stops_now = second_stops_now ? 1 : 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  previous_.resize(signals_.size());
  for (std::size_t i = 0; i < signals_.size(); ++i) {
    if (::sigaction(signals_[i], nullptr, &previous_[i]) != 0) throw system_error(errno, "sigaction", "stop signals");
    // An ignored signal (SIGINT of a background job) stays ignored.
    if (previous_[i].sa_handler != SIG_IGN) ::sigaction(signals_[i], &action, nullptr);
  }
}

StopSignals::~StopSignals() { restore(); }

void StopSignals::restore() {
  if (restored_) return;
  restored_ = true;
  for (std::size_t i = 0; i < signals_.size(); ++i) ::sigaction(signals_[i], &previous_[i], nullptr);
}

int StopSignals::received() const { return g_received; }

}  // namespace strata::tools

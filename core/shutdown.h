#pragma once
// Shutting down with work in flight: destructors that wait for pending work (I/O, stream
// tasks, worker queues) before the memory it uses is freed.
//
// Note [Drain everything, then report]: when one wait of a shutdown fails, the waits after it
// must still run. A destructor that stopped at the first failure would free buffers that
// other requests still read into (a use after free, seen as a crash on an injected EIO). So
// each step runs whatever the steps before it did, and a failure is only logged:
//
//   ~Engine() {
//     drain_for_shutdown("ZeRO engine", [&] { updater.drain(); }, [&] { io.wait_all(); });
//   }
#include <exception>
#include <string_view>

namespace strata {

// A failure a destructor met while draining pending work (`who`: what was shutting down). A
// warning, except while an exception unwinds: the run is then already stopping with an error
// that its handler prints, and the same failure met again at shutdown would only repeat it, so
// it is a debug line.
void shutdown_failure(std::string_view who, const char* what) noexcept;

// Runs every step in order, each one even when a step before it threw; failures go to
// shutdown_failure. Never throws.
template <typename... Steps>
void drain_for_shutdown(std::string_view who, Steps&&... steps) noexcept {
  const auto run = [who](auto& step) {
    try {
      step();
    } catch (const std::exception& e) {
      shutdown_failure(who, e.what());
    } catch (...) {
      shutdown_failure(who, "an unknown exception");
    }
  };
  (run(steps), ...);
}

}  // namespace strata

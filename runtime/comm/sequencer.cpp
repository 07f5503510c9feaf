#include "runtime/comm/sequencer.h"

#include <exception>

#include "core/error.h"

namespace strata::runtime::comm {

std::uint64_t Sequencer::take() {
  std::lock_guard lock(mutex_);
  return next_ticket_++;
}

void Sequencer::run_in_turn(std::uint64_t ticket, const std::function<void()>& fn) {
  std::unique_lock lock(mutex_);
  turn_changed_.wait(lock, [&] { return next_turn_ == ticket; });
  // Ends our turn; `failure` (if any) breaks the sequencer first, so the next ticket sees it.
  auto finish = [&](std::string failure) {
    if (!lock.owns_lock()) lock.lock();
    if (broken_.empty() && !failure.empty()) broken_ = std::move(failure);
    ++next_turn_;
    advance_locked();
  };
  const std::string name = "collective #" + std::to_string(ticket);
  if (!broken_.empty()) {
    const std::string why = broken_;
    finish({});
    throw Error(name + " not run: " + why, "communicator",
                "look for the first error reported on this rank; the communicator cannot be "
                "used any more");
  }
  // Until we advance, no other ticket can run: fn runs unlocked.
  lock.unlock();
  try {
    fn();
  } catch (const std::exception& e) {
    finish(name + " failed: " + e.what());
    throw;
  } catch (...) {
    finish(name + " failed");
    throw;
  }
  finish({});
}

void Sequencer::skip(std::uint64_t ticket) {
  std::lock_guard lock(mutex_);
  skipped_.insert(ticket);
  advance_locked();
}

void Sequencer::advance_locked() {
  while (skipped_.erase(next_turn_) != 0) {
    if (broken_.empty()) {
      broken_ = "collective #" + std::to_string(next_turn_) +
                " was skipped because its stream had failed, so this rank can no longer match "
                "its collectives with the other ranks'";
    }
    ++next_turn_;
  }
  // Notified under the lock: a waiter in wait_drained may destroy us as soon as it can
  // take the lock, and nothing here touches this object after the lock is released.
  turn_changed_.notify_all();
}

void Sequencer::wait_drained() {
  std::unique_lock lock(mutex_);
  turn_changed_.wait(lock, [&] { return next_turn_ == next_ticket_; });
}

bool Sequencer::broken() const {
  std::lock_guard lock(mutex_);
  return !broken_.empty();
}

}  // namespace strata::runtime::comm

#include "serve/request.h"

#include <utility>

namespace strata::serve {

RequestState::RequestState(GenerationParams params) : params_(std::move(params)), created_(Clock::now()) {}

void RequestState::push(GeneratedToken token) {
  {
    std::lock_guard lock(mutex_);
    pending_.push_back(std::move(token));
  }
  changed_.notify_all();
}

void RequestState::end(EndReason reason, std::string error) {
  {
    std::lock_guard lock(mutex_);
    if (end_ != EndReason::running) return;  // the first end stands
    end_ = reason;
    error_ = std::move(error);
  }
  changed_.notify_all();
}

void RequestState::cancel() {
  std::lock_guard lock(mutex_);
  cancel_ = true;
}

bool RequestState::cancel_requested() const {
  std::lock_guard lock(mutex_);
  return cancel_;
}

RequestState::Update RequestState::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return !pending_.empty() || end_ != EndReason::running; });
  Update u;
  u.tokens.swap(pending_);
  u.end = end_;
  u.error = error_;
  return u;
}

}  // namespace strata::serve

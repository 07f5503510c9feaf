#pragma once
// Runs a communicator's collectives in the order they were issued, whatever stream runs them.
//
// Note [Collective order]: MPI matches the collectives of a communicator by their order on
// each rank. Collectives issued on different streams run on different worker threads, whose
// timing differs between ranks, so the order in which they reach MPI would differ too (rank 0
// all-gathers while rank 1 all-reduces: a hang or garbage). Each collective therefore takes a
// ticket when it is issued (program order, the same on every rank) and waits, on its stream's
// thread, until every earlier ticket has run. This cannot deadlock: a ticket only waits for
// tickets issued before it, and a stream only waits for events recorded before it waits, so
// every wait points to earlier issued work.
//
// Note [Skipped collectives]: a stream that failed skips its later work (device.h), so a
// ticket may never run. Each enqueued closure holds a TicketGuard; if the closure is destroyed
// without having run, the guard reports the ticket skipped. The sequencer then moves past it
// and marks itself broken: this rank has left out a collective that the other ranks will run,
// so every later collective fails with an Error instead of being matched with the wrong one.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>

namespace strata::runtime::comm {

class Sequencer {
 public:
  // Called when a collective is issued, on the issuing thread.
  std::uint64_t take();

  // Waits until every earlier ticket has run or been skipped, then runs fn. Throws
  // strata::Error without running fn when the sequencer is broken; a failure of fn breaks it.
  void run_in_turn(std::uint64_t ticket, const std::function<void()>& fn);

  // The closure holding `ticket` was destroyed without running (Note [Skipped collectives]).
  void skip(std::uint64_t ticket);

  // Blocks until every ticket taken so far has run or been skipped.
  void wait_drained();

  bool broken() const;

 private:
  void advance_locked();  // past skipped tickets; wakes the waiters

  mutable std::mutex mutex_;
  std::condition_variable turn_changed_;
  std::uint64_t next_ticket_ = 0;
  std::uint64_t next_turn_ = 0;
  std::set<std::uint64_t> skipped_;
  std::string broken_;  // why later collectives cannot run; empty while healthy
};

// Shared by the copies of one enqueued closure; reports the ticket skipped if none ran it.
// The sequencer must outlive the guard (the communicator drains before it goes away).
class TicketGuard {
 public:
  TicketGuard(Sequencer& sequencer, std::uint64_t ticket)
      : sequencer_(sequencer), ticket_(ticket) {}
  ~TicketGuard() {
    if (!ran_) sequencer_.skip(ticket_);
  }
  TicketGuard(const TicketGuard&) = delete;
  TicketGuard& operator=(const TicketGuard&) = delete;

  void run(const std::function<void()>& fn) {
    ran_ = true;
    sequencer_.run_in_turn(ticket_, fn);
  }

 private:
  Sequencer& sequencer_;
  std::uint64_t ticket_;
  bool ran_ = false;
};

}  // namespace strata::runtime::comm

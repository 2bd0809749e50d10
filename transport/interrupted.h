// ZeroMQ calls that fail with EINTR when a signal arrives at the wrong
// moment: bind and connect (and anything else that first processes the
// socket's pending commands) can return EINTR before they have done
// anything, so they are simply made again. Signals do arrive: the SIGUSR1
// and SIGUSR2 of `geodesic checkpoint` and `geodesic wan replan`, SIGCHLD
// in the launcher, libFuzzer's timer (which found this). Sends and
// receives have their own loops in message.cc (a send is bounded by its
// timeout). Header-only; thread-safe as the call is.
#pragma once

#include <cerrno>
#include <zmq.hpp>

namespace geodesic::transport {

inline constexpr int kInterruptedAttempts = 1000;

// Makes `call` again while it throws zmq::error_t with EINTR, at most
// `attempts` times in all; any other error, or the last EINTR, propagates.
template <class Call>
auto RetryInterrupted(Call&& call, int attempts = kInterruptedAttempts) -> decltype(call()) {
  for (int i = 1;; ++i) {
    try {
      return call();
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR || i >= attempts) throw;
    }
  }
}

// The same for a C API call that returns -1 and sets zmq_errno().
template <class Call>
int RetryInterruptedC(Call&& call, int attempts = kInterruptedAttempts) {
  int rc = -1;
  for (int i = 0; i < attempts; ++i) {
    rc = call();
    if (rc != -1 || zmq_errno() != EINTR) break;
  }
  return rc;
}

}  // namespace geodesic::transport

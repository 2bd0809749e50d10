// RefusalLimiter: what an event loop that serves many peers (a shard, the
// coordinator) does with each refusal it makes, so that no peer can make
// refusing it expensive.
//
// - Answers: a peer gets at most `answers_per_peer` ErrorReplies per
//   `window`; later refusals in the window go unanswered (counted). Reading
//   and refusing a message is cheap, answering it is not: the reply queues
//   towards a peer that may never read it. Refusals that are part of normal
//   operation (a moved chunk, a backup not serving yet, a replication gap, a
//   fenced primary) are always answered: members act on them.
// - Logs: at most one line per reason per `log_every`; the refusals not
//   logged in between are counted and reported with the next line.
// - Counts: every refusal by reason, and those left unanswered.
//
// Peers are remembered by routing id, at most `max_peers` at once (a peer
// that opens a connection per message gets a fresh budget each time, but its
// replies go to connections it has already left). Not thread-safe: one per
// event loop; the loop's clock times the windows.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>

#include "common/clock.h"
#include "common/throttle.h"
#include "proto/geodesic.pb.h"

namespace geodesic::transport {

struct RefusalLimits {
  int answers_per_peer = 32;
  Duration window = std::chrono::seconds(10);
  size_t max_peers = 4096;
  Duration log_every = std::chrono::seconds(1);
};

class RefusalLimiter {
 public:
  struct Verdict {
    bool answer = true;     // send the ErrorReply
    bool log = true;        // write this refusal's log line
    uint64_t unlogged = 0;  // with `log`: refusals of this reason not logged since its previous line
    bool muted = false;     // this refusal used up the peer's answers for the window (log that once)
  };

  explicit RefusalLimiter(const Clock* clock, RefusalLimits limits = {});

  // Counts one refusal of a message from `peer` (a routing id; "" for a
  // socket with one peer, which is never muted) and says what to do.
  Verdict Note(const std::string& peer, wire::Refusal reason);

  const std::map<wire::Refusal, uint64_t>& by_reason() const { return by_reason_; }
  uint64_t total() const { return total_; }
  uint64_t unanswered() const { return unanswered_; }
  const RefusalLimits& limits() const { return limits_; }

  // Refusals members act on, answered whatever the budget.
  static bool AlwaysAnswered(wire::Refusal reason);

 private:
  struct PeerWindow {
    TimePoint start;
    int answered = 0;
  };
  bool Answer(const std::string& peer, TimePoint now, bool* muted);

  const Clock* clock_;
  RefusalLimits limits_;
  std::unordered_map<std::string, PeerWindow> peers_;
  std::map<wire::Refusal, Throttle> logs_;
  std::map<wire::Refusal, uint64_t> by_reason_;
  uint64_t total_ = 0;
  uint64_t unanswered_ = 0;
};

// Log wording shared by the shells: " (and N more REASON refusals since the
// last such line)" or "" for none; and the line for a peer whose answers
// ran out.
std::string UnloggedNote(uint64_t unlogged, wire::Refusal reason);
std::string MutedNote(const std::string& peer_name, const RefusalLimits& limits);

}  // namespace geodesic::transport

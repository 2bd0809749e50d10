#include "transport/refusal_limiter.h"

#include "transport/message.h"

namespace geodesic::transport {

RefusalLimiter::RefusalLimiter(const Clock* clock, RefusalLimits limits) : clock_(clock), limits_(limits) {}

bool RefusalLimiter::AlwaysAnswered(wire::Refusal reason) {
  switch (reason) {
    case wire::REFUSAL_MOVED:
    case wire::REFUSAL_NOT_PRIMARY:
    case wire::REFUSAL_NOT_BACKUP:
    case wire::REFUSAL_REPLICATION_GAP:
      return true;
    default:
      return false;
  }
}

bool RefusalLimiter::Answer(const std::string& peer, TimePoint now, bool* muted) {
  if (peer.empty()) return true;
  auto it = peers_.find(peer);
  if (it == peers_.end()) {
    if (peers_.size() >= limits_.max_peers) {
      std::erase_if(peers_, [&](const auto& p) { return now - p.second.start >= limits_.window; });
      // Every window still open: forget them all rather than grow.
      if (peers_.size() >= limits_.max_peers) peers_.clear();
    }
    it = peers_.emplace(peer, PeerWindow{.start = now}).first;
  } else if (now - it->second.start >= limits_.window) {
    it->second = PeerWindow{.start = now};
  }
  if (it->second.answered >= limits_.answers_per_peer) return false;
  *muted = ++it->second.answered == limits_.answers_per_peer;
  return true;
}

RefusalLimiter::Verdict RefusalLimiter::Note(const std::string& peer, wire::Refusal reason) {
  const TimePoint now = clock_->Now();
  ++total_;
  ++by_reason_[reason];
  Verdict v;
  v.answer = AlwaysAnswered(reason) || Answer(peer, now, &v.muted);
  if (!v.answer) ++unanswered_;
  auto log = logs_.try_emplace(reason, limits_.log_every).first;
  v.log = log->second.Due(now, &v.unlogged);
  return v;
}

std::string UnloggedNote(uint64_t unlogged, wire::Refusal reason) {
  if (unlogged == 0) return "";
  return " (and " + std::to_string(unlogged) + " more " + RefusalName(reason) + " refusals since the last such line)";
}

std::string MutedNote(const std::string& peer_name, const RefusalLimits& limits) {
  return peer_name + " had " + std::to_string(limits.answers_per_peer) + " refusals answered within " +
         std::to_string(static_cast<int>(Seconds(limits.window))) +
         " s; its further refusals in that time go unanswered";
}

}  // namespace geodesic::transport

// Who may speak to the coordinator. Every job: heartbeats and leaves name
// a member of the job, with a clock in range. Secured jobs (security.mode curve): who may
// register (a join token for the role and id, over an authenticated CURVE
// connection), which key may speak for a member, and when a member waits
// for the shards to admit its key.
#include <algorithm>

#include "common/wire_limits.h"
#include "coordinator/names.h"
#include "coordinator/state.h"

namespace geodesic::coordinator {
using names::IdList;
using names::RoleName;

::geodesic::Status CoordinatorState::CheckMember(const wire::Header& h, wire::Refusal* reason) const {
  *reason = wire::REFUSAL_UNSPECIFIED;
  // Registrations check the id themselves (REFUSAL_REGISTRATION, which a
  // member gives up on); status requests come from tools, not members.
  if (h.body_case() != wire::Header::kHeartbeat && h.body_case() != wire::Header::kLeaveRequest)
    return ::geodesic::Status::Ok();
  const wire::Role role = h.sender_role();
  const std::string who = std::string(RoleName(role)) + " " + std::to_string(h.sender_id());
  if (!Find(role, h.sender_id())) {
    *reason = wire::REFUSAL_BAD_SENDER;
    return PermissionDenied(who + " is not a member of this job (" + std::to_string(options_.num_servers) +
                            " servers, " + std::to_string(options_.num_workers) + " workers" +
                            (replicated() ? ", their backups" : "") + ", one evaluator)");
  }
  if (role != wire::WORKER || !h.has_heartbeat()) return ::geodesic::Status::Ok();
  const int64_t clock = h.heartbeat().clock();
  const int64_t last = options_.total_clocks > 0 ? options_.total_clocks : kMaxClock - 1;
  if (clock >= 0 && clock <= last) return ::geodesic::Status::Ok();
  *reason = wire::REFUSAL_BAD_CLOCK;
  return OutOfRange(who + " reports clock " + std::to_string(clock) + "; this job's clocks run 0.." +
                    std::to_string(last));
}

::geodesic::Status CoordinatorState::Admit(wire::Role role, int id, const wire::RegisterRequest& req,
                                           const std::string& peer_key) const {
  if (secure()) {
    if (peer_key.empty()) return PermissionDenied("registration did not arrive over an authenticated CURVE connection");
    // A backup joins with a server token for its shard.
    auto claims = transport::VerifyToken(options_.secret, req.token(), options_.job_name,
                                         RoleName(role == wire::BACKUP ? wire::SERVER : role), id, options_.unix_now());
    if (!claims.ok()) return claims.status();
  }
  return ::geodesic::Status::Ok();
}

std::string CoordinatorState::KeyWait(wire::Role role, int id, const Member& m) const {
  if (!secure() || !started_) return "";
  // A primary replicates to its backup, which must admit its key first
  // (ZeroMQ does not retry a connection whose handshake ZAP refused).
  if (role == wire::SERVER) {
    if (!replicated() || promoted_[id] || !backups_[id].live || backups_[id].keys_installed >= m.key_epoch) return "";
    return "the backup of server " + std::to_string(id) + " to authorize its primary's key (at its next heartbeat)";
  }
  if (role != wire::WORKER && role != wire::EVALUATOR && role != wire::AGGREGATOR) return "";
  if (role == wire::WORKER)
    if (std::string wait = AggregatorWait(id, m); !wait.empty()) return wait;
  // Every process that serves a shard now, or may after a failover.
  std::vector<int> behind, behind_backups;
  for (int i = 0; i < static_cast<int>(servers_.size()); ++i)
    if (servers_[i].live && servers_[i].keys_installed < m.key_epoch) behind.push_back(i);
  for (int i = 0; i < static_cast<int>(backups_.size()); ++i)
    if (!promoted_[i] && backups_[i].live && backups_[i].keys_installed < m.key_epoch) behind_backups.push_back(i);
  if (behind.empty() && behind_backups.empty()) return "";
  std::string who;
  if (!behind.empty()) who = std::string(behind.size() == 1 ? "server " : "servers ") + IdList(behind);
  if (!behind_backups.empty())
    who += (who.empty() ? "" : " and ") + std::string("the backup") +
           (behind_backups.size() == 1 ? " of server " : "s of servers ") + IdList(behind_backups);
  return who + " to authorize " + RoleName(role) + " " + std::to_string(id) + "'s key (at its next heartbeat)";
}

::geodesic::Status CoordinatorState::CheckKey(wire::Role role, int id, const std::string& peer_key) const {
  if (!secure()) return ::geodesic::Status::Ok();
  const Member* m = Find(role, id);
  if (!m || m->key.empty()) return ::geodesic::Status::Ok();
  if (peer_key != m->key)
    return PermissionDenied(std::string("request as ") + RoleName(role) + " " + std::to_string(id) +
                            " came with another CURVE key than the one it registered with");
  return ::geodesic::Status::Ok();
}

int CoordinatorState::AggregatorOf(int w) const {
  if (w < 0 || w >= static_cast<int>(options_.worker_regions.size())) return -1;
  const auto& names = options_.aggregator_regions;
  for (int r = 0; r < static_cast<int>(names.size()) && r < static_cast<int>(aggregators_.size()); ++r)
    if (!names[r].empty() && names[r] == options_.worker_regions[w]) return r;
  return -1;
}

std::string CoordinatorState::AggregatorWait(int id, const Member& m) const {
  const int a = AggregatorOf(id);
  if (a < 0) return "";
  const Member& agg = aggregators_[a];
  const std::string who = "the aggregator of region " + options_.aggregator_regions[a];
  // The worker connects to it with its key as the server key; one that
  // registered and died is not waited for (its workers use the shards).
  if (!agg.registered) return who + " to register (worker " + std::to_string(id) + " connects to it)";
  if (agg.live && agg.keys_installed < m.key_epoch)
    return who + " to authorize worker " + std::to_string(id) + "'s key (at its next heartbeat)";
  return "";
}

bool CoordinatorState::IsMemberKey(const std::string& peer_key) const {
  if (peer_key.empty()) return false;
  for (const auto* group : {&servers_, &backups_, &workers_, &aggregators_})
    for (const auto& m : *group)
      if (m.key == peer_key) return true;
  return evaluator_.key == peer_key;
}

void CoordinatorState::AddKeys(wire::Role role, int id, const wire::Heartbeat& hb, Member* m,
                               wire::HeartbeatReply* r) const {
  m->keys_installed = std::max(m->keys_installed, hb.keys_epoch());
  if (hb.keys_epoch() >= keys_epoch_) return;
  r->set_keys_epoch(keys_epoch_);
  auto add = [r](const Member& who, wire::Role as, int id) {
    if (who.key.empty()) return;
    r->add_authorized_keys(who.key);
    r->add_authorized_ids(id);
    r->add_authorized_roles(as);
  };
  // An aggregator serves its region's workers only.
  for (int i = 0; i < static_cast<int>(workers_.size()); ++i)
    if (role != wire::AGGREGATOR || AggregatorOf(i) == id) add(workers_[i], wire::WORKER, i);
  if (role == wire::AGGREGATOR) return;
  add(evaluator_, wire::EVALUATOR, -1);
  for (int i = 0; i < static_cast<int>(aggregators_.size()); ++i) add(aggregators_[i], wire::AGGREGATOR, i);
  if (role == wire::BACKUP && !promoted_[id]) r->set_primary_key(servers_[id].key);
}

namespace {
// Real clients' keys the coordinator keeps for the gateways: enough for a
// large population's active clients; the oldest admission goes first.
constexpr size_t kMaxClientKeys = 4096;
}  // namespace

void CoordinatorState::AdmitClient(const std::string& peer_key, int client) {
  auto same =
      std::find_if(client_keys_.begin(), client_keys_.end(), [&](const auto& k) { return k.first == peer_key; });
  if (same != client_keys_.end() && same->second == client) return;  // a client asking again
  if (same != client_keys_.end()) client_keys_.erase(same);
  if (client_keys_.size() >= kMaxClientKeys) client_keys_.erase(client_keys_.begin());
  client_keys_.emplace_back(peer_key, client);
  ++client_keys_epoch_;
}

void CoordinatorState::AddClientKeys(const wire::Heartbeat& hb, wire::HeartbeatReply* r) const {
  if (hb.keys_epoch() >= client_keys_epoch_) return;
  r->set_keys_epoch(client_keys_epoch_);
  for (const auto& [key, client] : client_keys_) r->add_authorized_keys(key), r->add_authorized_ids(client);
}

}  // namespace geodesic::coordinator

#include "transport/key_owners.h"

#include <algorithm>

namespace geodesic::transport {

KeyOwners::KeyOwners(const wire::HeartbeatReply& list) {
  for (int i = 0; i < list.authorized_keys_size() && i < list.authorized_ids_size(); ++i) {
    const int id = list.authorized_ids(i);
    const wire::Role role = i < list.authorized_roles_size() ? list.authorized_roles(i)
                            : id < 0                         ? wire::EVALUATOR
                                                             : wire::WORKER;
    owners_[list.authorized_keys(i)] = Owner{role, id};
  }
}

std::vector<std::string> KeyOwners::keys() const {
  std::vector<std::string> out;
  out.reserve(owners_.size());
  for (const auto& [key, owner] : owners_) out.push_back(key);
  return out;
}

Status KeyOwners::Check(const Message& m, const std::vector<wire::Role>& roles) const {
  auto it = owners_.find(m.peer_key);
  if (it == owners_.end()) return PermissionDenied("the connection's CURVE key is not authorized here");
  const wire::Role role = m.header.sender_role();
  if (std::find(roles.begin(), roles.end(), role) == roles.end())
    return PermissionDenied("messages from " + PeerName(m) + " are not taken here");
  const int want = role == wire::EVALUATOR ? -1 : m.header.sender_id();
  if (it->second.role != role || it->second.id != want)
    return PermissionDenied("the connection's CURVE key is not the sender's");
  return Status::Ok();
}

}  // namespace geodesic::transport

// KeyOwners: whose CURVE key is whose, in a secured job (docs/security.md
// "Keys"). The coordinator lists the keys a shard, backup or aggregator may
// admit, each with its member's role and id (HeartbeatReply.authorized_*);
// the ZAP handler admits the connection, and this check makes sure that a
// message's sender is the member its connection's key belongs to, so that
// no member can push or pull as another.
//
// Not synchronized: the owner (a shard, an aggregator) guards it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "proto/geodesic.pb.h"
#include "transport/message.h"

namespace geodesic::transport {

class KeyOwners {
 public:
  KeyOwners() = default;
  // From a key list (authorized_roles absent: WORKER, or EVALUATOR for id -1).
  explicit KeyOwners(const wire::HeartbeatReply& list);

  // The keys, for the ZAP handler's allow-list.
  std::vector<std::string> keys() const;
  // OK if `m` came over a connection whose CURVE key belongs to its sender
  // (role and id; the evaluator's id is -1 on the list, whatever it sends),
  // and the sender's role is one of `roles`; PermissionDenied otherwise.
  Status Check(const Message& m, const std::vector<wire::Role>& roles) const;

 private:
  struct Owner {
    wire::Role role = wire::WORKER;
    int id = 0;
  };
  std::map<std::string, Owner> owners_;
};

}  // namespace geodesic::transport

// FedBuff's schedule in simulated time (Nguyen et al., 2022): `concurrency`
// clients train at once, each from the model version current when it
// started; the server applies a step as soon as `buffer` (K) updates have
// arrived, and a client that finishes (or drops out) is replaced at once by
// a newly drawn one. An update computed on version v and arriving when the
// server is at version t has staleness t - v; one older than max_staleness
// is discarded. The schedule depends only on the seed, the device profiles
// and each client's time (worker/federated/population.h), never on training, so the
// coordinator and every executor compute the same one without talking.
// Costs: O(K log C) a step, O(C) memory. Not thread-safe.
#pragma once

#include <cstdint>
#include <queue>
#include <set>
#include <vector>

#include "worker/federated/population.h"

namespace geodesic::federated {

struct BufferedSpec {
  int64_t concurrency = 10;    // clients in flight
  int64_t buffer = 10;         // K: updates a server step applies
  int64_t max_staleness = 10;  // updates older than this many versions are discarded
};

// One accepted update.
struct Arrival {
  int64_t client = 0;
  int64_t start = 0;    // the client's start number: a key for its draws (batch order)
  int64_t version = 0;  // the server version it trained from
};

// One server step: version `version` becomes version + 1.
struct BufferedStep {
  int64_t version = 0;
  std::vector<Arrival> accepted;  // K updates, in arrival order
  int64_t started = 0;            // clients started during the step
  int64_t dropped = 0;            // clients that left during the step
  int64_t stale = 0;              // updates discarded as too stale
  int64_t staleness_sum = 0;      // over `accepted`
  double end = 0;                 // simulated time the step was applied (s)
  double seconds = 0;             // since the previous step (s)
};

// FedBuff's weight for an update computed on a model `staleness` server
// versions old: 1 / sqrt(1 + staleness) (Nguyen et al., 2022); a negative
// staleness counts as 0.
double StalenessWeight(int64_t staleness);

class BufferedSchedule {
 public:
  // seconds[c]: client c's simulated time for one local training
  // (ClientSeconds); its size is the population.
  BufferedSchedule(const BufferedSpec& spec, const ProfileSpec& profiles, std::vector<double> seconds, uint64_t seed);

  // The next server step.
  BufferedStep Next();
  int64_t version() const { return version_; }

 private:
  struct Flight {
    double finish = 0;
    int64_t start = 0, client = 0, version = 0;
    bool drops = false;
    bool operator>(const Flight& o) const { return finish > o.finish || (finish == o.finish && start > o.start); }
  };
  void Start(double now, BufferedStep& step);
  int64_t Draw(int64_t start) const;  // a client not in flight, available at this start

  BufferedSpec spec_;
  ProfileSpec profiles_;
  std::vector<double> seconds_;
  uint64_t seed_ = 0;
  std::priority_queue<Flight, std::vector<Flight>, std::greater<>> flights_;
  std::set<int64_t> busy_;
  int64_t version_ = 0, starts_ = 0;
  double now_ = 0;
};

}  // namespace geodesic::federated

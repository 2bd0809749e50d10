// A federated population: per-client device profiles drawn from seeded
// distributions, which clients are available in a round, who is selected
// (uniform or weighted, with over-selection) and who drops out mid-round.
//
// Every draw for a (client, round) comes from a counter-based generator
// keyed by (seed, purpose, client, round), not from a shared stream, so it
// does not depend on the order clients are asked about, on how many there
// are, or on which process asks: the coordinator and every client executor
// agree without exchanging the draws. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

namespace geodesic::federated {

// Device profile distributions. Log-normal quantities are given by their
// median and sigma (the standard deviation of their logarithm; 0: every
// client at the median).
struct ProfileSpec {
  double step_seconds = 0.05;  // a local step on a median device (s)
  double compute_sigma = 0;
  double uplink_mbit_median = 20, uplink_sigma = 0;
  double downlink_mbit_median = 100, downlink_sigma = 0;
  double latency_ms_median = 50, latency_sigma = 0;
  double availability = 1.0;  // probability that a client can take part in a round
  double dropout = 0;         // probability that a selected client leaves mid-round
  double slow_fraction = 0;   // share of clients whose compute is slow_factor times slower
  double slow_factor = 5;
};

struct ClientProfile {
  double step_seconds = 0;  // a local step on this device (s)
  double uplink_mbit = 0, downlink_mbit = 0, latency_ms = 0;
};

// Client c's profile (the same whatever the population size).
ClientProfile DrawProfile(const ProfileSpec& spec, int64_t client, uint64_t seed);

// Whether client c is available in `round` (probability spec.availability).
bool Available(const ProfileSpec& spec, int64_t client, int64_t round, uint64_t seed);

// Whether client c, selected in `round`, leaves before sending its update
// (probability spec.dropout).
bool DropsOut(const ProfileSpec& spec, int64_t client, int64_t round, uint64_t seed);

// The simulated time client c takes for a round: the model down, `steps`
// local steps, its update up, and a latency each way:
//   2 latency + 8 down_bytes / downlink + steps * step_seconds + 8 up_bytes / uplink.
double ClientSeconds(const ClientProfile& p, int64_t steps, double down_bytes, double up_bytes);

struct SelectionSpec {
  int64_t per_round = 10;     // clients the round aggregates
  double over_selection = 0;  // select ceil(per_round * (1 + this)); the first per_round to answer count
  bool weighted = false;      // probability proportional to the client's samples (else uniform)
};

// The clients selected for `round`, without repeats, in the order drawn:
// among the available ones (Available), ceil(per_round * (1 + over_selection))
// of them, or all when fewer are available. Weighted selection uses the
// Efraimidis-Spirakis keys u^(1/w) (weights: samples per client; clients of
// weight 0 are never selected).
std::vector<int64_t> SelectClients(const SelectionSpec& selection, const ProfileSpec& profiles,
                                   const std::vector<int64_t>& samples_per_client, int64_t round, uint64_t seed);

// A selected client as the round sees it.
struct Candidate {
  int64_t client = 0;
  double seconds = 0;    // its simulated round time (ClientSeconds)
  bool dropped = false;  // it leaves mid-round (DropsOut)
};

struct RoundClose {
  std::vector<int64_t> accepted;  // whose updates the round aggregates, by finish time (then id)
  int64_t dropped = 0;            // left mid-round
  int64_t late = 0;               // answered after the deadline or after the round had per_round updates
  double seconds = 0;             // the round's simulated time: when the server closed it
};

// Which updates a synchronous round takes: the first `per_round` clients
// to finish that did not drop out, and only those finishing by `deadline`
// (> 0; 0: none). The round closes at its per_round-th update; with fewer,
// at the deadline if there is one, else when the last client still in it
// finished (a dropout is taken as noticed at once). So with a deadline a
// round never lasts longer than it.
RoundClose CloseRound(const std::vector<Candidate>& selected, int64_t per_round, double deadline);

}  // namespace geodesic::federated

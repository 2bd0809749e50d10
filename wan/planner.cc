// The planner's cost model, placement search and codec choice; see planner.h
// and docs/planner.md.
#include "wan/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <tuple>

#include "compression/codec.h"

namespace geodesic::wan {
namespace {

struct Codec {
  std::string name;
  compression::CodecSpec spec;
  std::vector<double> bytes;  // predicted bytes of one chunk of each size class
};

// Codec indices (into Problem::codecs) per (worker region, server region),
// [w * R + r], the same either way round.
struct Choice {
  std::vector<int> push, pull;
  bool operator==(const Choice&) const = default;
};

// What the search minimizes, in order: the slowest pair's time, the sum of
// all pairs' times (so ties prefer fewer and faster pairs), and the largest
// shard (so servers of one region share the chunks).
struct Cost {
  double max_ms = 0, sum_ms = 0;
  uint64_t max_server_elems = 0;
};

bool Near(double a, double b) { return std::abs(a - b) <= 1e-9 * (1 + std::abs(b)); }

bool Better(const Cost& a, const Cost& b) {
  if (!Near(a.max_ms, b.max_ms)) return a.max_ms < b.max_ms;
  if (!Near(a.sum_ms, b.sum_ms)) return a.sum_ms < b.sum_ms;
  return a.max_server_elems < b.max_server_elems;
}

// Predicted payload bytes of one chunk of n values (docs/planner.md): the
// exact size for dense codecs, 4 + 2 bytes per kept value for sparse ones,
// times kZstdFactor with a zstd stage.
double EncodedBytes(const compression::CodecSpec& spec, uint64_t n) {
  double raw = 0;
  if (spec.sparse()) {
    raw = std::clamp(std::ceil(spec.fraction * static_cast<double>(n)), 1.0, static_cast<double>(n)) * (4 + 2);
  } else {
    compression::PayloadInfo info;
    info.codec = spec.codec;
    info.block = spec.block;
    raw = static_cast<double>(compression::MaxEncodedBytes(info, n));
  }
  return spec.zstd_level ? raw * kZstdFactor : raw;
}

// Loss recovery and BBR's pacing, fitted to request/response exchanges
// measured over the kernel links at 160 ms RTT and 0.1-3% loss
// (bench/loss_cost.py; the table is in docs/planner.md). A lost packet among
// a burst's last kTailPackets leaves too little behind it to be detected
// from SACKs and waits for the tail-loss probe or the retransmission timer,
// both re-armed on every ACK: kTailLossRtts. One further in is repaired
// from the SACKs while the rest of the burst still flows: kMidLossRtts.
constexpr double kTailPackets = 20, kTailLossRtts = 4, kMidLossRtts = 0.5;

// Goodput and delay per directed link, in the units the model sums.
struct Rates {
  int n = 0;
  bool bbr = false;
  std::vector<double> delay_ms, bits_per_ms, loss;

  explicit Rates(const LinkMatrix& m) : n(m.size()), bbr(m.bbr()) {
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b) {
        delay_ms.push_back(m.at(a, b).delay_ms);
        bits_per_ms.push_back(m.GoodputMbit(a, b) * 1e3);
        loss.push_back(m.at(a, b).loss);
      }
  }
  double Delay(int from, int to) const { return delay_ms[from * n + to]; }
  double Rtt(int a, int b) const { return Delay(a, b) + Delay(b, a); }
  double SerializeMs(int from, int to, double bytes) const { return bytes * 8 / bits_per_ms[from * n + to]; }
  // Expected loss-recovery time of a phase that sends `bytes` as `bursts`
  // equal bursts (one per connection) and ends when the last is in:
  // RTT * (kTailLossRtts * P(some tail lost) + kMidLossRtts * P(some other
  // lost) * P(no tail lost)).
  double RecoveryMs(int from, int to, double bytes, int bursts) const {
    const double l = loss[from * n + to];
    if (l <= 0 || bytes <= 0) return 0;
    const double packets = std::ceil(bytes / kMssBytes), k = std::max(1, bursts);
    const double tail_packets = std::min(packets, kTailPackets * k);
    const double p_tail = 1 - std::pow(1 - l, tail_packets), p_mid = 1 - std::pow(1 - l, packets - tail_packets);
    return Rtt(from, to) * (kTailLossRtts * p_tail + kMidLossRtts * p_mid * (1 - p_tail));
  }
  // The least time a's workers' exchange with b's shards spends sending:
  // BBR's pacing after idle (0 under loss-based control).
  double ExchangeFloorMs(int a, int b) const { return bbr ? kBbrExchangeRtts * Rtt(a, b) : 0; }
};

std::string Pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.0f%%", x * 100);
  return buf;
}

}  // namespace

struct Planner::Problem {
  std::vector<std::string> regions;
  std::vector<int> workers;  // per region
  // Per region: the processes that exchange with the shards, its workers,
  // or 1 when it has an aggregator (regions.NAME.aggregator, which sends
  // one push and one pull a clock for all of them).
  std::vector<int> senders;
  std::vector<bool> aggregator;    // per region: regions.NAME.aggregator
  std::vector<int> server_region;  // per server id
  cluster::ChunkLayout layout;
  std::vector<uint64_t> class_elems;  // distinct chunk sizes
  std::vector<int> chunk_class;       // size class per chunk
  std::vector<uint32_t> by_size;      // chunks, largest first, then by index
  LinkMatrix declared;
  WanEmulation emulation = WanEmulation::kNone;
  double compute_ms = 0, codec_gain = 0, drift = 0;
  // A staleness bound >= 1 with prefetch: a worker's pull is answered
  // without waiting for the other workers' pushes, the next pull's round
  // trip overlaps the compute, and pushes and pulls cross in opposite
  // directions at once (docs/planner.md).
  bool overlapped = false;
  // Local SGD (training.local_steps): one exchange per round of this many
  // steps, hidden behind the next round's compute with overlap_rounds.
  int local_steps = 1;
  bool overlap_rounds = false;
  int overlap_steps = 0;            // training.overlap_steps: a round waits after this many steps of the next
  int fragments = 1;                // training.fragments: each round exchanges one of this many fragments, in turn
  std::vector<int> chunk_fragment;  // per chunk: its fragment (all 0 without fragments)
  int max_steps = 0;
  std::vector<Codec> codecs;    // the job's and the candidates, each name once
  std::vector<int> candidates;  // indices into codecs, safest first
  Choice job;

  int R() const { return static_cast<int>(regions.size()); }
  int S() const { return static_cast<int>(server_region.size()); }
  int K() const { return static_cast<int>(class_elems.size()); }
  int Find(const std::string& name) const {
    for (size_t i = 0; i < codecs.size(); ++i)
      if (codecs[i].name == name) return static_cast<int>(i);
    return -1;
  }
  StatusOr<int> Intern(const std::string& name, const std::string& where) {
    if (int i = Find(name); i >= 0) return i;
    auto spec = compression::ParseCodecSpec(name);
    if (!spec.ok()) return InvalidArgument(where + ": " + spec.status().message());
    Codec c{name, *spec, {}};
    for (uint64_t n : class_elems) c.bytes.push_back(EncodedBytes(*spec, n));
    codecs.push_back(std::move(c));
    return static_cast<int>(codecs.size()) - 1;
  }
  bool ValidOwner(const std::vector<int32_t>& owner) const {
    if (owner.size() != layout.num_chunks()) return false;
    return std::all_of(owner.begin(), owner.end(), [&](int32_t s) { return s >= 0 && s < S(); });
  }
  const LinkMatrix& Usable(const LinkMatrix& m) const { return m.regions() == regions ? m : declared; }
};

namespace {

using Problem = Planner::Problem;

// The per-step bytes of a (partial) placement under one codec choice, and
// the cost model over them.
class Evaluator {
 public:
  struct Loads {
    std::vector<double> push, pull;  // [server_region * R + worker_region], bytes per step
    std::vector<int> region_chunks;
    std::vector<uint64_t> server_elems;
    std::vector<Loads> parts;  // training.fragments: the same for each fragment's chunks alone
  };

  Evaluator(const Problem& p, const Choice& choice, const Rates& rates) : p_(p), rates_(rates) {
    const int R = p.R(), K = p.K();
    unit_push_.resize(R * R * K);
    unit_pull_.resize(R * R * K);
    for (int w = 0; w < R; ++w)
      for (int r = 0; r < R; ++r)
        for (int k = 0; k < K; ++k) {
          unit_push_[(w * R + r) * K + k] = p.senders[w] * p.codecs[choice.push[w * R + r]].bytes[k];
          unit_pull_[(w * R + r) * K + k] = p.senders[w] * p.codecs[choice.pull[w * R + r]].bytes[k];
        }
  }

  Loads Empty() const {
    const int R = p_.R();
    Loads l{
        std::vector<double>(R * R), std::vector<double>(R * R), std::vector<int>(R), std::vector<uint64_t>(p_.S()), {}};
    if (p_.fragments > 1) l.parts.assign(p_.fragments, l);
    return l;
  }
  Loads Of(const std::vector<int32_t>& owner) const {
    Loads l = Empty();
    for (uint32_t c = 0; c < owner.size(); ++c) Add(&l, c, owner[c], +1);
    return l;
  }
  void Add(Loads* l, uint32_t chunk, int server, int sign) const {
    AddTo(l, chunk, server, sign);
    if (!l->parts.empty()) AddTo(&l->parts[p_.chunk_fragment[chunk]], chunk, server, sign);
  }
  void AddTo(Loads* l, uint32_t chunk, int server, int sign) const {
    const int R = p_.R(), K = p_.K(), r = p_.server_region[server], k = p_.chunk_class[chunk];
    for (int w = 0; w < R; ++w) {
      l->push[r * R + w] += sign * unit_push_[(w * R + r) * K + k];
      l->pull[r * R + w] += sign * unit_pull_[(w * R + r) * K + k];
    }
    l->region_chunks[r] += sign;
    l->server_elems[server] += static_cast<uint64_t>(sign * static_cast<int64_t>(p_.class_elems[k]));
  }
  void Move(Loads* l, uint32_t chunk, int from, int to) const {
    Add(l, chunk, from, -1);
    Add(l, chunk, to, +1);
  }

  double SlowestPair(const Loads& l) const {
    const std::vector<double> t = PairTimes(l);
    return *std::max_element(t.begin(), t.end());
  }

  // Shards of region r that hold some chunk.
  int ShardsWithChunks(const Loads& l, int r) const {
    int n = 0;
    for (int s = 0; s < p_.S(); ++s) n += p_.server_region[s] == r && l.server_elems[s] > 0;
    return n;
  }

  // [w * R + r]: push from region w's workers to region r's servers, then
  // pull back; 0 where there is no traffic.
  std::vector<double> PairTimes(const Loads& l) const {
    const int R = p_.R();
    std::vector<double> t(R * R, 0.0);
    for (int w = 0; w < R; ++w)
      for (int r = 0; r < R; ++r)
        if (p_.workers[w] > 0 && l.region_chunks[r] > 0) {
          // A burst per connection: each worker of w (or its aggregator) with each shard of r.
          const int bursts = p_.senders[w] * ShardsWithChunks(l, r);
          const double push_serial = rates_.SerializeMs(w, r, l.push[r * R + w]);
          const double pull_serial = rates_.SerializeMs(r, w, l.pull[r * R + w]);
          const double push = push_serial + rates_.RecoveryMs(w, r, l.push[r * R + w], bursts);
          const double pull = pull_serial + rates_.RecoveryMs(r, w, l.pull[r * R + w], bursts);
          // BBR's pacing stretches the sending, not the recovery after it.
          // With a staleness bound the next pull is asked for before the
          // last is used, so a connection never idles a whole round and no
          // after-idle pacing shows (measured: (d) in docs/wan.md).
          const double pacing =
              p_.overlapped ? 0 : std::max(0.0, rates_.ExchangeFloorMs(w, r) - push_serial - pull_serial);
          t[w * R + r] =
              rates_.Rtt(w, r) + (p_.overlapped ? std::max(push, pull) : push + pull) + pacing + AggregatorHopMs(l, w);
        }
    return t;
  }

  // The extra hop of a region with an aggregator: its workers' pushes
  // cross the region's own link into the aggregator, one after another,
  // before the combined push leaves, and the pulled values cross it out to
  // each of them after the pull comes back: the local RTT and W times the
  // step's values each way, exact fp32 (the aggregator encodes for the WAN
  // only; 0 for a region without one).
  double AggregatorHopMs(const Loads& l, int w) const {
    if (!p_.aggregator[w] || p_.workers[w] < 2) return 0;
    double elems = 0;
    for (uint64_t n : l.server_elems) elems += static_cast<double>(n);
    const double bytes = p_.workers[w] * elems * sizeof(float);
    return rates_.Rtt(w, w) + 2 * rates_.SerializeMs(w, w, bytes);
  }

  // With fragments each round exchanges one of them: the times are averages
  // over the fragments' own exchanges.
  Cost CostOf(const Loads& l) const {
    Cost c;
    const size_t n = std::max<size_t>(1, l.parts.size());
    for (size_t f = 0; f < n; ++f) {
      const Loads& part = l.parts.empty() ? l : l.parts[f];
      double slowest = 0;
      for (double t : PairTimes(part)) {
        slowest = std::max(slowest, t);
        c.sum_ms += t / static_cast<double>(n);
      }
      c.max_ms += slowest / static_cast<double>(n);
    }
    c.max_server_elems = *std::max_element(l.server_elems.begin(), l.server_elems.end());
    return c;
  }

  Prediction Predict(const std::vector<int32_t>& owner) const {
    const Loads l = Of(owner);
    const int R = p_.R();
    Prediction pr;
    pr.compute_ms = p_.compute_ms;
    for (int a = 0; a < R; ++a)
      for (int b = 0; b < R; ++b) {
        LinkLoad ll;
        ll.from = p_.regions[a];
        ll.to = p_.regions[b];
        ll.push_bytes = l.push[b * R + a];
        ll.pull_bytes = l.pull[a * R + b];
        ll.delay_ms = rates_.Delay(a, b);
        ll.goodput_mbit = rates_.bits_per_ms[a * R + b] / 1e3;
        ll.serialization_ms = rates_.SerializeMs(a, b, ll.push_bytes + ll.pull_bytes);
        ll.recovery_ms = rates_.RecoveryMs(a, b, ll.push_bytes, p_.senders[a] * ShardsWithChunks(l, b)) +
                         rates_.RecoveryMs(a, b, ll.pull_bytes, p_.senders[b] * ShardsWithChunks(l, a));
        ll.time_ms = ll.push_bytes + ll.pull_bytes > 0 ? ll.delay_ms + ll.serialization_ms + ll.recovery_ms : 0;
        pr.links.push_back(std::move(ll));
      }
    const std::vector<double> t = PairTimes(l);
    for (int w = 0; w < R; ++w)
      for (int r = 0; r < R; ++r) {
        if (!(p_.workers[w] > 0 && l.region_chunks[r] > 0)) continue;
        pr.pairs.push_back({p_.regions[w], p_.regions[r], t[w * R + r]});
        if (pr.bottleneck.empty() || t[w * R + r] > pr.comm_ms) {
          pr.comm_ms = t[w * R + r];
          pr.bottleneck = p_.regions[w] + " workers <-> " + p_.regions[r] + " servers";
        }
      }
    pr.step_ms = p_.overlapped ? std::max(pr.compute_ms, pr.comm_ms) : pr.compute_ms + pr.comm_ms;
    if (p_.local_steps > 1) {
      const double compute = p_.local_steps * pr.compute_ms;
      pr.local_steps = p_.local_steps;
      pr.overlap_rounds = p_.overlap_rounds;
      pr.overlap_steps = p_.overlap_steps;
      // The exchange hides behind the next round's compute: none of it, all
      // of it, or (bounded overlap) the N steps it runs before waiting.
      const double hidden = !p_.overlap_rounds      ? 0.0
                            : p_.overlap_steps == 0 ? compute
                                                    : p_.overlap_steps * pr.compute_ms;
      // With fragments the rounds exchange one fragment each, in turn: a
      // round waits for its own fragment's exchange, averaged over them.
      const int P = p_.fragments;
      double wait = 0;
      for (int f = 0; f < P; ++f) {
        const double comm = P > 1 ? SlowestPair(l.parts[f]) : pr.comm_ms;
        pr.fragment_comm_ms += comm / P;
        wait += std::max(0.0, comm - hidden) / P;
      }
      pr.fragments = P;
      pr.round_ms = compute + wait;
      pr.step_ms = pr.round_ms / p_.local_steps;
    }
    return pr;
  }

 private:
  const Problem& p_;
  const Rates& rates_;
  std::vector<double> unit_push_, unit_pull_;  // [(w * R + r) * K + k]: one chunk of class k, all of w's workers
};

std::vector<int32_t> RoundRobinOwners(const Problem& p) {
  std::vector<int32_t> owner(p.layout.num_chunks());
  for (uint32_t c = 0; c < owner.size(); ++c) owner[c] = static_cast<int32_t>(c % p.S());
  return owner;
}

// Largest chunk first onto the server that keeps the cost lowest (ties: the
// lower id).
std::vector<int32_t> Greedy(const Problem& p, const Evaluator& ev) {
  std::vector<int32_t> owner(p.layout.num_chunks(), -1);
  Evaluator::Loads loads = ev.Empty();
  for (uint32_t c : p.by_size) {
    int best = -1;
    Cost best_cost;
    for (int s = 0; s < p.S(); ++s) {
      Evaluator::Loads trial = loads;
      ev.Add(&trial, c, s, +1);
      Cost cost = ev.CostOf(trial);
      if (best < 0 || Better(cost, best_cost)) best = s, best_cost = cost;
    }
    ev.Add(&loads, c, best, +1);
    owner[c] = best;
  }
  return owner;
}

// Best-improvement local search over single-chunk moves and swaps. Chunks of
// one size on one server are interchangeable, so only the lowest-numbered
// chunk of each (server, size) class is tried.
Cost LocalSearch(const Problem& p, const Evaluator& ev, std::vector<int32_t>* owner) {
  Evaluator::Loads loads = ev.Of(*owner);
  Cost cur = ev.CostOf(loads);
  const int S = p.S(), K = p.K();
  for (int step = 0; step < p.max_steps; ++step) {
    std::vector<int64_t> rep(S * K * p.fragments, -1);
    for (uint32_t c = 0; c < owner->size(); ++c) {
      int64_t& r = rep[((*owner)[c] * K + p.chunk_class[c]) * p.fragments + p.chunk_fragment[c]];
      if (r < 0) r = c;
    }
    std::vector<uint32_t> reps;
    for (int64_t r : rep)
      if (r >= 0) reps.push_back(static_cast<uint32_t>(r));

    Cost best = cur;
    std::vector<std::pair<uint32_t, int32_t>> change;  // (chunk, new owner)
    auto consider = [&](const Evaluator::Loads& trial, std::vector<std::pair<uint32_t, int32_t>> c) {
      Cost cost = ev.CostOf(trial);
      if (Better(cost, best)) best = cost, change = std::move(c);
    };
    for (uint32_t c : reps)
      for (int s = 0; s < S; ++s) {
        if (s == (*owner)[c]) continue;
        Evaluator::Loads trial = loads;
        ev.Move(&trial, c, (*owner)[c], s);
        consider(trial, {{c, s}});
      }
    for (size_t i = 0; i < reps.size(); ++i)
      for (size_t j = i + 1; j < reps.size(); ++j) {
        const uint32_t a = reps[i], b = reps[j];
        const int32_t sa = (*owner)[a], sb = (*owner)[b];
        if (sa == sb || (p.chunk_class[a] == p.chunk_class[b] && p.chunk_fragment[a] == p.chunk_fragment[b])) continue;
        Evaluator::Loads trial = loads;
        ev.Move(&trial, a, sa, sb);
        ev.Move(&trial, b, sb, sa);
        consider(trial, {{a, sb}, {b, sa}});
      }
    if (change.empty()) break;
    for (auto [c, s] : change) {
      ev.Move(&loads, c, (*owner)[c], s);
      (*owner)[c] = s;
    }
    cur = best;
  }
  return ev.CostOf(ev.Of(*owner));
}

// The best local optimum over the given starts, greedy and round robin;
// ties go to the earliest start.
std::vector<int32_t> BestPlacement(const Problem& p, const Choice& choice, const Rates& rates,
                                   std::vector<std::vector<int32_t>> starts) {
  Evaluator ev(p, choice, rates);
  starts.push_back(Greedy(p, ev));
  starts.push_back(RoundRobinOwners(p));
  std::vector<int32_t> best;
  Cost best_cost;
  for (auto& owner : starts) {
    Cost cost = LocalSearch(p, ev, &owner);
    if (best.empty() || Better(cost, best_cost)) best = owner, best_cost = cost;
  }
  return best;
}

Choice Uniform(const Problem& p, int codec) {
  const int R = p.R();
  return Choice{std::vector<int>(R * R, codec), std::vector<int>(R * R, codec)};
}

// Codecs per region pair for a placement (docs/planner.md, "Codecs"). The
// time of pairs {a, b} depends only on that pair's codecs, so each region
// pair is decided alone: the safest (push, pull) whose step time is within
// codec_gain of the fastest, then relaxed back to the safest that does not
// make the whole step slower.
Choice ChooseCodecs(const Problem& p, const Rates& rates, const std::vector<int32_t>& owner) {
  if (p.candidates.empty()) return p.job;
  const int R = p.R(), n = static_cast<int>(p.candidates.size());
  std::vector<std::pair<int, int>> combos;  // candidate ranks (push, pull), safest first
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) combos.push_back({a, b});
  std::stable_sort(combos.begin(), combos.end(), [](auto x, auto y) {
    auto key = [](std::pair<int, int> c) {
      return std::tuple(std::max(c.first, c.second), c.first + c.second, c.first);
    };
    return key(x) < key(y);
  });
  auto set = [&](Choice* c, int a, int b, std::pair<int, int> combo) {
    c->push[a * R + b] = c->push[b * R + a] = p.candidates[combo.first];
    c->pull[a * R + b] = c->pull[b * R + a] = p.candidates[combo.second];
  };

  Choice choice = Uniform(p, p.candidates[0]);
  std::vector<std::vector<double>> local(R * R);  // per pair a <= b: its time under each combo
  std::vector<size_t> picked(R * R, 0);
  double slowest = 0;
  for (int a = 0; a < R; ++a)
    for (int b = a; b < R; ++b) {
      for (auto combo : combos) {
        Choice c = choice;
        set(&c, a, b, combo);
        Evaluator ev(p, c, rates);
        const std::vector<double> t = ev.PairTimes(ev.Of(owner));
        local[a * R + b].push_back(std::max(t[a * R + b], t[b * R + a]));
      }
      const std::vector<double>& l = local[a * R + b];
      const double fastest = p.compute_ms + *std::min_element(l.begin(), l.end());
      size_t i = 0;
      while (p.compute_ms + l[i] > fastest * (1 + p.codec_gain) && !Near(p.compute_ms + l[i], fastest)) ++i;
      picked[a * R + b] = i;
      slowest = std::max(slowest, l[i]);
    }
  for (int a = 0; a < R; ++a)
    for (int b = a; b < R; ++b) {
      const std::vector<double>& l = local[a * R + b];
      size_t i = 0;
      while (i < picked[a * R + b] && l[i] > slowest && !Near(l[i], slowest)) ++i;
      set(&choice, a, b, combos[i]);
    }
  return choice;
}

// Relabels `next` within each size class so that as many chunks as possible
// keep their owner in `prev`; the per-server counts, and so the cost, stay.
std::vector<int32_t> KeepInPlace(const Problem& p, const std::vector<int32_t>& prev, const std::vector<int32_t>& next) {
  const int S = p.S(), K = p.K();
  std::vector<int> need(S * K, 0);
  for (uint32_t c = 0; c < next.size(); ++c) ++need[next[c] * K + p.chunk_class[c]];
  std::vector<int32_t> out(next.size(), -1);
  for (uint32_t c = 0; c < prev.size(); ++c)
    if (int& n = need[prev[c] * K + p.chunk_class[c]]; n > 0) out[c] = prev[c], --n;
  for (uint32_t c = 0; c < out.size(); ++c) {
    if (out[c] >= 0) continue;
    int s = 0;
    while (need[s * K + p.chunk_class[c]] == 0) ++s;
    out[c] = s;
    --need[s * K + p.chunk_class[c]];
  }
  return out;
}

CodecTable Names(const Problem& p, const Choice& c) {
  CodecTable t;
  t.regions = p.R();
  for (int i : c.push) t.push.push_back(p.codecs[i].name);
  for (int i : c.pull) t.pull.push_back(p.codecs[i].name);
  return t;
}

Plan Build(const Problem& p, const LinkMatrix& links, const Choice& choice, std::vector<int32_t> owner,
           uint64_t version) {
  Rates rates(links);
  Evaluator ev(p, choice, rates);
  Plan plan;
  plan.prediction = ev.Predict(owner);
  plan.shard_map.layout = p.layout;
  plan.shard_map.owner = std::move(owner);
  plan.shard_map.version = version;
  plan.codecs = Names(p, choice);
  plan.links = links;
  return plan;
}

}  // namespace

LinkMatrix::LinkMatrix(std::vector<std::string> regions)
    : regions_(std::move(regions)), links_(regions_.size() * regions_.size()) {}

LinkMatrix LinkMatrix::FromJob(const JobSpec& job) {
  std::vector<std::string> names;
  for (const auto& r : job.regions) names.push_back(r.name);
  LinkMatrix m(std::move(names));
  for (const LinkSpec& l : job.wan.links) {
    const int a = m.Index(l.from), b = m.Index(l.to);
    if (a < 0 || b < 0) continue;  // ParseJob rejects these
    LinkState& s = m.at(a, b);
    s.delay_ms = l.delay_ms + l.jitter_ms / 2;
    s.bandwidth_mbit = l.bandwidth_mbit > 0 ? l.bandwidth_mbit : kLoopbackMbit;
    // A user-space proxy cannot drop packets (TCP hides loss from it), so
    // under proxy emulation the declared loss does not happen.
    s.loss = job.wan.emulation == WanEmulation::kProxy ? 0 : l.loss;
    s.declared = true;
  }
  // Nor does any TCP sender there see the link's round trip, so nothing
  // paces to it.
  m.set_bbr(FromString<TcpCongestionControl>(CongestionControl(job)) == TcpCongestionControl::kBbr &&
            job.wan.emulation != WanEmulation::kProxy);
  return m;
}

std::string CongestionControl(const JobSpec& job) {
  if (job.wan.congestion_control != TcpCongestionControl::kAuto) return ToString(job.wan.congestion_control);
  std::ifstream in("/proc/sys/net/ipv4/tcp_congestion_control");
  std::string cc;
  return in >> cc ? cc : "cubic";
}

int LinkMatrix::Index(const std::string& region) const {
  for (size_t i = 0; i < regions_.size(); ++i)
    if (regions_[i] == region) return static_cast<int>(i);
  return -1;
}

double LinkMatrix::GoodputMbit(int from, int to) const {
  const LinkState& l = at(from, to);
  const double rtt_s = RttMs(from, to) / 1e3;
  if (l.loss <= 0 || rtt_s <= 0) return l.bandwidth_mbit;
  // BBR paces at the bottleneck rate it measures and does not back off on
  // random loss (below ~20%): only the dropped packets are lost.
  if (bbr_) return l.bandwidth_mbit * (1 - l.loss);
  const double mathis_mbit = kMssBytes * 8 / (rtt_s * std::sqrt(2 * l.loss / 3)) / 1e6;
  return std::min(l.bandwidth_mbit, mathis_mbit);
}

double DefaultComputeMs(const JobSpec& job) {
  if (job.wan.compute_ms > 0) return job.wan.compute_ms;
  if (job.model.name == ModelKind::kSynthetic) return 0;
  return kCnnComputeMsPer64 * job.data.batch_size / 64.0;
}

StatusOr<Planner> Planner::Create(const JobSpec& job, const cluster::ChunkLayout& layout,
                                  const PlannerOptions& options) {
  auto p = std::make_shared<Problem>();
  for (const auto& r : job.regions) {
    p->regions.push_back(r.name);
    p->workers.push_back(r.workers);
    p->senders.push_back(r.aggregator ? std::min(r.workers, 1) : r.workers);
    p->aggregator.push_back(r.aggregator);
    for (int s = 0; s < r.servers; ++s) p->server_region.push_back(static_cast<int>(p->regions.size()) - 1);
  }
  if (p->S() == 0) return InvalidArgument("planner: the job has no parameter servers");
  if (job.NumWorkers() == 0) return InvalidArgument("planner: the job has no workers");
  if (layout.num_chunks() == 0) return InvalidArgument("planner: the model has no parameters to place");
  p->layout = layout;
  // ChunkLayout::Size without linking chunking.cc (see planner.h).
  auto size = [&](uint32_t c) { return std::min(layout.chunk_elems(), layout.num_params() - layout.Begin(c)); };
  for (uint32_t c = 0; c < layout.num_chunks(); ++c) {
    auto it = std::find(p->class_elems.begin(), p->class_elems.end(), size(c));
    if (it == p->class_elems.end()) it = p->class_elems.insert(p->class_elems.end(), size(c));
    p->chunk_class.push_back(static_cast<int>(it - p->class_elems.begin()));
    p->by_size.push_back(c);
  }
  std::stable_sort(p->by_size.begin(), p->by_size.end(), [&](uint32_t a, uint32_t b) { return size(a) > size(b); });
  p->declared = LinkMatrix::FromJob(job);
  p->emulation = job.wan.emulation;
  p->compute_ms = options.compute_ms.value_or(DefaultComputeMs(job));
  p->overlapped = job.training.staleness_bound >= 1 && job.training.prefetch;
  p->local_steps = std::max(1, job.training.local_steps);
  p->overlap_rounds = p->local_steps > 1 && job.training.overlap_rounds;
  p->overlap_steps = p->overlap_rounds ? job.training.overlap_steps : 0;
  p->fragments = p->local_steps > 1 ? std::max(1, job.training.fragments) : 1;
  p->chunk_fragment.assign(layout.num_chunks(), 0);
  const std::vector<uint32_t> cuts = cluster::FragmentCuts(layout, p->fragments);
  for (int f = 0; f < p->fragments; ++f)
    for (uint32_t c = cuts[f]; c < cuts[f + 1]; ++c) p->chunk_fragment[c] = f;
  if (!std::isfinite(p->compute_ms) || p->compute_ms < 0)
    return InvalidArgument("planner: the compute time per step must be >= 0 ms");
  p->codec_gain = options.codec_gain;
  p->drift = job.wan.replan_drift;
  p->max_steps = options.max_search_steps;

  const int R = p->R();
  p->job = Uniform(*p, 0);
  for (int w = 0; w < R; ++w)
    for (int r = 0; r < R; ++r) {
      const std::string where = "compression codec for " + p->regions[w] + " <-> " + p->regions[r];
      GD_ASSIGN_OR_RETURN(p->job.push[w * R + r], p->Intern(job.PushCodec(p->regions[w], p->regions[r]), where));
      GD_ASSIGN_OR_RETURN(p->job.pull[w * R + r], p->Intern(job.PullCodec(p->regions[w], p->regions[r]), where));
    }
  for (size_t i = 0; i < job.wan.planner_codecs.size(); ++i) {
    GD_ASSIGN_OR_RETURN(int c, p->Intern(job.wan.planner_codecs[i], "wan.planner_codecs[" + std::to_string(i) + "]"));
    if (std::find(p->candidates.begin(), p->candidates.end(), c) == p->candidates.end()) p->candidates.push_back(c);
  }
  // Safest first: lossless before lossy, then more predicted bytes (less
  // dropped) before fewer, then the order of the job file.
  const uint64_t ref = p->class_elems.front();
  std::stable_sort(p->candidates.begin(), p->candidates.end(), [&](int a, int b) {
    const Codec &x = p->codecs[a], &y = p->codecs[b];
    if (x.spec.lossy() != y.spec.lossy()) return !x.spec.lossy();
    return EncodedBytes(x.spec, ref) > EncodedBytes(y.spec, ref);
  });
  return Planner(std::move(p));
}

const LinkMatrix& Planner::declared_links() const { return p_->declared; }
const cluster::ChunkLayout& Planner::layout() const { return p_->layout; }
double Planner::compute_ms() const { return p_->compute_ms; }
bool Planner::overlapped() const { return p_->overlapped; }
int Planner::num_servers() const { return p_->S(); }
const std::vector<std::string>& Planner::regions() const { return p_->regions; }
const std::vector<int>& Planner::workers_per_region() const { return p_->workers; }
const std::vector<int>& Planner::server_regions() const { return p_->server_region; }
WanEmulation Planner::emulation() const { return p_->emulation; }
CodecTable Planner::JobCodecs() const { return Names(*p_, p_->job); }
std::vector<int32_t> Planner::RoundRobin() const { return RoundRobinOwners(*p_); }

Plan Planner::MakePlan(const LinkMatrix& requested, const std::vector<std::vector<int32_t>>& also_try) const {
  const Problem& p = *p_;
  const LinkMatrix& links = p.Usable(requested);
  const Rates rates(links);
  std::vector<std::vector<int32_t>> starts;
  for (const auto& o : also_try)
    if (p.ValidOwner(o)) starts.push_back(o);

  Choice choice = p.candidates.empty() ? p.job : Uniform(p, p.candidates[0]);
  std::vector<int32_t> owner = BestPlacement(p, choice, rates, starts);
  // Codecs and placement depend on each other: alternate a few rounds. The
  // placement returned is always the best found for the codecs returned.
  for (int round = 0; round < 3; ++round) {
    Choice next = ChooseCodecs(p, rates, owner);
    if (next == choice) break;
    choice = std::move(next);
    starts.insert(starts.begin(), owner);
    owner = BestPlacement(p, choice, rates, starts);
  }
  return Build(p, links, choice, std::move(owner), 1);
}

StatusOr<Prediction> Planner::Predict(const std::vector<int32_t>& owner, const CodecTable& codecs,
                                      const LinkMatrix& links) const {
  const Problem& p = *p_;
  if (!p.ValidOwner(owner))
    return InvalidArgument("placement must name one of " + std::to_string(p.S()) + " servers for each of " +
                           std::to_string(p.layout.num_chunks()) + " chunks");
  if (links.regions() != p.regions) return InvalidArgument("link matrix regions differ from the job's");
  const int R = p.R();
  if (codecs.regions != R || codecs.push.size() != size_t(R * R) || codecs.pull.size() != size_t(R * R))
    return InvalidArgument("codec table is not for the job's " + std::to_string(R) + " regions");
  Choice choice = Uniform(p, 0);
  for (int i = 0; i < R * R; ++i) {
    choice.push[i] = p.Find(codecs.push[i]);
    choice.pull[i] = p.Find(codecs.pull[i]);
    for (int c : {choice.push[i], choice.pull[i]})
      if (c < 0) return InvalidArgument("codec table names a codec that is neither the job's nor a candidate");
  }
  const Rates rates(links);
  Evaluator ev(p, choice, rates);
  return ev.Predict(owner);
}

StatusOr<Replan> Planner::CheckDrift(const Plan& previous, const LinkMatrix& measured) const {
  const Problem& p = *p_;
  if (measured.regions() != p.regions || previous.links.regions() != p.regions)
    return InvalidArgument("link matrix regions differ from the job's");
  if (!p.ValidOwner(previous.shard_map.owner)) return InvalidArgument("the previous plan is for another layout");
  Replan out;
  for (int a = 0; a < p.R(); ++a)
    for (int b = 0; b < p.R(); ++b) {
      const double planned = previous.links.at(a, b).bandwidth_mbit, now = measured.at(a, b).bandwidth_mbit;
      const double change = planned > 0 ? (now - planned) / planned : (now > 0 ? 1.0 : 0.0);
      if (std::abs(change) > p.drift && !Near(std::abs(change), p.drift))
        out.drifted.push_back(p.regions[a] + " -> " + p.regions[b] + ": planned " + std::to_string(planned) +
                              " Mbit/s, measured " + std::to_string(now) + " Mbit/s (" + Pct(change) + ")");
    }
  if (out.drifted.empty()) return out;
  const std::vector<int32_t>& prev = previous.shard_map.owner;
  Plan plan = MakePlan(measured, {prev});
  plan.shard_map.owner = KeepInPlace(p, prev, plan.shard_map.owner);
  plan.shard_map.version = previous.shard_map.version + 1;
  for (uint32_t c = 0; c < prev.size(); ++c)
    if (prev[c] != plan.shard_map.owner[c]) out.moves.push_back({c, prev[c], plan.shard_map.owner[c]});
  out.plan = std::move(plan);
  return out;
}

}  // namespace geodesic::wan

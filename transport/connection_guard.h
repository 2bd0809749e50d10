// Limits on the TCP connections a process's serving ROUTER sockets accept
// (the coordinator, shards and backups, a federated executor's client
// gateway), so that a peer cannot make accepting connections expensive
// (docs/security.md, "Denial of service").
//
// ZeroMQ accepts every connection a bound ROUTER sees and gives no way to
// refuse or close one peer's. ConnectionGuard watches each socket through
// ZeroMQ's socket monitor: ZMQ_EVENT_ACCEPTED names the new connection's
// file descriptor, and the guard's thread reads the peer's address from it
// and, when that address or the process is over a limit, shuts the
// descriptor down; ZeroMQ then sees the connection end and closes it
// itself. ZeroMQ's I/O thread may have read the peer's first handshake
// command by then (a CurveZMQ HELLO costs the server a key agreement), so
// an address that goes over its own limits is also blocked at the
// listening sockets for a while: a classic BPF socket filter on each
// listener (ZMQ_EVENT_LISTENING names it; no privilege needed) drops its
// connection attempts in the kernel, before any descriptor or handshake.
// The limits (ConnectionLimiter):
// - per address, connections open at once and new connections a second
//   (a token bucket); an address over either is blocked for
//   `block_first`, doubling at each further block up to `block_max`;
// - in all, connections open at once, below the file-descriptor limit, so
//   that the process never runs out of descriptors for its files (the
//   coordinator's state) and ZeroMQ's listener never spins on EMFILE. At
//   that limit, a new connection from an address that holds fewer
//   connections than the address that holds the most takes one of the
//   latter's (its newest), so that one flooding address cannot lock out
//   others.
// Connections from the host itself (the peer's address is the address it
// connected to: members on the same machine) count towards the total only:
// they are never limited per address, blocked or taken from. Handshakes
// that never finish are bounded by ZMQ_HANDSHAKE_IVL (`handshake_timeout`),
// which Watch sets.
//
// One guard per process (the total limit is the process's); it also counts
// and logs the handshakes ZeroMQ fails on the sockets it watches (a
// plaintext peer, a client that expects another server key), as
// ZapHandler::Watch does for sockets without a guard: ZeroMQ allows one
// monitor per socket, so a socket is watched by one or the other.
//
// ConnectionLimiter is the decision alone (no sockets; one thread; the
// caller's clock). ConnectionGuard runs its own thread; Watch is called
// from the thread that owns the socket, the counters from any thread.
// FdReserve and RaiseFileLimit are the file-descriptor side.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "common/clock.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/throttle.h"

namespace geodesic::transport {

struct ConnectionLimits {
  // Connections open at once from one address. A member holds one
  // connection to each process it talks to; every process of a host
  // shares its address.
  int per_source_open = 128;
  // New connections from one address: `per_source_burst` at once, then
  // `per_source_rate` a second. A refused member's DEALER reconnects by
  // itself (ZeroMQ's reconnect interval, 100 ms; TCP retries an attempt
  // the filter dropped after 1 s), so a refusal costs a member time, not
  // its place.
  int per_source_burst = 64;
  double per_source_rate = 32;
  // Connections open at once over every socket the guard watches; 0: the
  // soft RLIMIT_NOFILE minus `reserve_fds` (half the limit if that is
  // less), which leaves descriptors for files, the process's own
  // connections and its HTTP endpoint (256 connections at most).
  int total_open = 0;
  int reserve_fds = 512;
  // Addresses whose connection rate is remembered at once; past that,
  // those whose bucket has refilled are forgotten first, then all.
  size_t max_sources = 4096;
  // Blocking an address at the listening sockets after it went over its
  // own limits: for block_first, doubling at each further block up to
  // block_max; its count starts over once it has been unblocked for
  // block_max. At most max_blocked addresses (IPv4) are in the filter;
  // the newest blocks win, and the others are still refused at accept.
  Duration block_first = std::chrono::seconds(1);
  Duration block_max = std::chrono::seconds(60);
  size_t max_blocked = 120;
  // ZMQ_HANDSHAKE_IVL of the watched sockets: a connection whose
  // handshake (ZMTP greeting, CURVE, ZAP) has not finished by then is
  // closed. ZeroMQ's default is 30 s; a CurveZMQ handshake takes four
  // round trips (1 s at 250 ms).
  Duration handshake_timeout = std::chrono::seconds(10);
};

// The soft RLIMIT_NOFILE raised to the hard limit (a process that serves
// connections needs descriptors; the soft default is often 1,024); returns
// the soft limit now in force.
StatusOr<uint64_t> RaiseFileLimit();

// `limits.total_open`, or what it means when 0, under the soft limit now.
int TotalOpenLimit(const ConnectionLimits& limits);

enum class ConnectionVerdict {
  kAdmitted,
  kSourceOpen,  // the address holds per_source_open connections
  kSourceRate,  // the address opened connections faster than per_source_rate
  kTotalOpen,   // total_open connections are open, none to take from an address that holds more
  kBlocked,     // the address is blocked for going over its limits (a connection that got past the filter)
};

class ConnectionLimiter {
 public:
  struct Admission {
    ConnectionVerdict verdict = ConnectionVerdict::kAdmitted;
    // Admitted at the total limit: this connection (of `evicted_source`,
    // the address that held the most) is to be closed to make room.
    int evict_fd = -1;
    std::string evicted_source;
    // Refused for its own limits: the address is now blocked this long.
    Duration blocked_for{0};
  };

  // `total_open` resolved (TotalOpenLimit).
  ConnectionLimiter(const ConnectionLimits& limits, int total_open);

  // A connection from `source` was accepted as descriptor `fd`: admit it
  // (it is counted until Closed(fd)) or not (it is not counted). An `fd`
  // still counted is taken as closed first (its close went unseen).
  // `local`: it comes from this host (limited by the total only).
  Admission Accepted(int fd, const std::string& source, TimePoint now, bool local = false);
  // Descriptor `fd` closed; unknown descriptors (refused ones) are ignored.
  void Closed(int fd);

  int open() const { return static_cast<int>(source_of_.size()); }
  int open_from(const std::string& source) const;
  // The address counted for `fd` ("" if none).
  std::string SourceOf(int fd) const;
  size_t sources_remembered() const { return buckets_.size(); }
  // The addresses blocked at `now`, newest block first, at most
  // max_blocked; expired blocks are dropped (a change).
  std::vector<std::string> Blocked(TimePoint now);
  // Bumped whenever the blocked set changes (a block, an expiry).
  uint64_t block_changes() const { return block_changes_; }
  int total_open_limit() const { return total_open_; }
  const ConnectionLimits& limits() const { return limits_; }

 private:
  struct Bucket {
    double tokens = 0;
    TimePoint at{};
  };
  // Takes a token of `source`'s bucket; false if none is left.
  bool TakeToken(const std::string& source, TimePoint now);
  void Forget(TimePoint now);
  void Count(int fd, const std::string& source, bool local);
  // At the total: makes room by taking the newest connection of the
  // address that holds the most, if it holds more than one more than
  // `source` (any, for this host's); false if none does.
  bool TakeRoom(const std::string& source, bool local, Admission* a);
  Duration Block(const std::string& source, TimePoint now);
  bool IsBlocked(const std::string& source, TimePoint now) const;

  ConnectionLimits limits_;
  int total_open_;
  std::unordered_map<int, std::string> source_of_;          // counted descriptors
  std::unordered_map<std::string, std::vector<int>> open_;  // by address, oldest first
  std::set<std::pair<size_t, std::string>> by_open_;        // (open, address), for the address that holds the most
  std::unordered_map<std::string, Bucket> buckets_;
  std::set<int> local_;  // counted descriptors from this host (not in open_)
  struct Strikes {
    TimePoint until{};  // blocked until then
    int count = 0;      // blocks in a row
    TimePoint since{};  // when the latest block began (ordering)
  };
  std::unordered_map<std::string, Strikes> blocks_;
  std::vector<std::string> last_blocked_;  // what Blocked() last returned
  uint64_t block_changes_ = 0;
};

class ConnectionGuard {
 public:
  ConnectionGuard(zmq::context_t& ctx, ConnectionLimits limits = {}, const Clock* clock = RealClock::Get());
  ~ConnectionGuard();  // stops and joins the thread
  ConnectionGuard(const ConnectionGuard&) = delete;
  ConnectionGuard& operator=(const ConnectionGuard&) = delete;

  // Guards `socket`, a ROUTER of this guard's context that has not bound
  // yet (sets its handshake timeout; starts the thread on the first call).
  // Call from the thread that uses `socket`; `socket` may close before the
  // guard stops. The one call a serving socket needs.
  Status Watch(zmq::socket_t& socket);
  void Stop();

  // Connections closed by the limits (evictions included).
  uint64_t refused() const { return refused_.load(); }
  // Handshakes ZeroMQ failed on the watched sockets: a plaintext peer of a
  // CURVE socket, a client that expects another server key (ZAP never sees
  // them). Each is logged (at most a line a second) before it is counted.
  uint64_t handshake_failures() const { return handshake_failures_.load(); }
  // accept() failures of the watched sockets' listeners (EMFILE...).
  uint64_t accept_failures() const { return accept_failures_.load(); }
  // Connections open now on the watched sockets, as the guard counts them.
  int open() const { return open_.load(); }
  // Addresses in the listeners' filters now.
  int blocked() const { return blocked_.load(); }
  int total_open_limit() const { return total_open_limit_; }

 private:
  void Loop();
  void TakeWatched();
  // Handles one event of `monitor`; false if none was waiting.
  bool ReadEvent(zmq::socket_t& monitor);
  void OnAccepted(int fd, const std::string& endpoint);
  void Refuse(int fd, const std::string& source, const std::string& endpoint, const ConnectionLimiter::Admission& a);
  void Evict(const ConnectionLimiter::Admission& a, const std::string& source, const std::string& endpoint);
  // Puts the limiter's blocked addresses into every listener's filter, if
  // they changed.
  void ApplyBlocks();
  void Log(const std::string& line);

  zmq::context_t& ctx_;
  const Clock* clock_;
  const int total_open_limit_;
  ConnectionLimiter limiter_;  // the thread's
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> refused_{0}, handshake_failures_{0}, accept_failures_{0};
  std::atomic<int> open_{0};
  std::atomic<int> blocked_{0};
  std::unordered_map<int, int> listeners_;   // the thread's: port -> listening descriptor
  uint64_t applied_blocks_ = 0;              // the thread's: block_changes() in the filters
  Throttle lines_{std::chrono::seconds(1)};  // the thread's: one line a second
  Mutex mu_;
  std::vector<zmq::socket_t> handoff_ GD_GUARDED_BY(mu_);  // monitors Watch made, for the thread
  std::vector<zmq::socket_t> monitors_;                    // the thread's
};

// Spare file descriptors (on /dev/null), held from start-up and closed for
// the moment a file that must not be lost is written (the coordinator's
// state and stats), so that the write finds descriptors even while
// connections have taken all the others. Not thread-safe: one owner.
class FdReserve {
 public:
  explicit FdReserve(int count);  // opens up to `count`
  ~FdReserve();
  FdReserve(const FdReserve&) = delete;
  FdReserve& operator=(const FdReserve&) = delete;

  // Runs `write` with the reserve closed, then takes it again.
  template <class Write>
  auto Spend(Write&& write) -> decltype(write()) {
    Release();
    struct Refill {
      FdReserve* r;
      ~Refill() { r->Take(); }
    } refill{this};
    return write();
  }
  int held() const { return static_cast<int>(fds_.size()); }

 private:
  void Release();
  void Take();
  int want_;
  std::vector<int> fds_;
};

}  // namespace geodesic::transport

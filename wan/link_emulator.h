// LinkEmulator: WAN links between regions emulated on one machine, in user
// space (no root), as TCP proxies that add delay, jitter, a bandwidth cap and
// partitions.
//
// A link joins region A to region B and has one shape per direction. A route
// listens on a local port and forwards every accepted TCP connection to a
// target through one direction of a link, so a client in A reaches a server
// in B by connecting to the route's port. The proxy is a transparent byte
// pipe (ZeroMQ's ZMTP runs through it unchanged).
//
// Model of one link direction: a single bottleneck FIFO shared by every
// connection and route using that direction. A chunk of n bytes read from a
// source socket is serialized from max(when it was read, link free) for
// n*8/bandwidth, then arrives `delay` (+ uniform [0, jitter]) later; within a
// connection bytes never reorder. Each connection may have at most two chunks waiting
// in the bottleneck queue at once (the rest wait in its own buffer, like a
// sender's socket buffer), so connections share a link about equally
// whenever they start. A connection stops reading its source while more
// than max(min_queue_bytes, bandwidth * (delay + jitter) + 1 MiB) of its
// bytes wait in that direction (backpressure; memory stays bounded).
// Closing: an EOF travels the link like bytes and half-closes the far side
// after the bytes before it; a reset or write error closes both sockets.
// The TCP handshake itself is not delayed, and packet loss is not emulated
// (TCP would hide it from a proxy anyway).
//
// Threading: one Asio io_context run by one thread ("gd-link-emu") owns
// every socket and timer; the public methods are thread-safe (link state
// sits behind a mutex; Heal and Stop post work to the I/O thread).
//
// Cost: Load() says what the emulator itself has used, its I/O thread's CPU
// time against the bytes it relayed, so a run can tell the emulation's CPU
// from the job's (`geodesic bench links` measures it per MB and per idle
// connection; docs/wan.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace geodesic::wan {

struct LinkShape {
  double delay_ms = 0;        // one way, added after serialization
  double jitter_ms = 0;       // one way, uniform in [0, jitter_ms]; never reorders bytes of a connection
  double bandwidth_mbit = 0;  // 1e6 bits per second; 0: unlimited
};

struct LinkCounters {
  uint64_t bytes_forward = 0;  // bytes delivered A -> B (all routes and connections)
  uint64_t bytes_back = 0;     // bytes delivered B -> A
  uint64_t connections = 0;    // connections accepted on routes of this link
  bool cut = false;
};

// What the emulator has done and cost since Start (all links).
struct EmulatorLoad {
  double cpu_seconds = 0;      // the I/O thread's CPU time, user + system
  uint64_t bytes_relayed = 0;  // bytes delivered to sinks, every link and direction
  uint64_t connections = 0;    // accepted on every route
  uint64_t open_connections = 0;
  uint64_t reads = 0;          // completed reads from sources
  uint64_t writes = 0;         // writes to sinks
  uint64_t timer_wakeups = 0;  // timer handlers that ran to deliver or admit bytes
  int nice = 0;                // the I/O thread's nice value (LinkEmulatorOptions::io_nice if allowed)
};

// Which direction of a link a route's client -> target bytes take.
enum class LinkDirection { kForward, kBack };

struct LinkEmulatorOptions {
  uint64_t seed = 1;                    // jitter draws
  int64_t min_queue_bytes = 4 << 20;    // per connection and direction, before backpressure
  int64_t max_chunk_bytes = 256 << 10;  // largest read, so big messages are paced smoothly
  double chunk_ms = 20;                 // chunks shrink on slow links to about this much serialization
  // The I/O thread's nice value, where this process may raise its priority
  // (root, CAP_SYS_NICE or RLIMIT_NICE; otherwise it keeps the process's). It
  // stands in for a link, whose delay should not grow when the job's own
  // processes keep every core busy: at the default priority it waits for a
  // core behind them at every wake-up, and each wait adds to the delay.
  // The kernel emulation's delayer runs at the same value (deploy/netns).
  int io_nice = -15;
};

class LinkEmulator {
 public:
  explicit LinkEmulator(LinkEmulatorOptions options = {});
  ~LinkEmulator();  // Stop()s
  LinkEmulator(const LinkEmulator&) = delete;
  LinkEmulator& operator=(const LinkEmulator&) = delete;

  // Returns the link's id (0, 1, ... in call order). `forward` shapes A -> B.
  int AddLink(std::string name, LinkShape forward, LinkShape back);

  // Listens on listen_host:listen_port (0: a free port) and forwards every
  // accepted connection to target_host:target_port; client -> target bytes
  // take `direction` of `link`, target -> client bytes the other. Returns the
  // bound port. May be called before or after Start(). InvalidArgument for an
  // unknown link, Unavailable if the address cannot be resolved or bound.
  // The target is resolved now and connected per accepted connection; a
  // target given by name is resolved again for each connection (a
  // container created again may have another address; a failed lookup
  // keeps the last one); a failed connect closes the client's connection.
  StatusOr<int> AddRoute(int link, const std::string& listen_host, int listen_port, const std::string& target_host,
                         int target_port, LinkDirection direction = LinkDirection::kForward);

  // Starts the I/O thread. FailedPrecondition if started before.
  Status Start();
  // Closes every listener and connection (queued bytes are dropped) and joins
  // the I/O thread; prompt even with a link cut. Idempotent; no restart.
  void Stop();

  // The methods below take a link id from AddLink; any other id is a bug
  // (GD_CHECK).
  //
  // Partition: no byte (or EOF) of the link moves either way until Heal.
  // Bytes are held, not dropped, and connections stay open; after Heal the
  // held bytes flow in order (those already serialized at once).
  void Cut(int link);
  void Heal(int link);
  // Takes effect for bytes serialized from now on.
  void SetShape(int link, LinkShape forward, LinkShape back);
  LinkCounters Counters(int link) const;
  // Any time, from any thread; after Stop, the totals at the end.
  EmulatorLoad Load() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace geodesic::wan

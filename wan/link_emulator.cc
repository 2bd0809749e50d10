#include "wan/link_emulator.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <asio.hpp>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/thread_annotations.h"

namespace geodesic::wan {
namespace {

using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;
using Time = SteadyClock::time_point;

// How much of one connection and direction may wait in the bottleneck queue
// at once: at least two chunks, and up to this much serialization time, so
// the link stays busy when the I/O thread wakes late (a loaded machine),
// while connections still take turns every few milliseconds.
constexpr int kMinAdmittedPerPipe = 2;
constexpr auto kAdmitAhead = std::chrono::milliseconds(20);
constexpr size_t kMaxWriteBytes = 1 << 20;
constexpr int64_t kMinChunkBytes = 4 << 10;
constexpr double kQueueSlackBytes = 1 << 20;

SteadyClock::duration Ms(double ms) {
  return std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double, std::milli>(ms));
}

double BytesPerSecond(const LinkShape& shape) { return shape.bandwidth_mbit * 1e6 / 8; }

double ClockSeconds(clockid_t clock) {
  timespec t{};
  if (::clock_gettime(clock, &t) != 0) return 0;
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Link {
  std::string name;
  std::array<LinkShape, 2> shape;  // [0] forward (A -> B), [1] back
  std::array<Time, 2> free_at{};   // when each direction's bottleneck has serialized everything booked
  Time healed_at{};                // nothing serializes earlier than the end of the last cut
  LinkCounters counters;           // counters.cut is the partition flag
};

std::vector<tcp::endpoint> Endpoints(const tcp::resolver::results_type& found) {
  std::vector<tcp::endpoint> out;
  for (const auto& entry : found) out.push_back(entry.endpoint());
  return out;
}

struct Route {
  explicit Route(asio::io_context& io) : acceptor(io), backoff(io), resolver(io) {}
  tcp::acceptor acceptor;
  asio::steady_timer backoff;  // after a failed accept (e.g. out of descriptors)
  tcp::resolver resolver;      // a named target, again per connection
  Link* link = nullptr;
  int client_dir = 0;                  // link direction of client -> target bytes
  std::vector<tcp::endpoint> targets;  // the target's last known addresses, tried in order
  std::string target_name;             // set when the target is a name, not an address
  std::string target_port;
  std::string description;  // "127.0.0.1:4000 -> 127.0.0.1:5000 over us-eu"
};

// Bytes read in one go. A large read keeps the buffer it was read into (no
// copy); a small one is copied into one of its own size, so that many small
// messages do not each hold a whole read buffer.
struct Bytes {
  std::unique_ptr<uint8_t[]> data;
  size_t size = 0;
};

struct Chunk {
  Bytes bytes;
  bool eof = false;    // the source closed (no bytes)
  bool reset = false;  // ... with an error rather than a clean EOF
  Time read_at{};
  Time serialized_at{};
  Time arrive_at{};
};

// One direction of one connection: bytes read from `source`, delivered to
// `sink`. queue[0, writing) are being written, queue[0, admitted) are booked
// on the link, the rest wait to be admitted.
struct Pipe {
  Pipe(asio::io_context& io, tcp::socket* from, tcp::socket* to, int link_dir)
      : source(from), sink(to), dir(link_dir), timer(io) {}
  tcp::socket* source;
  tcp::socket* sink;
  int dir;
  asio::steady_timer timer;
  bool timer_armed = false;
  Time timer_at{};
  Bytes read_buffer;  // size: its capacity
  std::deque<Chunk> queue;
  size_t admitted = 0;
  size_t writing = 0;
  int64_t queued_bytes = 0;  // bytes in `queue`
  Time last_arrive{};
  bool reading = false;      // waiting for the source to be readable
  bool drained = true;       // the last read found nothing more: wait before reading again
  bool source_done = false;  // its EOF or error is queued
  bool done = false;         // ... and delivered
};

struct Connection {
  Connection(asio::io_context& io, uint64_t conn_id, tcp::socket client_socket, Link* l, int client_dir)
      : id(conn_id),
        link(l),
        client(std::move(client_socket)),
        target(io),
        pipes{{Pipe(io, &client, &target, client_dir), Pipe(io, &target, &client, 1 - client_dir)}} {}
  uint64_t id;
  Link* link;
  tcp::socket client;
  tcp::socket target;
  std::array<Pipe, 2> pipes;  // [0] client -> target, [1] target -> client
  bool closed = false;
};

using ConnectionPtr = std::shared_ptr<Connection>;

}  // namespace

class LinkEmulator::Impl {
 public:
  explicit Impl(LinkEmulatorOptions o) : options(o), rng(o.seed) {}

  // Everything below runs on the I/O thread, except where it says so.
  void Accept(Route* r) {
    r->acceptor.async_accept([this, r](std::error_code ec, tcp::socket socket) {
      if (closing) return;
      if (!ec) {
        OnAccepted(r, std::move(socket));
        Accept(r);
        return;
      }
      if (ec == asio::error::operation_aborted) return;
      GD_LOG(WARNING) << "link emulator route " << r->description << ": accept failed: " << ec.message();
      r->backoff.expires_after(std::chrono::milliseconds(50));
      r->backoff.async_wait([this, r](std::error_code wait_ec) {
        if (!wait_ec && !closing) Accept(r);
      });
    });
  }

  void OnAccepted(Route* r, tcp::socket socket) {
    auto c = std::make_shared<Connection>(io, next_connection++, std::move(socket), r->link, r->client_dir);
    {
      MutexLock lock(mu);
      ++r->link->counters.connections;
    }
    connections[c->id] = c;
    connections_accepted.fetch_add(1, std::memory_order_relaxed);
    open_connections.store(connections.size(), std::memory_order_relaxed);
    if (r->target_name.empty()) {
      Connect(c, r);
      return;
    }
    // A name may move (a container created again gets another address):
    // resolved again for each connection, the last addresses kept if it fails.
    r->resolver.async_resolve(r->target_name, r->target_port,
                              [this, c, r](std::error_code ec, const tcp::resolver::results_type& found) {
                                if (c->closed || ec == asio::error::operation_aborted) return;
                                if (!ec && !found.empty()) r->targets = Endpoints(found);
                                Connect(c, r);
                              });
  }

  // Connects to the target's addresses in turn until one answers (a name
  // such as localhost may resolve to ::1 first and 127.0.0.1 next, and the
  // target listen on one of them only).
  void Connect(const ConnectionPtr& c, Route* r) {
    asio::async_connect(c->target, r->targets, [this, c, r](std::error_code ec, const tcp::endpoint&) {
      if (c->closed) return;
      if (ec) {
        GD_LOG(WARNING) << "link emulator route " << r->description << ": connect failed: " << ec.message();
        Close(c);
        return;
      }
      std::error_code ignored;
      for (tcp::socket* s : {&c->client, &c->target}) {
        s->set_option(tcp::no_delay(true), ignored);
        s->non_blocking(true, ignored);  // ReadNow's reads
      }
      StartRead(c, 0);
      StartRead(c, 1);
    });
  }

  // Reads the source until it has nothing more, or its bytes waiting reach
  // the queue bound (a delivery resumes it), then waits until it is readable
  // again; a short read is taken to have emptied the socket. A burst is
  // read in one handler, not one handler per read. Per small message this
  // costs what async_read_some did: that tries another read at once after
  // every read (asio 1.22 stops only after an EOF), which finds nothing;
  // the wait re-arms epoll instead (EPOLL_CTL_MOD, which also reports bytes
  // that came while nobody waited).
  void StartRead(const ConnectionPtr& c, int p) {
    Pipe& pipe = c->pipes[p];
    if (c->closed || pipe.reading || pipe.source_done || !ReadBytes(*c, pipe)) return;
    if (!pipe.drained) {
      ReadNow(c, p);
      return;
    }
    pipe.reading = true;
    pipe.source->async_wait(tcp::socket::wait_read, [this, c, p](std::error_code) {
      Pipe& pipe = c->pipes[p];
      pipe.reading = false;
      if (c->closed) return;
      pipe.drained = false;  // readable, or an error the read reports
      ReadNow(c, p);
    });
  }

  // How many bytes the next read may take; 0 while the queue is full.
  size_t ReadBytes(const Connection& c, const Pipe& pipe) {
    MutexLock lock(mu);
    const LinkShape& shape = c.link->shape[pipe.dir];
    return pipe.queued_bytes >= QueueBound(shape) ? 0 : ChunkBytes(shape);
  }

  // Queues chunks read from the source (non-blocking) while it has bytes and
  // the queue bound allows, then pumps and goes back to waiting.
  void ReadNow(const ConnectionPtr& c, int p) {
    Pipe& pipe = c->pipes[p];
    bool queued = false;
    for (size_t want; !pipe.drained && !pipe.source_done && (want = ReadBytes(*c, pipe)) > 0;) {
      if (pipe.read_buffer.size < want) pipe.read_buffer = {std::make_unique_for_overwrite<uint8_t[]>(want), want};
      std::error_code ec;
      const size_t n = pipe.source->read_some(asio::buffer(pipe.read_buffer.data.get(), want), ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) {
        pipe.drained = true;
        break;
      }
      reads.fetch_add(1, std::memory_order_relaxed);
      pipe.queue.push_back(ec ? EndOf(pipe, ec) : TakeRead(pipe, n));
      pipe.drained = !ec && n < want;  // a short read emptied the socket: wait for more
      queued = true;
    }
    if (queued) Pump(c, p);
    StartRead(c, p);
  }

  // A chunk of the n bytes just read into pipe.read_buffer.
  static Chunk TakeRead(Pipe& pipe, size_t n) {
    Chunk chunk;
    chunk.read_at = SteadyClock::now();
    if (2 * n >= pipe.read_buffer.size) {
      chunk.bytes = std::move(pipe.read_buffer);
      pipe.read_buffer = {};
    } else {
      chunk.bytes.data = std::make_unique_for_overwrite<uint8_t[]>(n);
      std::memcpy(chunk.bytes.data.get(), pipe.read_buffer.data.get(), n);
    }
    chunk.bytes.size = n;
    pipe.queued_bytes += static_cast<int64_t>(n);
    return chunk;
  }

  // The chunk that carries the source's EOF (or reset) across the link.
  static Chunk EndOf(Pipe& pipe, std::error_code ec) {
    Chunk chunk;
    chunk.read_at = SteadyClock::now();
    chunk.eof = true;
    chunk.reset = ec != asio::error::eof;
    pipe.source_done = true;
    return chunk;
  }

  // Books waiting chunks on the link, starts delivering the due ones and arms
  // the timer for the next event. Does nothing while the link is cut.
  void Pump(const ConnectionPtr& c, int p) {
    Pipe& pipe = c->pipes[p];
    if (c->closed) return;
    const Time now = SteadyClock::now();
    Time next = Time::max();
    bool eof_due = false;
    {
      // Held while a write starts, so nothing is delivered once Cut returns.
      MutexLock lock(mu);
      Link& link = *c->link;
      if (link.counters.cut) return;
      Admit(link, pipe, now, &next);
      if (pipe.writing == 0 && pipe.admitted > 0) {
        std::vector<asio::const_buffer> buffers;
        size_t bytes = 0;
        while (pipe.writing < pipe.admitted && bytes < kMaxWriteBytes) {
          const Chunk& k = pipe.queue[pipe.writing];
          if (k.eof || k.arrive_at > now) break;
          buffers.emplace_back(asio::buffer(k.bytes.data.get(), k.bytes.size));
          bytes += k.bytes.size;
          ++pipe.writing;
        }
        if (pipe.writing > 0) {
          writes.fetch_add(1, std::memory_order_relaxed);
          asio::async_write(*pipe.sink, buffers,
                            [this, c, p, bytes](std::error_code ec, size_t) { OnWritten(c, p, bytes, ec); });
        } else if (pipe.queue.front().arrive_at > now) {
          next = std::min(next, pipe.queue.front().arrive_at);
        } else {
          eof_due = pipe.queue.front().eof;
        }
      }
    }
    if (eof_due) {
      DeliverEof(c, p);
      return;
    }
    if (next == Time::max() || (pipe.timer_armed && pipe.timer_at <= next)) return;
    pipe.timer_armed = true;
    pipe.timer_at = next;
    pipe.timer.expires_at(next);
    pipe.timer.async_wait([this, c, p](std::error_code ec) {
      if (ec || c->closed) return;  // aborted: re-armed or closed
      timer_wakeups.fetch_add(1, std::memory_order_relaxed);
      c->pipes[p].timer_armed = false;
      Pump(c, p);
    });
  }

  // Books chunks of `pipe` on its link direction (see kAdmitAhead). Lowers
  // *next to when more may be admitted: when fewer than kMinAdmittedPerPipe
  // of its chunks are left serializing, or half of kAdmitAhead is, so that
  // a wake-up admits several chunks (not one wake-up per chunk serialized).
  void Admit(Link& link, Pipe& pipe, Time now, Time* next) {
    int serializing = 0;
    for (size_t i = pipe.admitted; i-- > 0 && pipe.queue[i].serialized_at > now;) ++serializing;
    const LinkShape& shape = link.shape[pipe.dir];
    Time& free_at = link.free_at[pipe.dir];
    auto may_admit = [&] {
      return serializing < kMinAdmittedPerPipe || pipe.queue[pipe.admitted - 1].serialized_at < now + kAdmitAhead;
    };
    while (pipe.admitted < pipe.queue.size() && may_admit()) {
      Chunk& k = pipe.queue[pipe.admitted++];
      // From when the bottleneck could first have taken it, not from now:
      // an I/O thread that wakes late (a loaded machine) leaves no gap.
      const Time start = std::max({free_at, k.read_at, link.healed_at});
      Time end = start;
      if (shape.bandwidth_mbit > 0) end += Ms(1e3 * static_cast<double>(k.bytes.size) / BytesPerSecond(shape));
      free_at = end;
      double delay_ms = shape.delay_ms;
      if (shape.jitter_ms > 0) delay_ms += std::uniform_real_distribution<double>(0, shape.jitter_ms)(rng);
      k.serialized_at = end;
      k.arrive_at = std::max(end + Ms(delay_ms), pipe.last_arrive);
      pipe.last_arrive = k.arrive_at;
      if (end > now) ++serializing;
    }
    if (pipe.admitted < pipe.queue.size())  // so at least kMinAdmittedPerPipe serialize
      *next = std::min({*next, pipe.queue[pipe.admitted - kMinAdmittedPerPipe].serialized_at,
                        pipe.queue[pipe.admitted - 1].serialized_at - kAdmitAhead / 2});
  }

  void OnWritten(const ConnectionPtr& c, int p, size_t bytes, std::error_code ec) {
    Pipe& pipe = c->pipes[p];
    if (c->closed) return;
    if (ec) {
      Close(c);  // the sink is gone; nothing more can be delivered either way
      return;
    }
    {
      MutexLock lock(mu);
      (pipe.dir == 0 ? c->link->counters.bytes_forward : c->link->counters.bytes_back) += bytes;
    }
    bytes_relayed.fetch_add(bytes, std::memory_order_relaxed);
    pipe.queue.erase(pipe.queue.begin(), pipe.queue.begin() + static_cast<std::ptrdiff_t>(pipe.writing));
    pipe.admitted -= pipe.writing;
    pipe.writing = 0;
    pipe.queued_bytes -= static_cast<int64_t>(bytes);
    StartRead(c, p);
    Pump(c, p);
  }

  // The source's EOF reached the far side: half-close it (a reset closes
  // everything), and close the connection once both directions are done.
  void DeliverEof(const ConnectionPtr& c, int p) {
    Pipe& pipe = c->pipes[p];
    const bool reset = pipe.queue.front().reset;
    pipe.queue.pop_front();
    --pipe.admitted;
    pipe.done = true;
    std::error_code ignored;
    if (!reset) pipe.sink->shutdown(tcp::socket::shutdown_send, ignored);
    if (reset || c->pipes[1 - p].done) Close(c);
  }

  void Close(const ConnectionPtr& c) {
    if (c->closed) return;
    c->closed = true;
    std::error_code ignored;
    c->client.close(ignored);
    c->target.close(ignored);
    for (Pipe& pipe : c->pipes) pipe.timer.cancel();
    connections.erase(c->id);
    open_connections.store(connections.size(), std::memory_order_relaxed);
  }

  void CloseAll() {
    closing = true;
    std::vector<Route*> all_routes;
    {
      MutexLock lock(mu);
      for (auto& r : routes) all_routes.push_back(r.get());
    }
    for (Route* r : all_routes) {
      std::error_code ignored;
      r->acceptor.close(ignored);
      r->backoff.cancel();
      r->resolver.cancel();
    }
    std::vector<ConnectionPtr> open;
    for (auto& [id, weak] : connections)
      if (ConnectionPtr c = weak.lock()) open.push_back(c);
    for (const ConnectionPtr& c : open) Close(c);
  }

  void PumpLink(const Link* link) {
    std::vector<ConnectionPtr> on_link;
    for (auto& [id, weak] : connections)
      if (ConnectionPtr c = weak.lock(); c && c->link == link) on_link.push_back(c);
    for (const ConnectionPtr& c : on_link) {
      Pump(c, 0);
      Pump(c, 1);
    }
  }

  // Raises the calling (I/O) thread's priority to options.io_nice where
  // allowed (Linux: a thread's nice value is its own); returns its nice value.
  int RaisePriority() const {
    const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
    errno = 0;
    const int before = ::getpriority(PRIO_PROCESS, tid);
    if (options.io_nice >= before || ::setpriority(PRIO_PROCESS, tid, options.io_nice) == 0)
      return std::min(before, options.io_nice);
    GD_LOG(INFO) << "link emulator: may not raise its priority to nice " << options.io_nice << " (" << strerror(errno)
                 << "); its delays may grow when the cores are busy";
    return before;
  }

  // The I/O thread's body; it leaves its CPU time behind for Load().
  void RunIo() {
    ::pthread_setname_np(::pthread_self(), "gd-link-emu");
    io_nice.store(RaisePriority(), std::memory_order_relaxed);
    for (;;) {
      try {
        io.run();
        break;
      } catch (const std::exception& e) {
        GD_LOG(ERROR) << "link emulator I/O thread: " << e.what();
      }
    }
    MutexLock lock(mu);
    final_cpu_seconds = ClockSeconds(CLOCK_THREAD_CPUTIME_ID);
    io_running = false;
  }

  // Any thread.
  EmulatorLoad Load() const {
    EmulatorLoad load;
    {
      // Under mu, the I/O thread has not passed the end of RunIo, so its
      // clock is still its own.
      MutexLock lock(mu);
      load.cpu_seconds = io_running ? ClockSeconds(cpu_clock) : final_cpu_seconds;
    }
    load.bytes_relayed = bytes_relayed.load(std::memory_order_relaxed);
    load.connections = connections_accepted.load(std::memory_order_relaxed);
    load.open_connections = open_connections.load(std::memory_order_relaxed);
    load.reads = reads.load(std::memory_order_relaxed);
    load.writes = writes.load(std::memory_order_relaxed);
    load.timer_wakeups = timer_wakeups.load(std::memory_order_relaxed);
    load.nice = io_nice.load(std::memory_order_relaxed);
    return load;
  }

  Link* LinkAt(int link) const GD_REQUIRES(mu) {
    GD_CHECK(link >= 0 && link < static_cast<int>(links.size())) << "no link " << link;
    return links[static_cast<size_t>(link)].get();
  }

  int64_t QueueBound(const LinkShape& shape) const {
    const double in_flight = BytesPerSecond(shape) * (shape.delay_ms + shape.jitter_ms) / 1e3;
    return std::max(options.min_queue_bytes, static_cast<int64_t>(in_flight + kQueueSlackBytes));
  }

  size_t ChunkBytes(const LinkShape& shape) const {
    if (shape.bandwidth_mbit <= 0) return static_cast<size_t>(options.max_chunk_bytes);
    const auto bytes = static_cast<int64_t>(BytesPerSecond(shape) * options.chunk_ms / 1e3);
    return static_cast<size_t>(
        std::clamp(bytes, std::min(kMinChunkBytes, options.max_chunk_bytes), options.max_chunk_bytes));
  }

  const LinkEmulatorOptions options;
  asio::io_context io;  // first: destroyed last, after everything holding its sockets
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::thread thread;

  // mu guards every Link's state too (a Link is no class of its own that
  // could name it).
  mutable Mutex mu;
  std::vector<std::unique_ptr<Link>> links GD_GUARDED_BY(mu);
  std::vector<std::unique_ptr<Route>> routes GD_GUARDED_BY(mu);  // the vector; a Route belongs to the I/O thread
  bool started GD_GUARDED_BY(mu) = false;
  bool stopped GD_GUARDED_BY(mu) = false;
  bool io_running GD_GUARDED_BY(mu) = false;  // the I/O thread runs, cpu_clock is its clock
  clockid_t cpu_clock GD_GUARDED_BY(mu){};
  double final_cpu_seconds GD_GUARDED_BY(mu) = 0;  // the I/O thread's CPU time when it ended

  // Written on the I/O thread, read by Load() anywhere.
  std::atomic<uint64_t> bytes_relayed{0}, connections_accepted{0}, open_connections{0}, reads{0}, writes{0},
      timer_wakeups{0};
  std::atomic<int> io_nice{0};

  // I/O thread only.
  std::mt19937_64 rng;
  std::map<uint64_t, std::weak_ptr<Connection>> connections;
  uint64_t next_connection = 0;
  bool closing = false;
};

LinkEmulator::LinkEmulator(LinkEmulatorOptions options) : impl_(std::make_unique<Impl>(options)) {}

LinkEmulator::~LinkEmulator() { Stop(); }

int LinkEmulator::AddLink(std::string name, LinkShape forward, LinkShape back) {
  auto link = std::make_unique<Link>();
  link->name = std::move(name);
  link->shape = {forward, back};
  MutexLock lock(impl_->mu);
  impl_->links.push_back(std::move(link));
  return static_cast<int>(impl_->links.size()) - 1;
}

StatusOr<int> LinkEmulator::AddRoute(int link, const std::string& listen_host, int listen_port,
                                     const std::string& target_host, int target_port, LinkDirection direction) {
  const std::string listen_name = listen_host + ":" + std::to_string(listen_port);
  const std::string target_name = target_host + ":" + std::to_string(target_port);
  auto route = std::make_unique<Route>(impl_->io);
  {
    MutexLock lock(impl_->mu);
    if (link < 0 || link >= static_cast<int>(impl_->links.size()))
      return InvalidArgument("route " + listen_name + ": no link " + std::to_string(link));
    if (impl_->stopped) return FailedPrecondition("route " + listen_name + ": the link emulator is stopped");
    route->link = impl_->links[static_cast<size_t>(link)].get();
    route->description = listen_name + " -> " + target_name + " over " + route->link->name;
  }
  route->client_dir = direction == LinkDirection::kForward ? 0 : 1;

  std::error_code ec;
  tcp::resolver resolver(impl_->io);
  const auto targets = resolver.resolve(target_host, std::to_string(target_port), ec);
  if (ec || targets.empty())
    return Unavailable("route " + route->description + ": cannot resolve the target: " + ec.message());
  route->targets = Endpoints(targets);
  asio::ip::make_address(target_host, ec);
  if (ec) route->target_name = target_host, route->target_port = std::to_string(target_port);
  const auto listens = resolver.resolve(listen_host, std::to_string(listen_port), ec);
  if (ec || listens.empty())
    return Unavailable("route " + route->description + ": cannot resolve the listen address: " + ec.message());
  const tcp::endpoint listen = listens.begin()->endpoint();
  tcp::acceptor& acceptor = route->acceptor;
  if (acceptor.open(listen.protocol(), ec) || acceptor.set_option(tcp::acceptor::reuse_address(true), ec) ||
      acceptor.bind(listen, ec) || acceptor.listen(asio::socket_base::max_listen_connections, ec))
    return Unavailable("route " + route->description + ": cannot listen: " + ec.message());
  const int port = acceptor.local_endpoint(ec).port();

  Route* r = route.get();
  {
    MutexLock lock(impl_->mu);
    impl_->routes.push_back(std::move(route));
  }
  asio::post(impl_->io, [impl = impl_.get(), r] {
    if (!impl->closing) impl->Accept(r);
  });
  return port;
}

Status LinkEmulator::Start() {
  MutexLock lock(impl_->mu);
  if (impl_->started || impl_->stopped) return FailedPrecondition("the link emulator was started before");
  impl_->started = true;
  impl_->work.emplace(impl_->io.get_executor());
  impl_->thread = std::thread([impl = impl_.get()] { impl->RunIo(); });
  // The thread cannot end before Stop, and it takes mu (held here) to end.
  impl_->io_running = ::pthread_getcpuclockid(impl_->thread.native_handle(), &impl_->cpu_clock) == 0;
  return Status::Ok();
}

void LinkEmulator::Stop() {
  {
    MutexLock lock(impl_->mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
  }
  if (!impl_->thread.joinable()) {
    impl_->CloseAll();  // never started: no handler runs, so this thread may close
    return;
  }
  // Closing aborts every pending operation; their handlers see `closed` and
  // arm nothing new, so run() returns once they have run.
  asio::post(impl_->io, [impl = impl_.get()] { impl->CloseAll(); });
  impl_->work.reset();
  impl_->thread.join();
}

void LinkEmulator::Cut(int link) {
  MutexLock lock(impl_->mu);
  impl_->LinkAt(link)->counters.cut = true;
}

void LinkEmulator::Heal(int link) {
  Link* l;
  {
    MutexLock lock(impl_->mu);
    l = impl_->LinkAt(link);
    if (l->counters.cut) l->healed_at = SteadyClock::now();
    l->counters.cut = false;
  }
  asio::post(impl_->io, [impl = impl_.get(), l] { impl->PumpLink(l); });
}

void LinkEmulator::SetShape(int link, LinkShape forward, LinkShape back) {
  MutexLock lock(impl_->mu);
  impl_->LinkAt(link)->shape = {forward, back};
}

LinkCounters LinkEmulator::Counters(int link) const {
  MutexLock lock(impl_->mu);
  return impl_->LinkAt(link)->counters;
}

EmulatorLoad LinkEmulator::Load() const { return impl_->Load(); }

}  // namespace geodesic::wan

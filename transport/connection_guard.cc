#include "transport/connection_guard.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "transport/interrupted.h"
#include "transport/security.h"

namespace geodesic::transport {

StatusOr<uint64_t> RaiseFileLimit() {
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) != 0)
    return Internal(std::string("cannot read the file-descriptor limit: ") + std::strerror(errno));
  if (files.rlim_cur < files.rlim_max) {
    const rlim_t was = files.rlim_cur;
    files.rlim_cur = files.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &files) != 0)
      return Internal("cannot raise the file-descriptor limit from " + std::to_string(was) + " to " +
                      std::to_string(files.rlim_max) + ": " + std::strerror(errno));
  }
  return static_cast<uint64_t>(files.rlim_cur);
}

int TotalOpenLimit(const ConnectionLimits& limits) {
  if (limits.total_open > 0) return limits.total_open;
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) != 0) return 512;
  const uint64_t soft = std::min<uint64_t>(files.rlim_cur, 1 << 30);
  const uint64_t reserve = static_cast<uint64_t>(std::max(limits.reserve_fds, 0));
  return static_cast<int>(std::max<uint64_t>(soft > 2 * reserve ? soft - reserve : soft / 2, 1));
}

// ---------------------------------------------------------------------------

ConnectionLimiter::ConnectionLimiter(const ConnectionLimits& limits, int total_open)
    : limits_(limits), total_open_(total_open) {}

int ConnectionLimiter::open_from(const std::string& source) const {
  auto it = open_.find(source);
  return it == open_.end() ? 0 : static_cast<int>(it->second.size());
}

std::string ConnectionLimiter::SourceOf(int fd) const {
  auto it = source_of_.find(fd);
  return it == source_of_.end() ? std::string() : it->second;
}

void ConnectionLimiter::Forget(TimePoint now) {
  std::erase_if(buckets_, [&](const auto& b) {
    return b.second.tokens + limits_.per_source_rate * Seconds(now - b.second.at) >= limits_.per_source_burst;
  });
  // Every address still in its burst: forget them all rather than grow.
  if (buckets_.size() >= limits_.max_sources) buckets_.clear();
}

bool ConnectionLimiter::TakeToken(const std::string& source, TimePoint now) {
  auto it = buckets_.find(source);
  if (it == buckets_.end()) {
    if (buckets_.size() >= limits_.max_sources) Forget(now);
    it = buckets_.emplace(source, Bucket{.tokens = static_cast<double>(limits_.per_source_burst), .at = now}).first;
  }
  Bucket& b = it->second;
  b.tokens = std::min<double>(limits_.per_source_burst, b.tokens + limits_.per_source_rate * Seconds(now - b.at));
  b.at = now;
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  return true;
}

void ConnectionLimiter::Count(int fd, const std::string& source, bool local) {
  source_of_[fd] = source;
  if (local) {
    local_.insert(fd);
    return;
  }
  std::vector<int>& fds = open_[source];
  if (!fds.empty()) by_open_.erase({fds.size(), source});
  fds.push_back(fd);
  by_open_.insert({fds.size(), source});
}

void ConnectionLimiter::Closed(int fd) {
  auto it = source_of_.find(fd);
  if (it == source_of_.end()) return;
  const std::string source = std::move(it->second);
  source_of_.erase(it);
  if (local_.erase(fd)) return;
  auto o = open_.find(source);
  if (o == open_.end()) return;
  by_open_.erase({o->second.size(), source});
  std::erase(o->second, fd);
  if (o->second.empty())
    open_.erase(o);
  else
    by_open_.insert({o->second.size(), source});
}

bool ConnectionLimiter::TakeRoom(const std::string& source, bool local, Admission* a) {
  // Room only at the expense of an address that holds more than one
  // connection more than this one (else two would take turns); this
  // host's connections are never taken, so they take from any.
  const int above = local ? 0 : open_from(source) + 1;
  if (by_open_.empty() || static_cast<int>(by_open_.rbegin()->first) <= above) return false;
  a->evicted_source = by_open_.rbegin()->second;
  a->evict_fd = open_[a->evicted_source].back();
  Closed(a->evict_fd);
  return true;
}

bool ConnectionLimiter::IsBlocked(const std::string& source, TimePoint now) const {
  auto it = blocks_.find(source);
  return it != blocks_.end() && now < it->second.until;
}

Duration ConnectionLimiter::Block(const std::string& source, TimePoint now) {
  Strikes& s = blocks_[source];
  if (now - s.until >= limits_.block_max) s.count = 0;  // unblocked long enough: start over
  Duration d = limits_.block_first;
  for (int i = 0; i < s.count && d < limits_.block_max; ++i) d *= 2;
  d = std::min(d, limits_.block_max);
  ++s.count;
  s.since = now;
  s.until = now + d;
  ++block_changes_;
  return d;
}

std::vector<std::string> ConnectionLimiter::Blocked(TimePoint now) {
  std::vector<std::pair<TimePoint, std::string>> on;
  for (auto it = blocks_.begin(); it != blocks_.end();) {
    const Strikes& s = it->second;
    if (now < s.until) {
      on.emplace_back(s.since, it->first);
    } else if (now - s.until >= limits_.block_max) {
      it = blocks_.erase(it);  // its count would start over anyway
      continue;
    }
    ++it;
  }
  std::sort(on.begin(), on.end(), std::greater<>());
  if (on.size() > limits_.max_blocked) on.resize(limits_.max_blocked);
  std::vector<std::string> out;
  for (auto& [since, source] : on) out.push_back(std::move(source));
  if (out != last_blocked_) {
    last_blocked_ = out;
    ++block_changes_;
  }
  return out;
}

ConnectionLimiter::Admission ConnectionLimiter::Accepted(int fd, const std::string& source, TimePoint now, bool local) {
  Closed(fd);
  Admission a;
  if (!local) {
    if (IsBlocked(source, now)) {
      a.verdict = ConnectionVerdict::kBlocked;
      return a;
    }
    if (!TakeToken(source, now))
      a.verdict = ConnectionVerdict::kSourceRate;
    else if (open_from(source) >= limits_.per_source_open)
      a.verdict = ConnectionVerdict::kSourceOpen;
    if (a.verdict != ConnectionVerdict::kAdmitted) {
      a.blocked_for = Block(source, now);
      return a;
    }
  }
  if (open() >= total_open_ && !TakeRoom(source, local, &a)) {
    a.verdict = ConnectionVerdict::kTotalOpen;
    return a;
  }
  Count(fd, source, local);
  return a;
}

// ---------------------------------------------------------------------------

namespace {

// An address as text: IPv4 (also an IPv4-mapped IPv6 one) or IPv6; "" for
// another family.
std::string AddressText(const sockaddr_storage& ss) {
  char text[INET6_ADDRSTRLEN] = "";
  if (ss.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, text, sizeof(text));
  } else if (ss.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a))
      ::inet_ntop(AF_INET, &a.s6_addr[12], text, sizeof(text));
    else
      ::inet_ntop(AF_INET6, &a, text, sizeof(text));
  }
  return text;
}

// The peer's address of a connected socket ("" if it has none: the
// descriptor is no longer a connection).
std::string PeerAddress(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  return AddressText(ss);
}

// The address `fd` is bound to ("" if none), as PeerAddress writes it.
std::string LocalAddress(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  return AddressText(ss);
}

// The local port of `fd`, -1 if it has none.
int LocalPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return -1;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return -1;
}

// The port of a monitor event's endpoint ("tcp://127.0.0.1:7000"), -1 if none.
int EndpointPort(const std::string& endpoint) {
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos) return -1;
  try {
    return std::stoi(endpoint.substr(colon + 1));
  } catch (const std::exception&) {
    return -1;
  }
}

// Whether `fd` is still a connection accepted on `endpoint` from `source`
// (it may have closed and its number gone to another descriptor).
bool IsConnection(int fd, const std::string& endpoint, const std::string& source) {
  return LocalPort(fd) == EndpointPort(endpoint) && PeerAddress(fd) == source;
}

// Whether `fd` is a listening socket on `port`.
bool IsListener(int fd, int port) {
  int listening = 0;
  socklen_t len = sizeof(listening);
  return ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening && LocalPort(fd) == port;
}

// A classic BPF program for a listening socket that drops IPv4 packets
// (connection attempts) from `blocked` and passes everything else. Two
// instructions per address keep every jump short.
std::vector<sock_filter> BlockProgram(const std::vector<uint32_t>& blocked) {
  std::vector<sock_filter> code = {
      BPF_STMT(BPF_LD | BPF_B | BPF_ABS, static_cast<uint32_t>(SKF_NET_OFF)),  // version and header length
      BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xf0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x40, 0, static_cast<uint8_t>(1 + 2 * blocked.size())),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, static_cast<uint32_t>(SKF_NET_OFF + 12)),  // IPv4 source, host order
  };
  for (uint32_t a : blocked) {
    code.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, a, 0, 1));
    code.push_back(BPF_STMT(BPF_RET | BPF_K, 0));  // drop
  }
  code.push_back(BPF_STMT(BPF_RET | BPF_K, 0xffffffff));  // pass
  return code;
}

// Installs `code` on `fd` (none: removes its filter); false on failure.
bool SetFilter(int fd, std::vector<sock_filter> code) {
  const int unused = 0;  // every socket option takes at least an int
  if (code.empty())
    return ::setsockopt(fd, SOL_SOCKET, SO_DETACH_FILTER, &unused, sizeof(unused)) == 0 || errno == ENOENT;
  sock_fprog prog{.len = static_cast<unsigned short>(code.size()), .filter = code.data()};
  return ::setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) == 0;
}

// Ends the connection: a reset (no lingering), then ZeroMQ reads its end.
void Cut(int fd) {
  linger now{.l_onoff = 1, .l_linger = 0};
  (void)::setsockopt(fd, SOL_SOCKET, SO_LINGER, &now, sizeof(now));
  (void)::shutdown(fd, SHUT_RDWR);
}

std::string Why(ConnectionVerdict v, const ConnectionLimiter& l, const std::string& source) {
  const ConnectionLimits& lim = l.limits();
  switch (v) {
    case ConnectionVerdict::kSourceOpen:
      return std::to_string(lim.per_source_open) + " connections from that address are open (the limit per address)";
    case ConnectionVerdict::kSourceRate:
      return "that address opened connections faster than " + std::to_string(static_cast<int>(lim.per_source_rate)) +
             " a second (after a burst of " + std::to_string(lim.per_source_burst) + ")";
    case ConnectionVerdict::kTotalOpen:
      return std::to_string(l.open()) + " connections are open in all (the limit) and no address holds more than " +
             std::to_string(l.open_from(source) + 1);
    case ConnectionVerdict::kBlocked:
      return "that address is blocked for going over its limits";
    case ConnectionVerdict::kAdmitted:
      break;
  }
  return "admitted";
}

constexpr int kEvents = ZMQ_EVENT_LISTENING | ZMQ_EVENT_CLOSED | ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED |
                        ZMQ_EVENT_ACCEPT_FAILED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                        ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL;

}  // namespace

ConnectionGuard::ConnectionGuard(zmq::context_t& ctx, ConnectionLimits limits, const Clock* clock)
    : ctx_(ctx), clock_(clock), total_open_limit_(TotalOpenLimit(limits)), limiter_(limits, total_open_limit_) {}

ConnectionGuard::~ConnectionGuard() { Stop(); }

void ConnectionGuard::Stop() {
  if (!thread_.joinable()) return;
  stop_ = true;
  thread_.join();
}

Status ConnectionGuard::Watch(zmq::socket_t& socket) {
  static std::atomic<uint64_t> next{0};  // inproc names outlive their sockets a while: never reuse one
  const std::string endpoint = "inproc://geodesic.connections." + std::to_string(next++);
  try {
    socket.set(zmq::sockopt::handshake_ivl,
               static_cast<int>(
                   std::chrono::duration_cast<std::chrono::milliseconds>(limiter_.limits().handshake_timeout).count()));
  } catch (const zmq::error_t& e) {
    return Internal(std::string("cannot set a socket's handshake timeout: ") + e.what());
  }
  if (RetryInterruptedC([&] { return zmq_socket_monitor(socket.handle(), endpoint.c_str(), kEvents); }) != 0)
    return Internal(std::string("cannot monitor a socket's connections: ") + zmq_strerror(zmq_errno()));
  try {
    zmq::socket_t m(ctx_, zmq::socket_type::pair);
    m.set(zmq::sockopt::linger, 0);
    // No high-water mark on the events: ZeroMQ's I/O thread would block
    // on a full monitor pipe, and a lost close would count a connection
    // forever.
    m.set(zmq::sockopt::rcvhwm, 0);
    RetryInterrupted([&] { m.connect(endpoint); });
    MutexLock lock(mu_);
    handoff_.push_back(std::move(m));
    if (!thread_.joinable()) {
      GD_LOG(INFO) << "connection limits: " << limiter_.limits().per_source_open << " open and "
                   << limiter_.limits().per_source_burst << " new (then " << limiter_.limits().per_source_rate
                   << " a second) per address, " << total_open_limit_ << " open in all; handshakes time out after "
                   << Seconds(limiter_.limits().handshake_timeout) << " s";
      thread_ = std::thread([this] { Loop(); });
    }
  } catch (const zmq::error_t& e) {
    return Internal(std::string("cannot monitor a socket's connections: ") + e.what());
  }
  return Status::Ok();
}

void ConnectionGuard::TakeWatched() {
  MutexLock lock(mu_);
  for (auto& m : handoff_) monitors_.push_back(std::move(m));
  handoff_.clear();
}

void ConnectionGuard::Log(const std::string& line) {
  uint64_t skipped = 0;
  if (!lines_.Due(clock_->Now(), &skipped)) return;
  GD_LOG(WARNING) << line
                  << (skipped
                          ? " (and " + std::to_string(skipped) + " more refused connections since the last such line)"
                          : std::string());
}

void ConnectionGuard::Refuse(int fd, const std::string& source, const std::string& endpoint,
                             const ConnectionLimiter::Admission& a) {
  Cut(fd);
  refused_++;
  const std::string blocked =
      a.blocked_for.count() > 0
          ? "; its connections are dropped for " + std::to_string(static_cast<int>(Seconds(a.blocked_for))) + " s"
          : "";
  Log("refused a connection from " + source + " on " + endpoint + ": " + Why(a.verdict, limiter_, source) + blocked);
}

void ConnectionGuard::ApplyBlocks() {
  const std::vector<std::string> blocked = limiter_.Blocked(clock_->Now());
  if (limiter_.block_changes() == applied_blocks_) return;
  applied_blocks_ = limiter_.block_changes();
  std::vector<uint32_t> v4;
  for (const std::string& b : blocked)
    if (in_addr a{}; ::inet_pton(AF_INET, b.c_str(), &a) == 1) v4.push_back(ntohl(a.s_addr));
  for (auto it = listeners_.begin(); it != listeners_.end();) {
    // A listener closed without our seeing it: its number is not ours now.
    if (!IsListener(it->second, it->first)) {
      it = listeners_.erase(it);
      continue;
    }
    if (!SetFilter(it->second, v4.empty() ? std::vector<sock_filter>{} : BlockProgram(v4)))
      Log("cannot filter the listening socket on port " + std::to_string(it->first) + ": " + std::strerror(errno));
    ++it;
  }
  // Counted once the listeners are filtered: whoever reads 0 finds no
  // filter left (a test connected as the count fell and was dropped).
  blocked_ = static_cast<int>(v4.size());
}

void ConnectionGuard::Evict(const ConnectionLimiter::Admission& a, const std::string& source,
                            const std::string& endpoint) {
  // Its number may have gone to another connection since (its close not
  // read yet): cut only what is still that address's connection here.
  if (!IsConnection(a.evict_fd, endpoint, a.evicted_source)) return;
  Cut(a.evict_fd);
  refused_++;
  Log("closed a connection from " + a.evicted_source + " on " + endpoint + " to admit one from " + source + ": " +
      std::to_string(limiter_.open()) + " connections are open in all (the limit), the most of them from " +
      a.evicted_source);
}

void ConnectionGuard::OnAccepted(int fd, const std::string& endpoint) {
  const std::string source = PeerAddress(fd);
  // Gone already, or the number is no longer this listener's connection:
  // its own event follows.
  if (source.empty() || LocalPort(fd) != EndpointPort(endpoint)) return;
  const bool local = source == LocalAddress(fd);  // from this host
  const ConnectionLimiter::Admission a = limiter_.Accepted(fd, source, clock_->Now(), local);
  if (a.verdict != ConnectionVerdict::kAdmitted) return Refuse(fd, source, endpoint, a);
  // A connection inherits its listener's filter: the blocked addresses are
  // nothing to it, and its packets need not pay for the check.
  if (blocked_.load() > 0) (void)SetFilter(fd, {});
  if (a.evict_fd >= 0) Evict(a, source, endpoint);
}

// A monitor event is two frames: 6 bytes (uint16 event, uint32 value, host
// order) and the socket's endpoint. The value is the descriptor for
// ACCEPTED and DISCONNECTED, errno for ACCEPT_FAILED.
bool ConnectionGuard::ReadEvent(zmq::socket_t& monitor) {
  zmq::message_t head, where;
  if (!monitor.recv(head, zmq::recv_flags::dontwait)) return false;
  if (head.more()) (void)monitor.recv(where, zmq::recv_flags::dontwait);
  while (where.more()) (void)monitor.recv(where, zmq::recv_flags::dontwait);  // not expected
  if (head.size() < 6) return true;
  uint16_t event = 0;
  uint32_t value = 0;
  std::memcpy(&event, head.data(), 2);
  std::memcpy(&value, static_cast<const char*>(head.data()) + 2, 4);
  const std::string endpoint = where.to_string();
  const int fd = static_cast<int>(value);
  if (event == ZMQ_EVENT_ACCEPTED) {
    OnAccepted(fd, endpoint);
  } else if (event == ZMQ_EVENT_LISTENING) {
    listeners_[EndpointPort(endpoint)] = fd;
    applied_blocks_ = limiter_.block_changes() - 1;  // filter it like the others
  } else if (event == ZMQ_EVENT_CLOSED) {
    std::erase_if(listeners_, [&](const auto& l) { return l.second == fd; });
  } else if (event == ZMQ_EVENT_DISCONNECTED) {
    limiter_.Closed(fd);
  } else if (event == ZMQ_EVENT_ACCEPT_FAILED) {
    accept_failures_++;
    Log("cannot accept a connection on " + endpoint + ": " + std::strerror(fd) + " (" +
        std::to_string(limiter_.open()) + " connections open)");
  } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL || event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
    // Logged first: whoever sees the count rise finds its line written.
    Log("refused a connection on " + endpoint + " at the handshake: " + DescribeHandshakeFailure(event, value));
    handshake_failures_++;
  }
  open_ = limiter_.open();
  ApplyBlocks();
  return true;
}

void ConnectionGuard::Loop() {
  try {
    while (!stop_.load()) {
      TakeWatched();
      std::vector<zmq::pollitem_t> items;
      for (auto& m : monitors_) items.push_back({m.handle(), 0, ZMQ_POLLIN, 0});
      try {
        zmq::poll(items.data(), items.size(), std::chrono::milliseconds(50));
      } catch (const zmq::error_t&) {
        continue;  // EINTR
      }
      for (size_t i = 0; i < items.size(); ++i)
        if (items[i].revents & ZMQ_POLLIN)
          for (int k = 0; k < 256 && ReadEvent(monitors_[i]); ++k) {
          }
      ApplyBlocks();  // blocks expire with time
    }
  } catch (const std::exception& e) {
    GD_LOG(ERROR) << "connection guard stopped: " << e.what() << "; connections are no longer limited";
  }
  monitors_.clear();
}

// ---------------------------------------------------------------------------

FdReserve::FdReserve(int count) : want_(count) { Take(); }

FdReserve::~FdReserve() { Release(); }

void FdReserve::Release() {
  for (int fd : fds_) ::close(fd);
  fds_.clear();
}

void FdReserve::Take() {
  while (static_cast<int>(fds_.size()) < want_) {
    const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;  // out of descriptors now; taken again after the next write
    fds_.push_back(fd);
  }
}

}  // namespace geodesic::transport

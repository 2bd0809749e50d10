#include "transport/connection_guard.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "transport/message.h"
#include "transport/security.h"

namespace geodesic::transport {
namespace {

// Longer than any test: raw clients send no greeting.
constexpr Duration kLong = std::chrono::seconds(60);

// Small limits, no blocking (see AnAddressOverItsLimitsIsBlockedForLongerEachTime).
ConnectionLimits Small() {
  return ConnectionLimits{.per_source_open = 3,
                          .per_source_burst = 100,
                          .per_source_rate = 100,
                          .max_sources = 8,
                          .block_first = Duration(0),
                          .block_max = Duration(0)};
}

TEST(ConnectionLimiterTest, CountsOpenConnectionsPerAddress) {
  FakeClock clock;
  ConnectionLimiter limiter(Small(), 100);
  for (int fd = 10; fd < 13; ++fd)
    EXPECT_EQ(limiter.Accepted(fd, "10.0.0.1", clock.Now()).verdict, ConnectionVerdict::kAdmitted);
  EXPECT_EQ(limiter.Accepted(13, "10.0.0.1", clock.Now()).verdict, ConnectionVerdict::kSourceOpen);
  EXPECT_EQ(limiter.Accepted(14, "10.0.0.2", clock.Now()).verdict, ConnectionVerdict::kAdmitted)
      << "limits are per address";
  EXPECT_EQ(limiter.open(), 4);
  limiter.Closed(13);  // refused: never counted
  EXPECT_EQ(limiter.open_from("10.0.0.1"), 3);
  limiter.Closed(11);
  EXPECT_EQ(limiter.open_from("10.0.0.1"), 2);
  EXPECT_EQ(limiter.Accepted(15, "10.0.0.1", clock.Now()).verdict, ConnectionVerdict::kAdmitted);
  EXPECT_EQ(limiter.SourceOf(15), "10.0.0.1");
  EXPECT_EQ(limiter.SourceOf(11), "");
}

TEST(ConnectionLimiterTest, ADescriptorAcceptedAgainWasClosedBefore) {
  FakeClock clock;
  ConnectionLimiter limiter(Small(), 100);
  ASSERT_EQ(limiter.Accepted(7, "10.0.0.1", clock.Now()).verdict, ConnectionVerdict::kAdmitted);
  // Its close went unseen; the number now belongs to another connection.
  ASSERT_EQ(limiter.Accepted(7, "10.0.0.2", clock.Now()).verdict, ConnectionVerdict::kAdmitted);
  EXPECT_EQ(limiter.open_from("10.0.0.1"), 0);
  EXPECT_EQ(limiter.open_from("10.0.0.2"), 1);
  EXPECT_EQ(limiter.open(), 1);
}

TEST(ConnectionLimiterTest, NewConnectionsPerAddressAreABurstThenARate) {
  FakeClock clock;
  ConnectionLimits limits = Small();
  limits.per_source_burst = 4;
  limits.per_source_rate = 2;
  ConnectionLimiter limiter(limits, 100);
  int fd = 100;
  auto attempt = [&](const std::string& source) {
    const ConnectionVerdict v = limiter.Accepted(fd, source, clock.Now()).verdict;
    limiter.Closed(fd++);  // short-lived: only the rate counts
    return v;
  };
  for (int i = 0; i < 4; ++i) EXPECT_EQ(attempt("a"), ConnectionVerdict::kAdmitted) << i;
  EXPECT_EQ(attempt("a"), ConnectionVerdict::kSourceRate);
  EXPECT_EQ(attempt("b"), ConnectionVerdict::kAdmitted) << "rates are per address";
  clock.Advance(std::chrono::milliseconds(499));
  EXPECT_EQ(attempt("a"), ConnectionVerdict::kSourceRate);
  clock.Advance(std::chrono::milliseconds(1));
  EXPECT_EQ(attempt("a"), ConnectionVerdict::kAdmitted) << "one more every 0.5 s";
  EXPECT_EQ(attempt("a"), ConnectionVerdict::kSourceRate);
  clock.Advance(std::chrono::seconds(60));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(attempt("a"), ConnectionVerdict::kAdmitted) << "refilled to the burst only";
  EXPECT_EQ(attempt("a"), ConnectionVerdict::kSourceRate);
}

TEST(ConnectionLimiterTest, AtTheTotalAnAddressWithFewerTakesFromTheOneWithMost) {
  FakeClock clock;
  ConnectionLimits limits = Small();
  limits.per_source_open = 10;
  ConnectionLimiter limiter(limits, 4);
  for (int fd = 1; fd <= 4; ++fd)
    ASSERT_EQ(limiter.Accepted(fd, "flood", clock.Now()).verdict, ConnectionVerdict::kAdmitted);
  EXPECT_EQ(limiter.Accepted(5, "flood", clock.Now()).verdict, ConnectionVerdict::kTotalOpen);
  // A member's connection takes the flood's newest.
  ConnectionLimiter::Admission a = limiter.Accepted(6, "member", clock.Now());
  EXPECT_EQ(a.verdict, ConnectionVerdict::kAdmitted);
  EXPECT_EQ(a.evict_fd, 4);
  EXPECT_EQ(a.evicted_source, "flood");
  a = limiter.Accepted(7, "member", clock.Now());  // 3 against 1: again
  EXPECT_EQ(a.evict_fd, 3);
  // 2 against 2: no one holds more; refused rather than taking turns.
  a = limiter.Accepted(8, "member", clock.Now());
  EXPECT_EQ(a.verdict, ConnectionVerdict::kTotalOpen);
  EXPECT_EQ(a.evict_fd, -1);
  EXPECT_EQ(limiter.open(), 4);
  EXPECT_EQ(limiter.open_from("flood"), 2);
  EXPECT_EQ(limiter.SourceOf(4), "");
  limiter.Closed(4);  // the evicted one's close: already uncounted
  EXPECT_EQ(limiter.open(), 4);
}

TEST(ConnectionLimiterTest, RemembersABoundedNumberOfAddresses) {
  FakeClock clock;
  ConnectionLimits limits = Small();
  limits.per_source_burst = 2;
  limits.per_source_rate = 1;
  limits.max_sources = 4;
  ConnectionLimiter limiter(limits, 100);
  int fd = 1;
  for (int i = 0; i < 4; ++i) {
    limiter.Accepted(fd, "10.0.0." + std::to_string(i), clock.Now());
    limiter.Closed(fd++);
  }
  EXPECT_EQ(limiter.sources_remembered(), 4u);
  // A fifth while all four are still in their burst: all are forgotten.
  limiter.Accepted(fd, "10.0.0.9", clock.Now());
  limiter.Closed(fd++);
  EXPECT_EQ(limiter.sources_remembered(), 1u);
  // Those whose bucket refilled go first.
  for (int i = 0; i < 3; ++i) {
    limiter.Accepted(fd, "10.0.1." + std::to_string(i), clock.Now());
    limiter.Closed(fd++);
  }
  clock.Advance(std::chrono::seconds(1));
  limiter.Accepted(fd, "10.0.1.0", clock.Now());  // again: its bucket is not full
  limiter.Closed(fd++);
  clock.Advance(std::chrono::milliseconds(500));
  limiter.Accepted(fd, "10.0.2.0", clock.Now());
  limiter.Closed(fd++);
  EXPECT_EQ(limiter.sources_remembered(), 2u) << "10.0.1.0 (half a token short) and the new one";
}

TEST(ConnectionLimiterTest, AnAddressOverItsLimitsIsBlockedForLongerEachTime) {
  FakeClock clock;
  ConnectionLimits limits = Small();
  limits.per_source_burst = 1;
  limits.per_source_rate = 1000;
  limits.block_first = std::chrono::seconds(1);
  limits.block_max = std::chrono::seconds(4);
  ConnectionLimiter limiter(limits, 100);
  int fd = 1;
  auto attempt = [&](const std::string& source) {
    ConnectionLimiter::Admission a = limiter.Accepted(fd, source, clock.Now());
    limiter.Closed(fd++);
    return a;
  };
  EXPECT_EQ(attempt("a").verdict, ConnectionVerdict::kAdmitted);
  ConnectionLimiter::Admission a = attempt("a");  // a second one in the same instant: over the rate
  EXPECT_EQ(a.verdict, ConnectionVerdict::kSourceRate);
  EXPECT_EQ(a.blocked_for, std::chrono::seconds(1));
  EXPECT_EQ(limiter.Blocked(clock.Now()), std::vector<std::string>{"a"});
  const uint64_t changes = limiter.block_changes();
  clock.Advance(std::chrono::milliseconds(500));
  EXPECT_EQ(attempt("a").verdict, ConnectionVerdict::kBlocked) << "one that got past the filter";
  EXPECT_EQ(attempt("b").verdict, ConnectionVerdict::kAdmitted);
  EXPECT_EQ(limiter.block_changes(), changes);
  clock.Advance(std::chrono::milliseconds(500));
  EXPECT_TRUE(limiter.Blocked(clock.Now()).empty());
  EXPECT_NE(limiter.block_changes(), changes) << "the expiry is a change";
  // Again at once: twice as long, then capped.
  EXPECT_EQ(attempt("a").verdict, ConnectionVerdict::kAdmitted);
  EXPECT_EQ(attempt("a").blocked_for, std::chrono::seconds(2));
  clock.Advance(std::chrono::seconds(2));
  attempt("a");
  EXPECT_EQ(attempt("a").blocked_for, std::chrono::seconds(4));
  clock.Advance(std::chrono::seconds(4));
  attempt("a");
  EXPECT_EQ(attempt("a").blocked_for, std::chrono::seconds(4));
  // Unblocked for block_max: its count starts over.
  clock.Advance(std::chrono::seconds(8));
  attempt("a");
  EXPECT_EQ(attempt("a").blocked_for, std::chrono::seconds(1));
}

TEST(ConnectionLimiterTest, TheBlockListHoldsTheNewestBlocks) {
  FakeClock clock;
  ConnectionLimits limits = Small();
  limits.per_source_open = 0;  // every remote connection is over its limit
  limits.block_first = std::chrono::seconds(10);
  limits.block_max = std::chrono::seconds(10);
  limits.max_blocked = 2;
  ConnectionLimiter limiter(limits, 100);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(limiter.Accepted(i, "10.0.0." + std::to_string(i), clock.Now()).verdict, ConnectionVerdict::kSourceOpen);
    clock.Advance(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(limiter.Blocked(clock.Now()), (std::vector<std::string>{"10.0.0.2", "10.0.0.1"}));
  EXPECT_EQ(limiter.Accepted(9, "10.0.0.0", clock.Now()).verdict, ConnectionVerdict::kBlocked)
      << "out of the list, still refused at accept";
}

TEST(ConnectionLimiterTest, ConnectionsFromThisHostCountTowardsTheTotalOnly) {
  FakeClock clock;
  ConnectionLimits limits = Small();
  limits.per_source_open = 1;
  limits.per_source_burst = 1;
  limits.per_source_rate = 0.001;
  limits.block_first = std::chrono::seconds(10);
  ConnectionLimiter limiter(limits, 4);
  for (int fd = 1; fd <= 3; ++fd)
    EXPECT_EQ(limiter.Accepted(fd, "10.0.0.1", clock.Now(), /*local=*/true).verdict, ConnectionVerdict::kAdmitted);
  EXPECT_TRUE(limiter.Blocked(clock.Now()).empty());
  EXPECT_EQ(limiter.Accepted(4, "10.0.0.9", clock.Now()).verdict, ConnectionVerdict::kAdmitted);
  EXPECT_EQ(limiter.open(), 4);
  // At the total, a remote address cannot take from this host's.
  EXPECT_EQ(limiter.Accepted(5, "10.0.0.8", clock.Now()).verdict, ConnectionVerdict::kTotalOpen);
  // This host's takes from the remote one that holds most.
  ConnectionLimiter::Admission a = limiter.Accepted(6, "10.0.0.1", clock.Now(), /*local=*/true);
  EXPECT_EQ(a.verdict, ConnectionVerdict::kAdmitted);
  EXPECT_EQ(a.evict_fd, 4);
  EXPECT_EQ(limiter.Accepted(7, "10.0.0.1", clock.Now(), /*local=*/true).verdict, ConnectionVerdict::kTotalOpen)
      << "nothing left to take";
  limiter.Closed(1);
  EXPECT_EQ(limiter.open(), 3);
}

// The soft RLIMIT_NOFILE for the length of a test.
class FileLimit {
 public:
  FileLimit() { ::getrlimit(RLIMIT_NOFILE, &saved_); }
  ~FileLimit() { ::setrlimit(RLIMIT_NOFILE, &saved_); }
  bool SetSoft(rlim_t soft) {
    rlimit r = saved_;
    r.rlim_cur = soft;
    return ::setrlimit(RLIMIT_NOFILE, &r) == 0;
  }
  rlim_t hard() const { return saved_.rlim_max; }

 private:
  rlimit saved_{};
};

int OpenDescriptors() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n - 1;  // the iterator's own
}

TEST(FileLimitTest, StartUpRaisesTheSoftLimitToTheHardOne) {
  FileLimit limit;
  if (limit.hard() < 512) GTEST_SKIP() << "hard limit " << limit.hard();
  ASSERT_TRUE(limit.SetSoft(256));
  auto raised = RaiseFileLimit();
  ASSERT_TRUE(raised.ok()) << raised.status();
  EXPECT_EQ(*raised, limit.hard());
  rlimit now{};
  ::getrlimit(RLIMIT_NOFILE, &now);
  EXPECT_EQ(now.rlim_cur, limit.hard());
}

TEST(FileLimitTest, TheTotalConnectionLimitKeepsTheReserveFree) {
  FileLimit limit;
  ASSERT_TRUE(limit.SetSoft(1024));
  EXPECT_EQ(TotalOpenLimit({}), 1024 - 512);
  EXPECT_EQ(TotalOpenLimit({.reserve_fds = 100}), 924);
  EXPECT_EQ(TotalOpenLimit({.reserve_fds = 700}), 512) << "half the limit at least";
  EXPECT_EQ(TotalOpenLimit({.total_open = 50}), 50);
}

TEST(FdReserveTest, AWriteFindsDescriptorsWhenAllOthersAreTaken) {
  FileLimit limit;
  FdReserve reserve(3);
  ASSERT_EQ(reserve.held(), 3);
  ASSERT_TRUE(limit.SetSoft(static_cast<rlim_t>(OpenDescriptors() + 8)));
  std::vector<int> filler;  // every descriptor left
  for (int fd; filler.size() < 100 && (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) filler.push_back(fd);
  EXPECT_LT(filler.size(), 100u);
  EXPECT_LT(::open("/dev/null", O_RDONLY), 0);
  EXPECT_EQ(errno, EMFILE);
  int written = reserve.Spend([] {
    const int a = ::open("/dev/null", O_RDONLY), b = ::open("/dev/null", O_RDONLY);
    const int ok = (a >= 0) + (b >= 0);
    if (a >= 0) ::close(a);
    if (b >= 0) ::close(b);
    return ok;
  });
  EXPECT_EQ(written, 2);
  EXPECT_EQ(reserve.held(), 3) << "taken again once the write closed its files";
  for (int fd : filler) ::close(fd);
}

// ---------------------------------------------------------------------------

// A plaintext ROUTER in its own context, guarded; raw TCP clients.
class ConnectionGuardTest : public ::testing::Test {
 protected:
  void Serve(ConnectionLimits limits, CurveSocket curve = {}) {
    guard_ = std::make_unique<ConnectionGuard>(ctx_, limits);
    router_ = std::make_unique<Socket>(
        ctx_, zmq::socket_type::router,
        SocketOptions{.job = "g", .role = wire::SERVER, .id = 0, .send_timeout_ms = kNeverBlock, .curve = curve},
        &counters_);
    ASSERT_TRUE(guard_->Watch(router_->raw()).ok());
    ASSERT_TRUE(router_->Bind("tcp://127.0.0.1:*").ok());
    port_ = std::stoi(router_->endpoint().substr(router_->endpoint().rfind(':') + 1));
  }
  void TearDown() override {
    for (int fd : clients_) ::close(fd);
    guard_.reset();
    router_.reset();
  }

  // A TCP connection from `source` (any 127/8 address), made within
  // `wait_ms`; -1 if not (a connection attempt the listener drops). Over
  // 1 s, TCP's first retransmission of the SYN falls within the wait.
  int Connect(const std::string& source = "127.0.0.1", int wait_ms = 1000) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in from{.sin_family = AF_INET, .sin_port = 0, .sin_addr = {}, .sin_zero = {}};
    ::inet_pton(AF_INET, source.c_str(), &from.sin_addr);
    sockaddr_in to{
        .sin_family = AF_INET, .sin_port = htons(static_cast<uint16_t>(port_)), .sin_addr = {}, .sin_zero = {}};
    ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
        (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0 && errno != EINPROGRESS)) {
      ::close(fd);
      return -1;
    }
    pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
    int err = 0;
    socklen_t len = sizeof(err);
    // Loopback, but on a loaded machine 300 ms once timed out. A connection
    // the guard has already reset (this thread was slower than its check:
    // SO_ERROR is ECONNRESET, or EPIPE, as seen with the cores busy) was
    // answered all the same: the caller sees it closed.
    if (::poll(&p, 1, wait_ms) != 1 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 ||
        (err != 0 && err != ECONNRESET && err != EPIPE)) {
      ::close(fd);
      return -1;
    }
    clients_.push_back(fd);
    return fd;
  }

  // Whether the server has closed `fd`'s connection (EOF or reset), reading
  // whatever it sent (its greeting) on the way.
  static bool Closed(int fd) {
    char buf[256];
    for (;;) {
      pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
      if (::poll(&p, 1, 0) <= 0) return false;
      const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n <= 0) return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    }
  }

  static int CountClosed(const std::vector<int>& fds) {
    int closed = 0;
    for (int fd : fds) closed += Closed(fd);
    return closed;
  }
  // Polls (bounded: 5 s) until `want` of `fds` are closed; returns how many are.
  static int WaitClosed(const std::vector<int>& fds, int want) {
    int closed = CountClosed(fds);
    for (int i = 0; i < 500 && closed < want; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      closed = CountClosed(fds);
    }
    return closed;
  }

  zmq::context_t ctx_{1};
  TrafficCounters counters_;
  std::unique_ptr<ConnectionGuard> guard_;
  std::unique_ptr<Socket> router_;
  int port_ = 0;
  std::vector<int> clients_;
};

TEST_F(ConnectionGuardTest, ClosesConnectionsOverTheLimitPerAddress) {
  Serve({.per_source_open = 2,
         .per_source_burst = 100,
         .per_source_rate = 100,
         .block_first = Duration(0),
         .block_max = Duration(0),
         .handshake_timeout = kLong});
  std::vector<int> a, b;
  for (int i = 0; i < 5; ++i) a.push_back(Connect("127.0.0.7"));
  for (int i = 0; i < 2; ++i) b.push_back(Connect("127.0.0.2"));
  EXPECT_EQ(WaitClosed(a, 3), 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // no more than that closes
  EXPECT_EQ(CountClosed(a), 3);
  EXPECT_EQ(CountClosed(b), 0) << "another address has its own limit";
  EXPECT_EQ(guard_->refused(), 3u);
  EXPECT_EQ(guard_->open(), 4);
  // One closes: its place is free again.
  for (int fd : a)
    if (!Closed(fd)) {
      ::shutdown(fd, SHUT_RDWR);
      break;
    }
  for (int i = 0; i < 500 && guard_->open() != 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(guard_->open(), 3);
  const int again = Connect("127.0.0.7");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(Closed(again));
  EXPECT_EQ(guard_->open(), 4);
}

TEST_F(ConnectionGuardTest, AHandshakeThatNeverFinishesIsClosedAfterTheTimeout) {
  Serve({.handshake_timeout = std::chrono::milliseconds(300)});
  const int silent = Connect();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(Closed(silent));
  EXPECT_EQ(WaitClosed({silent}, 1), 1);
  for (int i = 0; i < 500 && guard_->open() != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(guard_->open(), 0);
  EXPECT_EQ(guard_->refused(), 0u) << "a timeout is not a refusal of the limits";
}

TEST_F(ConnectionGuardTest, ClosesConnectionsOverTheRatePerAddress) {
  Serve({.per_source_open = 100,
         .per_source_burst = 3,
         .per_source_rate = 0.01,
         .block_first = Duration(0),
         .block_max = Duration(0),
         .handshake_timeout = kLong});
  std::vector<int> fds;
  for (int i = 0; i < 6; ++i) fds.push_back(Connect("127.0.0.8"));
  EXPECT_EQ(WaitClosed(fds, 3), 3);
  EXPECT_EQ(guard_->refused(), 3u);
}

TEST_F(ConnectionGuardTest, AtTheTotalLimitTheAddressWithMostGivesWay) {
  Serve({.per_source_open = 100,
         .per_source_burst = 100,
         .per_source_rate = 100,
         .total_open = 4,
         .handshake_timeout = kLong});
  std::vector<int> flood;
  for (int i = 0; i < 4; ++i) flood.push_back(Connect("127.0.0.3"));
  for (int i = 0; i < 500 && guard_->open() < 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(guard_->open(), 4);
  const int member = Connect("127.0.0.4");
  EXPECT_EQ(WaitClosed(flood, 1), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(CountClosed(flood), 1);
  EXPECT_FALSE(Closed(member));
  EXPECT_EQ(guard_->total_open_limit(), 4);
}

TEST_F(ConnectionGuardTest, AnAddressOverItsRateIsDroppedAtTheListenerUntilTheBlockEnds) {
  Serve({.per_source_open = 100,
         .per_source_burst = 2,
         .per_source_rate = 0.01,
         .block_first = std::chrono::milliseconds(3000),
         .handshake_timeout = kLong});
  std::vector<int> fds;
  for (int i = 0; i < 3; ++i) fds.push_back(Connect("127.0.0.5"));
  EXPECT_EQ(WaitClosed(fds, 1), 1);
  for (int i = 0; i < 500 && guard_->blocked() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(guard_->blocked(), 1);
  // Its attempts get no answer now (the kernel drops them); another
  // address connects. The dropped attempt waits 500 ms, less than TCP's
  // first SYN retransmission (1 s), so a loaded machine cannot see that
  // retransmission land after the block (it once did, with a 1.5 s block
  // and a 1 s wait).
  EXPECT_EQ(Connect("127.0.0.5", 500), -1);
  const int other = Connect("127.0.0.6");
  EXPECT_GE(other, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(Closed(other)) << "a connection accepted while the filter was on is not filtered";
  // After the block its connection attempts are answered again; still over
  // its rate (0.01 a second), it is refused at accept (and blocked again).
  for (int i = 0; i < 1000 && guard_->blocked() != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(guard_->blocked(), 0);
  // (Its SYN may still be lost on a loaded machine: the retransmission
  // after 1 s is answered too.)
  const int after = Connect("127.0.0.5", 3000);
  EXPECT_GE(after, 0) << "the filter is gone";
  EXPECT_EQ(WaitClosed({after}, 1), 1) << "still over its rate";
  EXPECT_EQ(guard_->refused(), 2u);
}

TEST_F(ConnectionGuardTest, ConnectionsFromThisHostAreNotLimitedPerAddress) {
  Serve({.per_source_open = 1, .per_source_burst = 1, .per_source_rate = 0.01, .handshake_timeout = kLong});
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) fds.push_back(Connect("127.0.0.1"));  // to 127.0.0.1: this host
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(CountClosed(fds), 0);
  EXPECT_EQ(guard_->open(), 4);
  EXPECT_EQ(guard_->refused(), 0u);
}

TEST_F(ConnectionGuardTest, AdmittedPeersStillTalk) {
  Serve({.per_source_open = 1, .per_source_burst = 100, .per_source_rate = 100});
  zmq::context_t client_ctx(1);
  TrafficCounters counters;
  Socket client(client_ctx, zmq::socket_type::dealer, SocketOptions{.job = "g", .role = wire::CLIENT, .id = 0},
                &counters);
  ASSERT_TRUE(client.Connect(router_->endpoint()).ok());
  wire::Header h;
  h.mutable_status_request();
  ASSERT_TRUE(client.Send(h, {}).ok());
  bool got = false;
  for (int i = 0; i < 200 && !got; ++i)
    if (router_->WaitReadable(10))
      if (auto in = router_->Receive(); in && in->status.ok()) got = true;
  EXPECT_TRUE(got);
  EXPECT_EQ(guard_->refused(), 0u);
}

TEST_F(ConnectionGuardTest, CountsAndLogsFailedHandshakesOfASecuredSocket) {
  ZapHandler zap(ctx_, /*admit_any=*/true);  // before a secured socket binds
  ASSERT_TRUE(zap.Start().ok());
  Serve({}, CurveSocket{.keys = GenerateCurveKeyPair().value(), .server_key = {}});
  ::testing::internal::CaptureStderr();
  zmq::context_t client_ctx(1);
  TrafficCounters counters;
  Socket plain(client_ctx, zmq::socket_type::dealer, SocketOptions{.job = "g", .role = wire::CLIENT, .id = 0},
               &counters);
  ASSERT_TRUE(plain.Connect(router_->endpoint()).ok());
  for (int i = 0; i < 300 && guard_->handshake_failures() == 0; ++i)  // logged, then counted
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_GE(guard_->handshake_failures(), 1u);
  EXPECT_NE(log.find(" at the handshake: "), std::string::npos) << log;
}

}  // namespace
}  // namespace geodesic::transport

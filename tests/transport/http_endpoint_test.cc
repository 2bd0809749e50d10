#include "transport/http_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <gtest/gtest.h>

#include "tests/scratch_dir.h"
#include "transport/metrics.h"

namespace geodesic::transport {
namespace {

std::vector<prometheus::MetricFamily> Families(double steps) {
  MetricsBuilder b({.job = "j", .region = "eu", .role = "worker", .id = "3"});
  b.Counter("steps_total", "Minibatch steps run.", steps);
  b.Counter("bytes_total", "Bytes.", 10, {{"direction", "sent"}});
  b.Counter("bytes_total", "Bytes.", 20, {{"direction", "received"}});
  b.Histogram("update_staleness_clocks", "Staleness.", {{0, 5}, {1, 3}, {7, 1}}, {0, 1, 2, 4});
  return b.Take();
}

// A raw TCP connection to the endpoint.
int Open(const std::string& address) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

TEST(MetricsBuilderTest, GroupsSeriesByNameAndBucketsHistogramsCumulatively) {
  auto f = Families(5);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].name, "geodesic_steps_total");
  EXPECT_EQ(f[1].metric.size(), 2u) << "one family, two directions";
  const auto& h = f[2].metric[0].histogram;
  ASSERT_EQ(h.bucket.size(), 5u);  // 0, 1, 2, 4, +Inf
  EXPECT_EQ(h.bucket[0].cumulative_count, 5u);
  EXPECT_EQ(h.bucket[1].cumulative_count, 8u);
  EXPECT_EQ(h.bucket[3].cumulative_count, 8u);
  EXPECT_EQ(h.bucket[4].cumulative_count, 9u);
  EXPECT_EQ(h.sample_count, 9u);
  EXPECT_DOUBLE_EQ(h.sample_sum, 3 + 7);
  EXPECT_EQ(f[0].metric[0].label.size(), 4u) << "job, region, role, id";
}

TEST(HttpEndpointTest, ServesMetricsHealthAndReadinessOnAPickedPort) {
  MetricsSnapshot m;
  auto e = HttpEndpoint::Start({}, &m);
  ASSERT_TRUE(e.ok()) << e.status();
  const std::string addr = (*e)->address();
  EXPECT_NE(addr, "127.0.0.1:0");
  EXPECT_EQ(HttpGet(addr, "/readyz")->status, 503) << "nothing published yet";
  EXPECT_EQ(HttpGet(addr, "/healthz")->status, 200);
  m.Publish(Families(5));
  auto r = HttpGet(addr, "/metrics");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->content_type.find("version=0.0.4"), std::string::npos) << r->content_type;
  EXPECT_NE(r->body.find("geodesic_steps_total{job=\"j\",region=\"eu\",role=\"worker\",id=\"3\"} 5"), std::string::npos)
      << r->body;
  EXPECT_NE(r->body.find("geodesic_update_staleness_clocks_bucket{job=\"j\",region=\"eu\",role=\"worker\",id=\"3\","
                         "le=\"+Inf\"} 9"),
            std::string::npos)
      << r->body;
  EXPECT_NE(r->body.find("# TYPE geodesic_bytes_total counter"), std::string::npos);
  m.Publish(Families(6));
  EXPECT_NE(HttpGet(addr, "/metrics")->body.find("} 6\n"), std::string::npos) << "the latest published";
  EXPECT_EQ(HttpGet(addr, "/readyz")->status, 200);
  EXPECT_EQ(HttpGet(addr, "/nothing")->status, 404);
  EXPECT_EQ(HttpGet(addr, "/metrics/../etc/passwd")->status, 404);
}

// promtool (Debian's prometheus) accepts the exposition.
TEST(HttpEndpointTest, PromtoolAcceptsTheExposition) {
  if (access("/usr/bin/promtool", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/promtool (apt-get install prometheus)";
  MetricsSnapshot m;
  m.Publish(Families(5));
  const geodesic::testing::ScratchDir dir("metrics");
  const std::string file = dir / "metrics.txt";
  FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  const std::string text = m.Text();
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  EXPECT_EQ(std::system(("/usr/bin/promtool check metrics < " + file + " > " + file + ".out 2>&1").c_str()), 0) << text;
}

TEST(HttpEndpointTest, RefusesBadBindsAndMethodsAndHugeHeadersAndKeepsServing) {
  EXPECT_FALSE(CheckHttpBind("127.0.0.1").ok());
  EXPECT_FALSE(CheckHttpBind("127.0.0.1:70000").ok());
  EXPECT_FALSE(CheckHttpBind("http://127.0.0.1:80").ok());
  EXPECT_TRUE(CheckHttpBind("0.0.0.0:9100").ok());
  MetricsSnapshot m;
  auto e = HttpEndpoint::Start({}, &m);
  ASSERT_TRUE(e.ok()) << e.status();
  const std::string addr = (*e)->address();
  HttpEndpointOptions same;
  same.bind = addr;
  auto taken = HttpEndpoint::Start(same, &m);
  EXPECT_FALSE(taken.ok()) << "the same port twice";
  // A POST, garbage, and a 4 MB header: each refused or dropped.
  for (const std::string& req :
       {std::string("POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), std::string("\x16\x03\x01 garbage\r\n\r\n"),
        "GET /metrics HTTP/1.1\r\nX-Big: " + std::string(4 << 20, 'a') + "\r\n\r\n"}) {
    const int fd = Open(addr);
    (void)send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    char buf[4096];
    std::string got;
    for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) got.append(buf, static_cast<size_t>(n));
    close(fd);
    EXPECT_TRUE(got.empty() || got.find(" 200 ") == std::string::npos) << got.substr(0, 200);
  }
  EXPECT_EQ(HttpGet(addr, "/healthz")->status, 200);
}

// Connections that send nothing hold the HTTP threads, never the loop
// that publishes: Publish stays quick however many are open.
TEST(HttpEndpointTest, IdleConnectionsNeverDelayPublishing) {
  MetricsSnapshot m;
  auto e = HttpEndpoint::Start({}, &m);
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<int> idle;
  for (int i = 0; i < 200; ++i) idle.push_back(Open((*e)->address()));
  auto probe = HttpGet((*e)->address(), "/healthz", 2);
  ASSERT_TRUE(probe.ok()) << "200 idle connections hold no thread: " << probe.status();
  for (int i = 0; i < 300; ++i) idle.push_back(Open((*e)->address()));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) m.Publish(Families(i));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(s, 5.0) << "1000 publishes took " << s << " s";
  for (int fd : idle) close(fd);
  // Once they are gone it serves again (their 2 s head deadline bounds the wait).
  StatusOr<HttpResponse> r = DeadlineExceeded("not asked");
  for (int t = 0; t < 40 && !(r = HttpGet((*e)->address(), "/healthz", 2)).ok(); ++t)
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
}

// A raw connection from `source` (a 127.0.0.0/8 address; empty: any) to
// the endpoint, non-blocking; -1 if it failed.
int OpenFrom(const std::string& address, const std::string& source) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  if (!source.empty() && (inet_pton(AF_INET, source.c_str(), &from.sin_addr) != 1 ||
                          bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0)) {
    close(fd);
    return -1;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the endpoint closed `fd` (a read sees the end) within `wait_ms`.
bool ClosedByPeer(int fd, int wait_ms) {
  pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
  if (poll(&p, 1, wait_ms) <= 0) return false;
  char c;
  return recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

// What the endpoint answers to `request`, whole (it closes after one).
std::string Exchange(const std::string& address, const std::string& request) {
  const int fd = Open(address);
  (void)send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) got.append(buf, static_cast<size_t>(n));
  close(fd);
  return got;
}

constexpr const char* kPartialHead = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ";

// A slowloris (every connection the table holds, and more, each with an
// incomplete head) never keeps a probe out: a newcomer takes the place of
// the busiest source's oldest incomplete connection, here one from the
// probe's own address. Before, the 257th connection was closed at once.
TEST(HttpEndpointTest, ProbesAreServedWhileASlowlorisHoldsEveryPlace) {
  MetricsSnapshot m;
  auto e = HttpEndpoint::Start({}, &m);
  ASSERT_TRUE(e.ok()) << e.status();
  const std::string addr = (*e)->address();
  std::vector<int> slow;
  auto attack = [&](int n) {
    for (int i = 0; i < n; ++i)
      if (int fd = OpenFrom(addr, ""); fd >= 0) slow.push_back(fd), (void)send(fd, kPartialHead, 40, MSG_NOSIGNAL);
  };
  attack(300);
  int served = 0;
  for (int probe = 0; probe < 20; ++probe) {
    attack(20);  // the attacker keeps opening more between probes
    auto r = HttpGet(addr, "/healthz", 1);
    served += r.ok() && r->status == 200;
  }
  EXPECT_EQ(served, 20);
  EXPECT_GT((*e)->counts().evicted, 0u);
  for (int fd : slow) close(fd);
}

// One source beyond its share (64) churns its own connections: its oldest
// incomplete ones are closed, its newest and every other source's stay.
TEST(HttpEndpointTest, ASourceBeyondItsShareLosesItsOwnOldestConnections) {
  MetricsSnapshot m;
  HttpEndpointOptions o;
  o.head_timeout_s = 60;  // only eviction closes anything here
  auto e = HttpEndpoint::Start(o, &m);
  ASSERT_TRUE(e.ok()) << e.status();
  const std::string addr = (*e)->address();
  const int other = OpenFrom(addr, "127.0.0.3");
  if (other < 0) GTEST_SKIP() << "cannot bind 127.0.0.3 (no 127.0.0.0/8 on lo)";
  (void)send(other, kPartialHead, 10, MSG_NOSIGNAL);
  std::vector<int> fds;
  for (int i = 0; i < 74; ++i) {
    fds.push_back(OpenFrom(addr, "127.0.0.2"));
    ASSERT_GE(fds.back(), 0);
    (void)send(fds.back(), kPartialHead, 10, MSG_NOSIGNAL);
  }
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(ClosedByPeer(fds[static_cast<size_t>(i)], 2000)) << "oldest " << i;
  for (int i = 10; i < 74; ++i) EXPECT_FALSE(ClosedByPeer(fds[static_cast<size_t>(i)], 0)) << "newer " << i;
  EXPECT_FALSE(ClosedByPeer(other, 0)) << "another source keeps its connection";
  EXPECT_EQ((*e)->counts().evicted, 10u);
  for (int fd : fds) close(fd);
  close(other);
}

// A head that does not arrive whole within head_timeout_s is dropped.
TEST(HttpEndpointTest, AnIncompleteHeadIsDroppedAtItsDeadline) {
  MetricsSnapshot m;
  HttpEndpointOptions o;
  o.head_timeout_s = 0.3;
  auto e = HttpEndpoint::Start(o, &m);
  ASSERT_TRUE(e.ok()) << e.status();
  const int fd = Open((*e)->address());
  (void)send(fd, kPartialHead, 20, MSG_NOSIGNAL);
  EXPECT_FALSE(ClosedByPeer(fd, 100)) << "not before the deadline";
  EXPECT_TRUE(ClosedByPeer(fd, 5000)) << "dropped after it";
  close(fd);
  EXPECT_EQ((*e)->counts().head_timeouts, 1u);
  o.head_timeout_s = 0;
  EXPECT_FALSE(HttpEndpoint::Start(o, &m).ok()) << "a deadline must be positive";
}

// HTTP/1.0 and 1.1 are answered; any other version gets 505, and what is
// not HTTP at all 400.
TEST(HttpEndpointTest, AnswersHttp10And11Only) {
  MetricsSnapshot m;
  auto e = HttpEndpoint::Start({}, &m);
  ASSERT_TRUE(e.ok()) << e.status();
  const std::string addr = (*e)->address();
  for (const auto& [version, status] : std::vector<std::pair<std::string, std::string>>{{"HTTP/1.1", " 200 "},
                                                                                        {"HTTP/1.0", " 200 "},
                                                                                        {"HTTP/1.7", " 505 "},
                                                                                        {"HTTP/2.0", " 505 "},
                                                                                        {"HTTP/0.9", " 505 "},
                                                                                        {"HTTP/1.10", " 505 "},
                                                                                        {"SPDY/3", " 400 "}}) {
    const std::string got = Exchange(addr, "GET /healthz " + version + "\r\n\r\n");
    EXPECT_EQ(got.substr(0, got.find("\r\n")).find(status), 8u) << version << ": " << got;
  }
}

// With a metrics token, /metrics needs it as a bearer token (401 with a
// challenge otherwise); the probes stay open.
TEST(HttpEndpointTest, MetricsNeedTheBearerTokenWhenOneIsSet) {
  MetricsSnapshot m;
  m.Publish(Families(5));
  const std::string token = "0123456789abcdef-metrics";
  HttpEndpointOptions o;
  o.metrics_token = token;
  auto e = HttpEndpoint::Start(o, &m);
  ASSERT_TRUE(e.ok()) << e.status();
  const std::string addr = (*e)->address();
  EXPECT_EQ(HttpGet(addr, "/metrics")->status, 401);
  EXPECT_EQ(HttpGet(addr, "/metrics", 5, token + "x")->status, 401);
  EXPECT_EQ(HttpGet(addr, "/metrics", 5, token.substr(1))->status, 401);
  EXPECT_EQ(HttpGet(addr, "/metrics?token=" + token)->status, 401) << "only the header";
  auto ok = HttpGet(addr, "/metrics", 5, token);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->status, 200);
  EXPECT_NE(ok->body.find("geodesic_steps_total"), std::string::npos);
  EXPECT_NE(Exchange(addr, "GET /metrics HTTP/1.1\r\n\r\n").find("WWW-Authenticate: Bearer"), std::string::npos);
  EXPECT_NE(Exchange(addr, "GET /metrics HTTP/1.1\r\nauthorization:   bearer " + token + "  \r\n\r\n").find(" 200 "),
            std::string::npos)
      << "the header's name and scheme in any case, spaces around";
  EXPECT_EQ(HttpGet(addr, "/healthz")->status, 200);
  EXPECT_EQ(HttpGet(addr, "/readyz")->status, 200);
  EXPECT_TRUE(BearerMatches("Bearer " + token, token));
  EXPECT_FALSE(BearerMatches("Bearer ", ""));
  EXPECT_FALSE(BearerMatches("Basic " + token, token));
}

}  // namespace
}  // namespace geodesic::transport

namespace geodesic::transport {
namespace {

// --metrics-token-file: a process's /metrics needs the file's token; a
// missing, short or spaced token is a clear error at start.
TEST(ProcessMetricsTest, TakesItsMetricsTokenFromAFile) {
  const geodesic::testing::ScratchDir dir("metrics-token");
  HttpOptions o;
  o.bind = "127.0.0.1:0";
  o.metrics_token_file = dir / "missing";
  EXPECT_FALSE(ProcessMetrics().Start(o, nullptr).ok());
  for (const std::string bad : {"short\n", "0123456789 abcdef\n", "\n"}) {
    FILE* f = std::fopen((dir / "bad").c_str(), "w");
    std::fputs(bad.c_str(), f);
    std::fclose(f);
    o.metrics_token_file = dir / "bad";
    Status s = ProcessMetrics().Start(o, nullptr);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("16 characters or more"), std::string::npos) << s;
  }
  FILE* f = std::fopen((dir / "token").c_str(), "w");
  std::fputs("0123456789abcdef-process\nignored\n", f);
  std::fclose(f);
  o.metrics_token_file = dir / "token";
  ProcessMetrics m;
  ASSERT_TRUE(m.Start(o, nullptr).ok());
  m.Publish(Families(1));
  EXPECT_EQ(HttpGet(m.endpoint()->address(), "/metrics")->status, 401);
  EXPECT_EQ(HttpGet(m.endpoint()->address(), "/metrics", 5, "0123456789abcdef-process")->status, 200);
}

// --hold-after-exit: a process that finished well keeps serving /healthz
// until it is stopped; one that failed, or was stopped already, does not hold.
TEST(ProcessMetricsTest, HoldsAfterAGoodEndUntilStopped) {
  ProcessMetrics m;
  std::atomic<bool> stop{false};
  HttpOptions o;
  o.bind = "127.0.0.1:0";
  o.hold_until = &stop;
  ASSERT_TRUE(m.Start(o, nullptr).ok());
  const std::string addr = m.endpoint()->address();
  m.Linger(o, /*finished=*/false);  // a failure exits at once
  std::atomic<bool> held{true};
  std::thread t([&] {
    m.Linger(o, /*finished=*/true);
    held = false;
  });
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_TRUE(held.load());
    EXPECT_EQ(HttpGet(addr, "/healthz")->status, 200);
  }
  stop = true;
  t.join();
  EXPECT_FALSE(held.load());
  m.Linger(o, /*finished=*/true);  // stopped already: returns
}

}  // namespace
}  // namespace geodesic::transport

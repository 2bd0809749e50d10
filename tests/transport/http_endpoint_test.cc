#include "transport/http_endpoint.h"

#include <netinet/in.h>
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
  // Once they are gone it serves again (their 5 s request timeout bounds the wait).
  StatusOr<HttpResponse> r = DeadlineExceeded("not asked");
  for (int t = 0; t < 40 && !(r = HttpGet((*e)->address(), "/healthz", 2)).ok(); ++t)
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
}

}  // namespace
}  // namespace geodesic::transport

namespace geodesic::transport {
namespace {

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

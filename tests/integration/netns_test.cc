// Kernel-level WAN emulation (wan.emulation: netns, deploy/netns/netns.sh):
// a three-region topology gives the declared round trips and rates through
// the router namespace, a cut drops traffic both ways and a heal restores
// it, and the topology is always taken down. Needs root, network namespaces,
// iproute2, iptables and geodesic-nfq-delay; skipped (with the reason)
// without them. Slow (about 40 s): labelled with the training tests.
//
// Sockets are opened inside a region's namespace by a short-lived thread
// that enters it (setns affects only the calling thread); a socket stays in
// the namespace it was created in, so the test's own thread then uses it.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>
#include <vector>

#include "config/job.h"
#include "deploy/netns.h"
#include "tests/integration/harness.h"
#include "tests/test_paths.h"

namespace geodesic {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// Why the machine cannot run this test, or "" if it can.
std::string MissingPrerequisite() {
  if (::geteuid() != 0) return "needs root (network namespaces, tc, iptables)";
  for (const char* tool : {"ip", "tc", "iptables"}) {
    std::string cmd = std::string("PATH=$PATH:/usr/sbin:/sbin command -v ") + tool + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) return std::string("'") + tool + "' is not installed";
  }
  std::string delayer = (std::filesystem::path(::geodesic::testing::GeodesicBinary()).parent_path().parent_path() /
                         "deploy/geodesic-nfq-delay")
                            .string();
  if (::access(delayer.c_str(), X_OK) != 0) return "geodesic-nfq-delay was not built (libnetfilter-queue-dev missing?)";
  // Creating a network namespace needs CAP_SYS_ADMIN, which a container may lack.
  bool can_unshare = false;
  std::thread([&] { can_unshare = ::unshare(CLONE_NEWNET) == 0; }).join();
  if (!can_unshare) return "cannot create network namespaces here (unshare(CLONE_NEWNET) failed)";
  if (std::filesystem::exists("/run/netns/gd-router"))
    return "a netns topology is already up (deploy/netns/netns.sh down)";
  return "";
}

// A TCP socket created inside network namespace gd-<region>; -1 on failure.
int SocketIn(const std::string& region) {
  int fd = -1;
  std::thread([&] {
    int ns = ::open(("/run/netns/gd-" + region).c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0) return;
    if (::setns(ns, CLONE_NEWNET) == 0) fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ::close(ns);
  }).join();
  return fd;
}

sockaddr_in Addr(const std::string& ip, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

// A listener at the region's address on a free port.
struct Listener {
  int fd = -1;
  int port = 0;
  Listener(const std::string& region, const std::string& ip) {
    fd = SocketIn(region);
    if (fd < 0) return;
    sockaddr_in a = Addr(ip, 0);
    socklen_t len = sizeof(a);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 16) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ::close(fd);
      fd = -1;
      return;
    }
    port = ntohs(a.sin_port);
  }
  ~Listener() {
    if (fd >= 0) ::close(fd);
  }
};

// Connects from `region` to ip:port within timeout_s; returns the connected
// socket (and the time the handshake took, one round trip) or -1.
int ConnectFrom(const std::string& region, const std::string& ip, int port, double timeout_s, double* seconds) {
  int fd = SocketIn(region);
  if (fd < 0) return -1;
  int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  sockaddr_in a = Addr(ip, port);
  auto start = Clock::now();
  int r = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  if (r != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(timeout_s * 1000)) == 1) {
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      r = err == 0 ? 0 : -1;
    }
  }
  if (seconds) *seconds = Seconds(start);
  if (r != 0) {
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, flags);
  return fd;
}

// The next connection on the listener within timeout_s, or -1.
int AcceptOne(int listen_fd, double timeout_s) {
  pollfd p{listen_fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout_s * 1000)) != 1) return -1;
  return ::accept(listen_fd, nullptr, nullptr);
}

// Accepts and closes every connection already waiting.
void AcceptAndClose(int listen_fd) {
  pollfd p{listen_fd, POLLIN, 0};
  while (::poll(&p, 1, 0) == 1) {
    int c = ::accept(listen_fd, nullptr, nullptr);
    if (c < 0) break;
    ::close(c);
  }
}

// Median round trip of `n` TCP handshakes from `from` to the listener, ms.
double HandshakeRttMs(const std::string& from, const Listener& to, const std::string& to_ip, int n) {
  std::vector<double> rtts;
  for (int i = 0; i < n; ++i) {
    double s = 0;
    int fd = ConnectFrom(from, to_ip, to.port, 3.0, &s);
    if (fd >= 0) {
      rtts.push_back(s * 1000);
      // The server side completes the handshake half a round trip later.
      int c = AcceptOne(to.fd, 3.0);
      if (c >= 0) ::close(c);
      ::close(fd);
    }
  }
  if (rtts.empty()) return -1;
  std::sort(rtts.begin(), rtts.end());
  return rtts[rtts.size() / 2];
}

// Sends on `streams` parallel TCP connections for `total_s` from `from` to
// the listener and returns their combined receive rate, Mbit/s, over
// [warmup_s, total_s] (after slow start). Several streams fill the link the
// way `iperf -P` does: a loss halves only one stream's window, so the rate
// shows the shaping rather than one connection's recovery from a loss (over
// 120-160 ms round trips one halving costs most of a 2.5 s window).
double ThroughputMbit(const std::string& from, const Listener& to, const std::string& to_ip, double warmup_s,
                      double total_s, int streams) {
  std::vector<int> fds;  // tx, rx pairs
  auto close_all = [&] {
    for (int fd : fds) ::close(fd);
  };
  for (int i = 0; i < streams; ++i) {
    int tx = ConnectFrom(from, to_ip, to.port, 3.0, nullptr);
    int rx = tx < 0 ? -1 : AcceptOne(to.fd, 3.0);
    if (tx >= 0) fds.push_back(tx);
    if (rx < 0) {
      close_all();
      return -1;
    }
    fds.push_back(rx);
  }
  std::vector<std::thread> senders;
  for (size_t i = 0; i < fds.size(); i += 2) {
    // Sends time out so that the sender notices the end while the window is full.
    timeval send_timeout{0, 200000};
    ::setsockopt(fds[i], SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
    senders.emplace_back([tx = fds[i], total_s] {
      std::vector<char> buf(64 << 10, 'x');
      auto start = Clock::now();
      while (Seconds(start) < total_s + 0.5) {
        if (::send(tx, buf.data(), buf.size(), MSG_NOSIGNAL) < 0 && errno != EAGAIN && errno != EWOULDBLOCK) break;
      }
    });
  }
  std::vector<pollfd> rx;
  for (size_t i = 1; i < fds.size(); i += 2) rx.push_back(pollfd{fds[i], POLLIN, 0});
  std::vector<char> buf(1 << 20);
  auto start = Clock::now();
  int64_t at_warmup = -1, bytes = 0;
  double t_warmup = 0, t_end = 0;
  while ((t_end = Seconds(start)) < total_s) {
    if (::poll(rx.data(), rx.size(), 200) <= 0) continue;
    for (pollfd& p : rx) {
      ssize_t n = (p.revents & POLLIN) ? ::recv(p.fd, buf.data(), buf.size(), MSG_DONTWAIT) : 0;
      if (n > 0) bytes += n;
    }
    if (at_warmup < 0 && Seconds(start) >= warmup_s) {
      at_warmup = bytes;
      t_warmup = Seconds(start);
    }
  }
  for (auto& s : senders) s.join();
  close_all();
  if (at_warmup < 0 || t_end <= t_warmup) return -1;
  return (bytes - at_warmup) * 8 / 1e6 / (t_end - t_warmup);
}

TEST(NetnsLinks, MatchDeclaredMatrixAndCutsDropUntilHealed) {
  if (std::string why = MissingPrerequisite(); !why.empty()) GTEST_SKIP() << why;
  // us-eu 80 ms RTT 100 Mbit/s, us-asia 160 ms 50 Mbit/s 1% loss, eu-asia 120 ms 50 Mbit/s.
  auto job = LoadJobFile(::geodesic::testing::SourcePath("examples/three_regions_netns.yaml"));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  testing::TempDir dir;
  auto wan = deploy::NetnsWan::Up(*job, dir.path());
  ASSERT_TRUE(wan.ok()) << wan.status().ToString();  // taken down when `wan` goes out of scope

  std::map<std::string, std::unique_ptr<Listener>> listeners;
  for (const auto& r : job->regions) {
    listeners[r.name] = std::make_unique<Listener>(r.name, (*wan)->Address(r.name));
    ASSERT_GE(listeners[r.name]->fd, 0) << "cannot listen in gd-" << r.name;
  }

  std::printf("%-10s %-6s %12s %12s %12s %12s %6s\n", "from", "to", "rtt_ms", "measured", "mbit", "measured", "loss");
  for (const LinkSpec& l : job->wan.links) {
    const std::string to_ip = (*wan)->Address(l.to);
    const Listener& to = *listeners[l.to];
    double rtt_conf = l.delay_ms + job->Link(l.to, l.from)->delay_ms;
    double rtt = HandshakeRttMs(l.from, to, to_ip, 5);
    // 160 ms round trips need a few seconds of slow start before the rate
    // holds. The rate is a capacity: on this shared VM one transfer can
    // fall short of it for reasons outside the emulation (the user-space
    // delayer competing for the two cores; single-stream transfers in
    // clean-clone runs of 2026-12-01 measured 54 and 33 of 100 and 50 Mbit/s
    // once, 95 and 50 the next time, and 14.5 of 50 as the best of three in
    // CI), so four streams share each transfer and a lossless link gets the
    // best of up to three transfers, which must not exceed the cap by more
    // than 15% (the shaping holds) and must reach half of it (the link is
    // not broken).
    double mbit = 0;
    for (int attempt = 0; attempt < (l.loss == 0 ? 3 : 1); ++attempt) {
      mbit = std::max(mbit, ThroughputMbit(l.from, to, to_ip, 1.5, 4.0, 4));
      if (mbit >= 0.85 * l.bandwidth_mbit) break;
    }
    std::printf("%-10s %-6s %12.1f %12.1f %12.1f %12.1f %6.3f\n", l.from.c_str(), l.to.c_str(), rtt_conf, rtt,
                l.bandwidth_mbit, mbit, l.loss);
    EXPECT_NEAR(rtt, rtt_conf, 0.15 * rtt_conf) << l.from << " -> " << l.to;
    if (l.loss == 0) {
      EXPECT_LE(mbit, 1.15 * l.bandwidth_mbit) << l.from << " -> " << l.to << ": the cap does not hold";
      EXPECT_GE(mbit, 0.5 * l.bandwidth_mbit) << l.from << " -> " << l.to;
    } else {
      EXPECT_GT(mbit, 0) << l.from << " -> " << l.to;
    }
  }

  // The launcher's start-up probes (probe server in one namespace, client in
  // the other) see the same links.
  auto probes = (*wan)->Probe();
  ASSERT_TRUE(probes.ok()) << probes.status().ToString();
  ASSERT_EQ(probes->size(), job->wan.links.size());
  for (const auto& p : *probes) {
    ASSERT_TRUE(p.contains("probed_rtt_ms")) << p.dump();
    const double set = p["configured_rtt_ms"].get<double>();
    // The pings share one TCP stream: on a lossy link a lost segment holds
    // the pings behind it until it is retransmitted (one CI run saw a median
    // of 271 ms on the 160 ms, 1% link), so there a probe only bounds the RTT.
    if (job->Link(p["from"], p["to"])->loss == 0)
      EXPECT_NEAR(p["probed_rtt_ms"].get<double>(), set, 0.15 * set) << p.dump();
    else
      EXPECT_GE(p["probed_rtt_ms"].get<double>(), 0.95 * set) << p.dump();
    EXPECT_GT(p["probed_mbit"].get<double>(), 0) << p.dump();
  }

  // The summary's `emulator` record: the delayer's CPU (it delayed every
  // packet of the transfers above) and the bytes forwarded, up to the
  // probes' end and since.
  auto cost = (*wan)->Cost();
  ASSERT_TRUE(cost.ok()) << cost.status().ToString();
  EXPECT_EQ((*cost)["kind"], "netns");
  EXPECT_GT((*cost)["probes"]["cpu_seconds"].get<double>(), 0) << cost->dump();
  EXPECT_GT((*cost)["probes"]["mb_relayed"].get<double>(), 6.0) << cost->dump();
  EXPECT_GE((*cost)["cpu_seconds"].get<double>(), 0) << cost->dump();
  EXPECT_GE((*cost)["mb_relayed"].get<double>(), 0) << cost->dump();

  // The bytes per link the launcher reports count from the end of the
  // probes (the job's own): the bulk transfers and the probes above, which
  // the router counted (`probes.mb_relayed`), are not in them.
  auto traffic = (*wan)->Traffic();
  ASSERT_TRUE(traffic.ok()) << traffic.status().ToString();
  ASSERT_EQ(traffic->size(), job->wan.links.size());
  for (const auto& t : *traffic) EXPECT_LT(t["bytes"].get<uint64_t>(), 64u << 10) << t.dump();

  // A cut drops everything between the two regions, both ways, and nothing else.
  ASSERT_TRUE((*wan)->Cut("us", "eu").ok());
  double s = 0;
  int fd = ConnectFrom("us", (*wan)->Address("eu"), listeners["eu"]->port, 1.0, &s);
  EXPECT_LT(fd, 0) << "us reached eu through a cut";
  if (fd >= 0) ::close(fd);
  fd = ConnectFrom("eu", (*wan)->Address("us"), listeners["us"]->port, 1.0, &s);
  EXPECT_LT(fd, 0) << "eu reached us through a cut";
  if (fd >= 0) ::close(fd);
  fd = ConnectFrom("eu", (*wan)->Address("asia"), listeners["asia"]->port, 3.0, &s);
  EXPECT_GE(fd, 0) << "a cut between us and eu broke eu -> asia";
  if (fd >= 0) ::close(fd);
  ASSERT_TRUE((*wan)->Heal("eu", "us").ok());
  fd = ConnectFrom("us", (*wan)->Address("eu"), listeners["eu"]->port, 3.0, &s);
  EXPECT_GE(fd, 0) << "us cannot reach eu after the heal";
  if (fd >= 0) ::close(fd);
  for (auto& [name, l] : listeners) AcceptAndClose(l->fd);

  listeners.clear();
  ASSERT_TRUE((*wan)->Down().ok());
  EXPECT_FALSE(std::filesystem::exists("/run/netns/gd-router"));
}

// A launcher killed with SIGKILL never takes its topology down; the next
// `up` finds the recorded owner gone, takes the leftovers down and builds
// its own, instead of refusing to start until someone runs `netns.sh down`.
TEST(NetnsStaleTest, ATopologyLeftByAKilledLauncherIsTakenDownByTheNextUp) {
  if (std::string why = MissingPrerequisite(); !why.empty()) GTEST_SKIP() << why;
  const std::string example = ::geodesic::testing::SourcePath("examples/three_regions_netns.yaml");
  auto job = LoadJobFile(example);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  testing::TempDir dir;
  struct DownAtExit {  // whatever happens, nothing is left up
    ~DownAtExit() {
      if (std::filesystem::exists("/run/netns/gd-router"))
        std::system(("bash " + ::geodesic::testing::SourcePath("deploy/netns/netns.sh down >/dev/null 2>&1")).c_str());
    }
  } down_at_exit;
  {
    testing::Process launch({"launch", example, "--run-dir", dir / "killed", "--quiet", "--no-dashboard"},
                            dir / "killed.log");
    bool up = false;
    for (int i = 0; i < 600 && !(up = std::filesystem::exists("/run/geodesic-netns/owner")); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_TRUE(up) << testing::ReadText(dir / "killed.log");
    launch.Signal(SIGKILL);  // its children follow (PR_SET_PDEATHSIG); the topology stays
    launch.Wait(10);
  }
  ASSERT_TRUE(std::filesystem::exists("/run/netns/gd-router"));
  auto wan = deploy::NetnsWan::Up(*job, dir / "next");
  ASSERT_TRUE(wan.ok()) << wan.status().ToString();
  EXPECT_NE(testing::ReadText(dir / "next/logs/netns-up.log").find("taking down a topology left by pid"),
            std::string::npos)
      << testing::ReadText(dir / "next/logs/netns-up.log");
  // The new topology works: a connection between two regions.
  Listener eu("eu", (*wan)->Address("eu"));
  ASSERT_GE(eu.fd, 0);
  double s = 0;
  int fd = ConnectFrom("us", (*wan)->Address("eu"), eu.port, 3.0, &s);
  EXPECT_GE(fd, 0);
  if (fd >= 0) ::close(fd);
}

// deploy render --target hosts across three network namespaces acting as
// three hosts, joined by the job's kernel-emulated links: each namespace runs
// only its own rendered script (no launcher parent); mid-training SIGKILL to
// eu's primary shard hands it to its backup in asia (docs/reliability.md),
// eu's script reports the failure, and the job still reaches 88%. Local SGD
// (rounds of 6 steps, int8 both ways), the configuration that makes these
// links cheap (docs/wan.md), keeps training near 100 s on 2 cores of normal
// speed; on cores that run the CNN 4-5x slower it took 230-300 s, so the
// wait for us's script allows 600 s. Snapshots every 30 s keep the
// evaluator (4-7 s a snapshot) from taking cores from the workers and from
// lagging a minute behind them at the end.
TEST(NetnsHostsTest, ThreeHostsRunOnlyTheirScriptsReach88AndFailOver) {
  if (std::string why = MissingPrerequisite(); !why.empty()) GTEST_SKIP() << why;
  const std::string example = ::geodesic::testing::SourcePath("examples/three_regions_netns.yaml");
  auto job = LoadJobFile(example);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  testing::TempDir dir;
  auto wan = deploy::NetnsWan::Up(*job, dir / "wan");
  ASSERT_TRUE(wan.ok()) << wan.status().ToString();  // taken down when `wan` goes out of scope
  std::vector<std::string> render = {"deploy", "render", example, "--out", dir / "out"};
  for (const char* set :
       {"replication.backups=1", "training.local_steps=6", "training.overlap_rounds=true", "compression.push=int8",
        "compression.pull=int8", "training.epochs=5", "eval.snapshot_every_s=30"})
    render.insert(render.end(), {"--set", set});
  for (const auto& r : job->regions)
    render.insert(render.end(), {"--set", "regions." + r.name + ".host=" + (*wan)->Address(r.name)});
  auto rendered = testing::RunGeodesic(render, 30);
  ASSERT_EQ(rendered.exit_code, 0) << rendered.output;
  ::setenv("GEODESIC", ::geodesic::testing::GeodesicBinary(), 1);
  std::map<std::string, std::unique_ptr<testing::Process>> hosts;
  for (const auto& r : job->regions) {
    std::vector<std::string> args = (*wan)->CommandPrefix(r.name);
    args.insert(args.end(), {"/bin/bash", dir / ("out/host-" + (*wan)->Address(r.name) + ".sh")});
    hosts[r.name] = std::make_unique<testing::Process>(args, dir / (r.name + ".log"), /*program=*/true);
  }
  const std::string us = dir / ("out/run-" + (*wan)->Address("us")), eu = dir / ("out/run-" + (*wan)->Address("eu")),
                    asia = dir / ("out/run-" + (*wan)->Address("asia"));
  ASSERT_TRUE(testing::WaitForFile(us + "/stats/worker-0.json", 90)) << testing::ReadText(dir / "us.log");
  std::this_thread::sleep_for(std::chrono::seconds(5));
  const pid_t server1 = std::stoi(testing::ReadText(eu + "/pids/server-1"));
  ASSERT_EQ(::kill(server1, SIGKILL), 0);
  EXPECT_EQ(hosts["us"]->Wait(600), 0) << testing::ReadText(dir / "us.log");
  EXPECT_EQ(hosts["asia"]->Wait(30), 0) << testing::ReadText(dir / "asia.log");
  EXPECT_EQ(hosts["eu"]->Wait(30), 1) << "server-1 was killed: its host's script says so\n"
                                      << testing::ReadText(dir / "eu.log");
  const std::string backup = testing::ReadText(asia + "/logs/backup-1.log");
  EXPECT_NE(backup.find("promoted"), std::string::npos) << backup;
  auto result = testing::ReadJson(us + "/result.json");
  ASSERT_TRUE(result.is_object()) << testing::ReadText(dir / "us.log");
  EXPECT_EQ(result["workers_done"], 6) << result.dump();
  EXPECT_GE(result["test_accuracy"].get<double>(), 0.88) << result.dump();
  auto traffic = (*wan)->Traffic();
  ASSERT_TRUE(traffic.ok()) << traffic.status().ToString();
  std::printf("three netns hosts, rendered scripts, eu's shard killed: test accuracy %.4f; router bytes %s\n",
              result["test_accuracy"].get<double>(), traffic->dump().c_str());
}

}  // namespace
}  // namespace geodesic

// geodesic-nfq-delay: the user-space delay stage of kernel WAN emulation
// (deploy/netns/netns.sh). This kernel has no netem, so the router namespace
// sends each ordered region pair's forwarded packets to its own NFQUEUE and
// this program gives them back (NF_ACCEPT) after the pair's one-way delay
// plus a uniform jitter in [0, jitter].
//
//   geodesic-nfq-delay --queue NUM:DELAY_MS:JITTER_MS [--queue ...]
//                      [--maxlen PACKETS] [--ready-file PATH] [--seed N]
//
// Contract:
// - Packets of one queue leave in the order they came (a packet is never
//   released before the one ahead of it, so jitter never reorders a link).
// - Only metadata crosses to user space (NFQNL_COPY_META); verdicts for the
//   packets due at one moment go back as one batch verdict per queue.
// - Memory is bounded: the kernel holds at most --maxlen packets per queue
//   (default 10000) waiting for a verdict, and this program only keeps their
//   ids. A packet arriving at a full queue is DROPPED by the kernel, as a
//   router's full buffer drops it (not fail-open: letting it through would
//   skip the delay and reorder the link).
// - GSO packets are queued whole (NFQA_CFG_F_GSO): fewer messages; the
//   region veths cap GSO size when per-packet loss matters (netns.sh).
// - SIGTERM or SIGINT: every held packet is accepted at once, the queues are
//   unbound, per-queue counts go to stderr, exit 0.
//
// One thread: ppoll() on the netlink socket with a timeout to the earliest
// due packet. There is one queue per ordered pair of regions (a handful), so
// the earliest due packet is found by scanning the queues' heads: each
// queue's release times are monotone, which makes every queue a FIFO.
#include <arpa/inet.h>
#include <errno.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <linux/netlink.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

using Nanos = int64_t;

Nanos Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return Nanos{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

struct Held {
  uint32_t id;
  Nanos release;
};

struct Queue {
  uint16_t num = 0;
  Nanos delay = 0, jitter = 0;
  nfq_q_handle* handle = nullptr;
  std::deque<Held> held;  // release times non-decreasing
  Nanos last_release = 0;
  uint64_t packets = 0, verdicts = 0;
};

struct Options {
  std::vector<Queue> queues;
  uint32_t maxlen = 10000;
  std::string ready_file;
  uint64_t seed = 1;
};

volatile sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "geodesic-nfq-delay: %s\n"
               "usage: geodesic-nfq-delay --queue NUM:DELAY_MS:JITTER_MS [--queue ...] [--maxlen PACKETS]\n"
               "                          [--ready-file PATH] [--seed N]\n",
               why);
  std::exit(2);
}

bool ParseQueue(const std::string& s, Queue* q) {
  unsigned num;
  double delay_ms, jitter_ms;
  char tail;
  if (std::sscanf(s.c_str(), "%u:%lf:%lf%c", &num, &delay_ms, &jitter_ms, &tail) != 3) return false;
  if (num > 65535 || !(delay_ms >= 0) || !(jitter_ms >= 0) || delay_ms > 60'000 || jitter_ms > 60'000) return false;
  q->num = static_cast<uint16_t>(num);
  q->delay = static_cast<Nanos>(delay_ms * 1e6);
  q->jitter = static_cast<Nanos>(jitter_ms * 1e6);
  return true;
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Usage((a + " needs a value").c_str());
      return argv[++i];
    };
    if (a == "--queue") {
      Queue q;
      std::string v = value();
      if (!ParseQueue(v, &q)) Usage(("bad --queue '" + v + "': expected NUM:DELAY_MS:JITTER_MS").c_str());
      for (const auto& other : o.queues)
        if (other.num == q.num) Usage(("queue " + std::to_string(q.num) + " given twice").c_str());
      o.queues.push_back(std::move(q));
    } else if (a == "--maxlen") {
      long v = std::atol(value().c_str());
      if (v < 1 || v > 1'000'000) Usage("--maxlen must be 1..1000000");
      o.maxlen = static_cast<uint32_t>(v);
    } else if (a == "--ready-file") {
      o.ready_file = value();
    } else if (a == "--seed") {
      o.seed = std::strtoull(value().c_str(), nullptr, 10);
    } else if (a == "--help" || a == "-h") {
      Usage("delays NFQUEUE packets (see deploy/netns/netns.sh)");
    } else {
      Usage(("unknown argument '" + a + "'").c_str());
    }
  }
  if (o.queues.empty()) Usage("no --queue given");
  return o;
}

struct Context {
  std::vector<Queue>* queues;
  std::mt19937_64 rng;
  Nanos now = 0;  // arrival time of the batch being read
};

int OnPacket(nfq_q_handle* qh, nfgenmsg*, nfq_data* nfa, void* data) {
  auto* ctx = static_cast<Context*>(data);
  nfqnl_msg_packet_hdr* ph = nfq_get_msg_packet_hdr(nfa);
  if (!ph) return 0;
  uint32_t id = ntohl(ph->packet_id);
  for (Queue& q : *ctx->queues) {
    if (q.handle != qh) continue;
    Nanos jitter = 0;
    if (q.jitter > 0) jitter = std::uniform_int_distribution<Nanos>(0, q.jitter)(ctx->rng);
    Nanos release = std::max(ctx->now + q.delay + jitter, q.last_release);
    q.last_release = release;
    q.held.push_back({id, release});
    ++q.packets;
    return 0;
  }
  // Not one of ours (cannot happen): let it through rather than hold it forever.
  nfq_set_verdict(qh, id, NF_ACCEPT, 0, nullptr);
  return 0;
}

// Accepts every held packet of `q` due by `now` with one batch verdict.
void Release(Queue& q, Nanos now, bool all) {
  uint32_t last = 0;
  bool any = false;
  while (!q.held.empty() && (all || q.held.front().release <= now)) {
    last = q.held.front().id;
    q.held.pop_front();
    any = true;
    ++q.verdicts;
  }
  if (any && nfq_set_verdict_batch(q.handle, last, NF_ACCEPT) < 0)
    std::fprintf(stderr, "geodesic-nfq-delay: verdict on queue %u failed: %s\n", q.num, std::strerror(errno));
}

// Binds every queue of `opt` to `h`; false (after saying why) on failure.
bool BindQueues(nfq_handle* h, Options& opt, Context* ctx) {
  for (Queue& q : opt.queues) {
    q.handle = nfq_create_queue(h, q.num, &OnPacket, ctx);
    if (!q.handle) {
      std::fprintf(stderr, "geodesic-nfq-delay: cannot bind queue %u: %s (is another program bound to it?)\n", q.num,
                   std::strerror(errno));
      return false;
    }
    if (nfq_set_mode(q.handle, NFQNL_COPY_META, 0) < 0 || nfq_set_queue_maxlen(q.handle, opt.maxlen) < 0) {
      std::fprintf(stderr, "geodesic-nfq-delay: configuring queue %u failed: %s\n", q.num, std::strerror(errno));
      return false;
    }
    // Whole GSO packets; older kernels without the flag segment them instead.
    if (nfq_set_queue_flags(q.handle, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO) < 0)
      std::fprintf(stderr, "geodesic-nfq-delay: queue %u: no NFQA_CFG_F_GSO; packets come segmented\n", q.num);
  }
  return true;
}

// A deep receive buffer so that a burst waits in the socket, and no ENOBUFS
// error if it overflows anyway (the kernel then drops the packet).
void DeepenReceiveBuffer(int fd) {
  int rcvbuf = 16 << 20, one = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf)) < 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof(one));
}

// SIGTERM/SIGINT are blocked except inside ppoll, so none is missed. Returns
// the mask to wait with.
sigset_t BlockStopSignals() {
  sigset_t block, orig;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGINT);
  sigprocmask(SIG_BLOCK, &block, &orig);
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigset_t wait_mask = orig;
  sigdelset(&wait_mask, SIGTERM);
  sigdelset(&wait_mask, SIGINT);
  return wait_mask;
}

// Reads the netlink socket's messages in batches of kBatch (recvmmsg).
class Reader {
 public:
  Reader() : bufs_(kBatch * kBufBytes), iov_(kBatch), msgs_(kBatch) {
    for (int i = 0; i < kBatch; ++i) {
      iov_[i] = {bufs_.data() + i * kBufBytes, kBufBytes};
      msgs_[i] = {};
      msgs_[i].msg_hdr.msg_iov = &iov_[i];
      msgs_[i].msg_hdr.msg_iovlen = 1;
    }
  }

  // Drains the socket: up to a few batches, each handed to OnPacket with
  // its arrival time, so that what is due is released between batches.
  void Drain(int fd, nfq_handle* h, Context& ctx) {
    for (int round = 0; round < 8; ++round) {
      int n = recvmmsg(fd, msgs_.data(), kBatch, MSG_DONTWAIT, nullptr);
      if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ENOBUFS) ++read_errors;
        break;
      }
      ctx.now = Now();
      for (int i = 0; i < n; ++i)
        nfq_handle_packet(h, bufs_.data() + i * kBufBytes, static_cast<int>(msgs_[i].msg_len));
      if (n < kBatch) break;
    }
  }

  uint64_t read_errors = 0;

 private:
  static constexpr int kBatch = 64, kBufBytes = 4096;
  std::vector<char> bufs_;
  std::vector<iovec> iov_;
  std::vector<mmsghdr> msgs_;
};

// Releases what is due, then sleeps until the next packet is due or one
// arrives; until SIGTERM/SIGINT.
void Serve(nfq_handle* h, std::vector<Queue>& queues, Context& ctx, const sigset_t& wait_mask, Reader& reader) {
  const int fd = nfq_fd(h);
  while (!g_stop) {
    Nanos now = Now();
    Nanos next = std::numeric_limits<Nanos>::max();
    for (Queue& q : queues) {
      Release(q, now, false);
      if (!q.held.empty()) next = std::min(next, q.held.front().release);
    }
    timespec timeout{}, *tp = nullptr;
    if (next != std::numeric_limits<Nanos>::max()) {
      Nanos wait = std::max<Nanos>(0, next - Now());
      timeout = {static_cast<time_t>(wait / 1'000'000'000), static_cast<long>(wait % 1'000'000'000)};
      tp = &timeout;
    }
    pollfd pfd{fd, POLLIN, 0};
    int r = ppoll(&pfd, 1, tp, &wait_mask);
    if (r < 0) {
      if (errno == EINTR) continue;
      std::perror("geodesic-nfq-delay: ppoll");
      break;
    }
    if (r > 0) reader.Drain(fd, h, ctx);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options opt = ParseArgs(argc, argv);
  // Wake-ups within ~10 us of the due time (the default slack is 50 us).
  prctl(PR_SET_TIMERSLACK, 10'000UL, 0, 0, 0);
  nfq_handle* h = nfq_open();
  if (!h) {
    std::fprintf(stderr, "geodesic-nfq-delay: nfq_open failed: %s (needs root / CAP_NET_ADMIN)\n",
                 std::strerror(errno));
    return 1;
  }
  Context ctx{&opt.queues, std::mt19937_64(opt.seed)};
  if (!BindQueues(h, opt, &ctx)) return 1;
  DeepenReceiveBuffer(nfq_fd(h));
  const sigset_t wait_mask = BlockStopSignals();
  if (!opt.ready_file.empty()) {
    std::ofstream(opt.ready_file) << getpid() << "\n";
  }
  std::fprintf(stderr, "geodesic-nfq-delay: serving %zu queue(s), maxlen %u\n", opt.queues.size(), opt.maxlen);
  Reader reader;
  Serve(h, opt.queues, ctx, wait_mask, reader);
  for (Queue& q : opt.queues) {
    Release(q, 0, /*all=*/true);
    std::fprintf(stderr, "geodesic-nfq-delay: queue %u: %llu packets delayed\n", q.num,
                 static_cast<unsigned long long>(q.packets));
    nfq_destroy_queue(q.handle);
  }
  if (reader.read_errors)
    std::fprintf(stderr, "geodesic-nfq-delay: %llu read errors\n", (unsigned long long)reader.read_errors);
  nfq_close(h);
  return 0;
}

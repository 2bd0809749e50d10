#include "wan/probe.h"

#include <algorithm>
#include <array>
#include <asio.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/log.h"

namespace geodesic::wan {
namespace {

using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;
using Time = SteadyClock::time_point;
using Header = std::array<uint8_t, 9>;

constexpr uint8_t kPing = 'P';
constexpr uint8_t kBulk = 'B';
constexpr uint8_t kAck = 'A';
constexpr uint64_t kMaxBulkBytes = uint64_t{1} << 30;

Header Encode(uint8_t type, uint64_t value) {
  Header h;
  h[0] = type;
  std::memcpy(h.data() + 1, &value, sizeof(value));
  return h;
}

uint64_t ValueOf(const Header& h) {
  uint64_t value;
  std::memcpy(&value, h.data() + 1, sizeof(value));
  return value;
}

double MsBetween(Time from, Time to) { return std::chrono::duration<double, std::milli>(to - from).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// One client connection of a ProbeServer; its pending handler keeps it alive.
struct Session : std::enable_shared_from_this<Session> {
  explicit Session(tcp::socket s) : socket(std::move(s)) {}

  void ReadHeader() {
    asio::async_read(socket, asio::buffer(header), [self = shared_from_this()](std::error_code ec, size_t) {
      if (ec) return;
      const uint64_t value = ValueOf(self->header);
      if (self->header[0] == kPing) {
        asio::async_write(self->socket, asio::buffer(self->header), [self](std::error_code ec, size_t) {
          if (!ec) self->ReadHeader();
        });
      } else if (self->header[0] == kBulk && value <= kMaxBulkBytes) {
        self->remaining = value;
        self->ReadBulk();
      }  // else: the session ends and its socket closes
    });
  }

  void ReadBulk() {
    if (remaining == 0) {
      asio::async_write(socket, asio::buffer(&kAck, 1), [self = shared_from_this()](std::error_code ec, size_t) {
        if (!ec) self->ReadHeader();
      });
      return;
    }
    const size_t want = static_cast<size_t>(std::min<uint64_t>(remaining, discard.size()));
    socket.async_read_some(asio::buffer(discard.data(), want),
                           [self = shared_from_this()](std::error_code ec, size_t n) {
                             if (ec) return;
                             self->remaining -= n;
                             self->ReadBulk();
                           });
  }

  tcp::socket socket;
  Header header{};
  uint64_t remaining = 0;
  std::vector<uint8_t> discard = std::vector<uint8_t>(64 << 10);
};

// Runs `io` until `done` or the deadline. On the deadline, `abort` cancels
// the pending operations and their handlers run before this returns.
Status RunUntil(asio::io_context& io, const bool& done, Time deadline, const std::function<void()>& abort,
                const std::string& what, double timeout_ms) {
  io.restart();
  while (!done && io.run_one_until(deadline) > 0) {
  }
  if (done) return Status::Ok();
  abort();
  io.restart();
  io.run();
  return DeadlineExceeded(what + ": no answer within the probe's " + std::to_string(static_cast<int>(timeout_ms)) +
                          " ms");
}

}  // namespace

StatusOr<LinkMeasurement> ProbeLink(const std::string& host, int port, const ProbeOptions& options) {
  const std::string where = "probe of " + host + ":" + std::to_string(port);
  if (options.pings < 1 || options.ping_interval_ms < 0 || options.bulk_bytes < 0 ||
      static_cast<uint64_t>(options.bulk_bytes) > kMaxBulkBytes || options.timeout_ms <= 0)
    return InvalidArgument(where +
                           ": need pings >= 1, ping_interval_ms >= 0, 0 <= bulk_bytes <= 1 GiB, timeout_ms > 0");
  const Time deadline = SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                                 std::chrono::duration<double, std::milli>(options.timeout_ms));
  asio::io_context io;
  tcp::socket socket(io);
  asio::steady_timer timer(io);
  std::error_code failure;  // the first failed operation
  bool done = false;
  auto fail = [&](std::error_code ec) {
    if (!failure) failure = ec;
    done = true;
    timer.cancel();
  };
  auto abort = [&] {
    std::error_code ignored;
    socket.close(ignored);
    timer.cancel();
  };
  auto run = [&](const std::string& phase) -> Status {
    GD_RETURN_IF_ERROR(RunUntil(io, done, deadline, abort, where + ": " + phase, options.timeout_ms));
    if (failure) return Unavailable(where + ": " + phase + ": " + failure.message());
    return Status::Ok();
  };

  std::error_code ec;
  tcp::resolver resolver(io);
  const auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec) return Unavailable(where + ": cannot resolve: " + ec.message());
  asio::async_connect(socket, endpoints, [&](std::error_code connect_ec, const tcp::endpoint&) {
    if (connect_ec) return fail(connect_ec);
    done = true;
  });
  GD_RETURN_IF_ERROR(run("connect"));
  socket.set_option(tcp::no_delay(true), ec);

  // Pings, sent on a schedule while the echoes are read.
  const int pings = options.pings;
  const Time first_ping = SteadyClock::now();
  std::vector<Time> sent(static_cast<size_t>(pings));
  std::vector<bool> echoed(static_cast<size_t>(pings));
  std::vector<double> rtts;
  Header out{}, in{};
  int next_ping = 0;
  done = false;
  std::function<void()> send_ping = [&] {
    out = Encode(kPing, static_cast<uint64_t>(next_ping));
    sent[static_cast<size_t>(next_ping++)] = SteadyClock::now();
    asio::async_write(socket, asio::buffer(out), [&](std::error_code write_ec, size_t) {
      if (write_ec) return fail(write_ec);
      if (next_ping == pings || done) return;
      timer.expires_at(first_ping +
                       std::chrono::duration_cast<SteadyClock::duration>(
                           std::chrono::duration<double, std::milli>(options.ping_interval_ms * next_ping)));
      timer.async_wait([&](std::error_code wait_ec) {
        if (!wait_ec && !done) send_ping();
      });
    });
  };
  std::function<void()> read_echo = [&] {
    asio::async_read(socket, asio::buffer(in), [&](std::error_code read_ec, size_t) {
      if (read_ec) return fail(read_ec);
      const uint64_t seq = ValueOf(in);
      if (in[0] != kPing || seq >= static_cast<uint64_t>(next_ping) || echoed[seq])
        return fail(asio::error::make_error_code(asio::error::invalid_argument));
      echoed[seq] = true;
      rtts.push_back(MsBetween(sent[seq], SteadyClock::now()));
      if (static_cast<int>(rtts.size()) == pings) {
        done = true;
      } else {
        read_echo();
      }
    });
  };
  send_ping();
  read_echo();
  if (Status s = run("pings"); !s.ok())
    return Status(s.code(),
                  s.message() + " (" + std::to_string(rtts.size()) + " of " + std::to_string(pings) + " pings echoed)");

  LinkMeasurement m;
  m.rtt_ms = Median(rtts);
  m.min_rtt_ms = *std::min_element(rtts.begin(), rtts.end());
  m.max_rtt_ms = *std::max_element(rtts.begin(), rtts.end());
  if (options.bulk_bytes == 0) return m;

  // Bulk: n bytes out, one byte back once they have all arrived.
  const std::vector<uint8_t> bulk(static_cast<size_t>(options.bulk_bytes));
  const Header bulk_header = Encode(kBulk, static_cast<uint64_t>(options.bulk_bytes));
  const std::array<asio::const_buffer, 2> buffers = {asio::buffer(bulk_header), asio::buffer(bulk)};
  uint8_t ack = 0;
  bool written = false;
  Time acked{};
  done = false;
  const Time start = SteadyClock::now();
  asio::async_write(socket, buffers, [&](std::error_code write_ec, size_t) {
    if (write_ec) return fail(write_ec);
    written = true;
    done = acked != Time{};
  });
  asio::async_read(socket, asio::buffer(&ack, 1), [&](std::error_code read_ec, size_t) {
    if (read_ec) return fail(read_ec);
    if (ack != kAck) return fail(asio::error::make_error_code(asio::error::invalid_argument));
    acked = SteadyClock::now();
    done = written;
  });
  GD_RETURN_IF_ERROR(run("bulk transfer of " + std::to_string(options.bulk_bytes) + " bytes"));
  m.bulk_bytes = options.bulk_bytes;
  m.bulk_ms = MsBetween(start, acked);
  // Guards against a transfer shorter than the RTT's noise (bulk_bytes too
  // small for the link): the figure is then an overestimate.
  const double transfer_ms = std::max(m.bulk_ms - m.rtt_ms, 0.05 * m.bulk_ms);
  m.mbit = static_cast<double>(options.bulk_bytes) * 8 / (transfer_ms * 1e3);
  return m;
}

class ProbeServer::Impl {
 public:
  void Accept() {
    acceptor.async_accept([this](std::error_code ec, tcp::socket socket) {
      if (closing || ec == asio::error::operation_aborted) return;
      if (ec) {
        GD_LOG(WARNING) << "probe server: accept failed: " << ec.message();
        backoff.expires_after(std::chrono::milliseconds(50));
        backoff.async_wait([this](std::error_code wait_ec) {
          if (!wait_ec && !closing) Accept();
        });
        return;
      }
      std::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      auto session = std::make_shared<Session>(std::move(socket));
      sessions.emplace_back(session);
      std::erase_if(sessions, [](const std::weak_ptr<Session>& s) { return s.expired(); });
      session->ReadHeader();
      Accept();
    });
  }

  void CloseAll() {
    closing = true;
    std::error_code ignored;
    acceptor.close(ignored);
    backoff.cancel();
    for (auto& weak : sessions)
      if (auto s = weak.lock()) s->socket.close(ignored);
  }

  asio::io_context io;  // first: destroyed last
  tcp::acceptor acceptor{io};
  asio::steady_timer backoff{io};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::thread thread;
  std::mutex mu;
  bool started = false;  // guarded by mu
  bool stopped = false;  // guarded by mu
  // I/O thread only.
  std::vector<std::weak_ptr<Session>> sessions;
  bool closing = false;
};

ProbeServer::ProbeServer() : impl_(std::make_unique<Impl>()) {}

ProbeServer::~ProbeServer() { Stop(); }

StatusOr<int> ProbeServer::Start(const std::string& host, int port) {
  const std::string where = "probe server on " + host + ":" + std::to_string(port);
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->started || impl_->stopped) return FailedPrecondition(where + ": started before");
  std::error_code ec;
  tcp::resolver resolver(impl_->io);
  const auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec || endpoints.empty()) return Unavailable(where + ": cannot resolve: " + ec.message());
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  tcp::acceptor& acceptor = impl_->acceptor;
  if (acceptor.open(endpoint.protocol(), ec) || acceptor.set_option(tcp::acceptor::reuse_address(true), ec) ||
      acceptor.bind(endpoint, ec) || acceptor.listen(asio::socket_base::max_listen_connections, ec))
    return Unavailable(where + ": cannot listen: " + ec.message());
  const int bound = acceptor.local_endpoint(ec).port();
  impl_->started = true;
  impl_->work.emplace(impl_->io.get_executor());
  impl_->thread = std::thread([impl = impl_.get()] {
    try {
      impl->Accept();
      impl->io.run();
    } catch (const std::exception& e) {
      GD_LOG(ERROR) << "probe server thread: " << e.what();
    }
  });
  return bound;
}

void ProbeServer::Stop() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
  }
  if (!impl_->thread.joinable()) return;
  asio::post(impl_->io, [impl = impl_.get()] { impl->CloseAll(); });
  impl_->work.reset();
  impl_->thread.join();
}

}  // namespace geodesic::wan

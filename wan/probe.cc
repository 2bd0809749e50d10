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
#include "common/thread_annotations.h"

namespace geodesic::wan {
namespace {

using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;
using Time = SteadyClock::time_point;
using Header = std::array<uint8_t, 9>;

constexpr uint8_t kPing = 'P';
constexpr uint8_t kBulk = 'B';
constexpr uint8_t kAck = 'A';
constexpr uint64_t kMaxBulkBytes = static_cast<uint64_t>(kMaxProbeBulkBytes);

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

// One probe's connection: each phase starts asynchronous operations on the
// socket and runs them to completion, failure or the probe's deadline.
class ProbeClient {
 public:
  ProbeClient(std::string where, const ProbeOptions& options)
      : where_(std::move(where)),
        options_(options),
        deadline_(SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                           std::chrono::duration<double, std::milli>(options.timeout_ms))) {}

  Status Connect(const std::string& host, int port) {
    std::error_code ec;
    tcp::resolver resolver(io_);
    const auto endpoints = resolver.resolve(host, std::to_string(port), ec);
    if (ec) return Unavailable(where_ + ": cannot resolve: " + ec.message());
    asio::async_connect(socket_, endpoints, [this](std::error_code connect_ec, const tcp::endpoint&) {
      if (connect_ec) return Fail(connect_ec);
      done_ = true;
    });
    GD_RETURN_IF_ERROR(Run("connect"));
    socket_.set_option(tcp::no_delay(true), ec);
    return Status::Ok();
  }

  // Pings, sent on a schedule while the echoes are read: fills the RTTs.
  Status Pings(LinkMeasurement& m) {
    pings_ = options_.pings;
    first_ping_ = SteadyClock::now();
    sent_.assign(static_cast<size_t>(pings_), Time{});
    echoed_.assign(static_cast<size_t>(pings_), false);
    done_ = false;
    SendPing();
    ReadEcho();
    if (Status s = Run("pings"); !s.ok())
      return Status(s.code(), s.message() + " (" + std::to_string(rtts_.size()) + " of " + std::to_string(pings_) +
                                  " pings echoed)");
    m.rtt_ms = Median(rtts_);
    m.min_rtt_ms = *std::min_element(rtts_.begin(), rtts_.end());
    m.max_rtt_ms = *std::max_element(rtts_.begin(), rtts_.end());
    return Status::Ok();
  }

  // Bulk: n bytes out, one byte back once they have all arrived. Needs the
  // RTT (Pings) to take out of the transfer time.
  Status Bulk(LinkMeasurement& m) {
    const int64_t n = options_.bulk_bytes;
    const std::vector<uint8_t> bulk(static_cast<size_t>(n));
    const Header bulk_header = Encode(kBulk, static_cast<uint64_t>(n));
    const std::array<asio::const_buffer, 2> buffers = {asio::buffer(bulk_header), asio::buffer(bulk)};
    uint8_t ack = 0;
    bool written = false;
    Time acked{};
    done_ = false;
    const Time start = SteadyClock::now();
    asio::async_write(socket_, buffers, [&](std::error_code write_ec, size_t) {
      if (write_ec) return Fail(write_ec);
      written = true;
      done_ = acked != Time{};
    });
    asio::async_read(socket_, asio::buffer(&ack, 1), [&](std::error_code read_ec, size_t) {
      if (read_ec) return Fail(read_ec);
      if (ack != kAck) return Fail(asio::error::make_error_code(asio::error::invalid_argument));
      acked = SteadyClock::now();
      done_ = written;
    });
    GD_RETURN_IF_ERROR(Run("bulk transfer of " + std::to_string(n) + " bytes"));
    m.bulk_bytes = n;
    m.bulk_ms = MsBetween(start, acked);
    // Guards against a transfer shorter than the RTT's noise (bulk_bytes too
    // small for the link): the figure is then an overestimate.
    const double transfer_ms = std::max(m.bulk_ms - m.rtt_ms, 0.05 * m.bulk_ms);
    m.mbit = static_cast<double>(n) * 8 / (transfer_ms * 1e3);
    return Status::Ok();
  }

 private:
  void Fail(std::error_code ec) {
    if (!failure_) failure_ = ec;
    done_ = true;
    timer_.cancel();
  }

  Status Run(const std::string& phase) {
    auto abort = [this] {
      std::error_code ignored;
      socket_.close(ignored);
      timer_.cancel();
    };
    GD_RETURN_IF_ERROR(RunUntil(io_, done_, deadline_, abort, where_ + ": " + phase, options_.timeout_ms));
    if (failure_) return Unavailable(where_ + ": " + phase + ": " + failure_.message());
    return Status::Ok();
  }

  void SendPing() {
    out_ = Encode(kPing, static_cast<uint64_t>(next_ping_));
    sent_[static_cast<size_t>(next_ping_++)] = SteadyClock::now();
    asio::async_write(socket_, asio::buffer(out_), [this](std::error_code write_ec, size_t) {
      if (write_ec) return Fail(write_ec);
      if (next_ping_ == pings_ || done_) return;
      timer_.expires_at(first_ping_ +
                        std::chrono::duration_cast<SteadyClock::duration>(
                            std::chrono::duration<double, std::milli>(options_.ping_interval_ms * next_ping_)));
      timer_.async_wait([this](std::error_code wait_ec) {
        if (!wait_ec && !done_) SendPing();
      });
    });
  }

  void ReadEcho() {
    asio::async_read(socket_, asio::buffer(in_), [this](std::error_code read_ec, size_t) {
      if (read_ec) return Fail(read_ec);
      const uint64_t seq = ValueOf(in_);
      if (in_[0] != kPing || seq >= static_cast<uint64_t>(next_ping_) || echoed_[seq])
        return Fail(asio::error::make_error_code(asio::error::invalid_argument));
      echoed_[seq] = true;
      rtts_.push_back(MsBetween(sent_[seq], SteadyClock::now()));
      if (static_cast<int>(rtts_.size()) == pings_) {
        done_ = true;
      } else {
        ReadEcho();
      }
    });
  }

  const std::string where_;
  const ProbeOptions options_;
  const Time deadline_;
  asio::io_context io_;
  tcp::socket socket_{io_};
  asio::steady_timer timer_{io_};
  std::error_code failure_;  // the first failed operation
  bool done_ = false;
  // Pings.
  int pings_ = 0, next_ping_ = 0;
  Time first_ping_{};
  std::vector<Time> sent_;
  std::vector<bool> echoed_;
  std::vector<double> rtts_;
  Header out_{}, in_{};
};

}  // namespace

StatusOr<LinkMeasurement> ProbeLink(const std::string& host, int port, const ProbeOptions& options) {
  const std::string where = "probe of " + host + ":" + std::to_string(port);
  if (options.pings < 1 || options.ping_interval_ms < 0 || options.bulk_bytes < 0 ||
      static_cast<uint64_t>(options.bulk_bytes) > kMaxBulkBytes || options.timeout_ms <= 0)
    return InvalidArgument(where +
                           ": need pings >= 1, ping_interval_ms >= 0, 0 <= bulk_bytes <= 1 GiB, timeout_ms > 0");
  ProbeClient client(where, options);
  GD_RETURN_IF_ERROR(client.Connect(host, port));
  LinkMeasurement m;
  GD_RETURN_IF_ERROR(client.Pings(m));
  if (options.bulk_bytes == 0) return m;
  GD_RETURN_IF_ERROR(client.Bulk(m));
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
  Mutex mu;
  bool started GD_GUARDED_BY(mu) = false;
  bool stopped GD_GUARDED_BY(mu) = false;
  // I/O thread only.
  std::vector<std::weak_ptr<Session>> sessions;
  bool closing = false;
};

ProbeServer::ProbeServer() : impl_(std::make_unique<Impl>()) {}

ProbeServer::~ProbeServer() { Stop(); }

StatusOr<int> ProbeServer::Start(const std::string& host, int port) {
  const std::string where = "probe server on " + host + ":" + std::to_string(port);
  MutexLock lock(impl_->mu);
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
    MutexLock lock(impl_->mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
  }
  if (!impl_->thread.joinable()) return;
  asio::post(impl_->io, [impl = impl_.get()] { impl->CloseAll(); });
  impl_->work.reset();
  impl_->thread.join();
}

}  // namespace geodesic::wan

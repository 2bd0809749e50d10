#include "transport/http_endpoint.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstring>
#include <list>
#include <map>
#include <sstream>
#include <unordered_map>

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include <thread>

#include <openssl/crypto.h>
#include <prometheus/text_serializer.h>
#include <asio.hpp>

#include "common/files.h"
#include "common/log.h"

namespace geodesic::transport {

void MetricsSnapshot::Publish(std::vector<prometheus::MetricFamily> families) {
  MutexLock lock(mu_);
  families_ = std::move(families);
  published_ = true;
  ++generation_;
}

std::string MetricsSnapshot::Text() const {
  std::ostringstream out;
  MutexLock lock(mu_);
  prometheus::TextSerializer().Serialize(out, families_);
  served_ = generation_;
  return out.str();
}

void MetricsSnapshot::AwaitFinalScrape(double max_s) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(max_s);
  while (std::chrono::steady_clock::now() < deadline) {
    {
      MutexLock lock(mu_);
      if (served_ == generation_) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool MetricsSnapshot::published() const {
  MutexLock lock(mu_);
  return published_;
}

namespace {

using tcp = asio::ip::tcp;

constexpr size_t kMaxHeader = 16384;  // request line and headers

std::string StatusText(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Error";
  }
}

std::chrono::milliseconds Ms(double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); }

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

struct Exchange;

// The open connections of one source address: those still sending their
// head, oldest first (the ones eviction takes), and how many in all.
struct Source {
  std::list<Exchange*> reading;
  int total = 0;
};

}  // namespace

// The connection table (Admit, Release) is the io thread's alone.
struct HttpEndpoint::Impl {
  // First: they outlive the io_context, whose destructor destroys the
  // exchanges its handlers still hold, and they unregister here.
  int open = 0;
  std::unordered_map<std::string, Source> sources;
  Mutex mu;
  HttpEndpointCounts counts GD_GUARDED_BY(mu);  // io thread writes; counts() reads
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::thread thread;
  HttpEndpointOptions options;
  const MetricsSnapshot* metrics = nullptr;
  std::map<std::string, HttpHandler> handlers GD_GUARDED_BY(mu);

  HttpResponse Answer(const HttpRequest& r) {
    if (r.method != "GET" && r.method != "HEAD") return {.status = 405, .body = "only GET and HEAD\n"};
    HttpHandler h;
    {
      MutexLock lock(mu);
      auto it = handlers.find(r.path);
      if (it != handlers.end()) h = it->second;
    }
    if (!h) return {.status = 404, .body = "not found\n"};
    return h(r);
  }

  void Accept() {
    acceptor.async_accept([this](std::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) Admit(std::move(socket));
      Accept();
    });
  }

  void Admit(tcp::socket socket);
  bool EvictOldestReading(const std::string& source);
  const std::string* BusiestSource() const;
  void Release(Exchange* x);
  void HeadDone(Exchange* x);
  void Count(uint64_t HttpEndpointCounts::*what) {
    MutexLock lock(mu);
    ++(counts.*what);
  }
};

namespace {

// One request on one connection: read the head (bounded in size and
// time), answer, close. Registered in the endpoint's table from Start
// until it is destroyed or evicted.
struct Exchange : std::enable_shared_from_this<Exchange> {
  Exchange(HttpEndpoint::Impl* e, tcp::socket s, std::string from)
      : endpoint(e), socket(std::move(s)), timer(e->io), head(kMaxHeader), source(std::move(from)) {}
  ~Exchange() { endpoint->Release(this); }

  void Start() {
    Source& s = endpoint->sources[source];
    position = s.reading.insert(s.reading.end(), this);
    ++s.total;
    ++endpoint->open;
    registered = reading = true;
    timer.expires_after(Ms(endpoint->options.head_timeout_s));
    timer.async_wait([self = shared_from_this()](std::error_code ec) {
      if (ec) return;
      if (self->reading) self->endpoint->Count(&HttpEndpointCounts::head_timeouts);
      self->socket.close(ec);
    });
    asio::async_read_until(socket, head, "\r\n\r\n", [self = shared_from_this()](std::error_code ec, size_t) {
      if (ec == asio::error::not_found) return self->Reply("", {.status = 431, .body = "headers too large\n"});
      if (ec) return self->timer.cancel(), void();
      self->Respond();
    });
  }

  // Closed to make room for a newcomer (the io thread's table).
  void Evict() {
    std::error_code ignored;
    socket.close(ignored);
    timer.cancel();
    endpoint->Release(this);
  }

  void Respond() {
    std::istream in(&head);
    HttpRequest r;
    std::string target, version, line;
    in >> r.method >> target >> version;
    if (!version.starts_with("HTTP/")) return Reply(r.method, {.status = 400, .body = "not HTTP/1.x\n"});
    if (version != "HTTP/1.1" && version != "HTTP/1.0")
      return Reply(r.method, {.status = 505, .body = "only HTTP/1.0 and HTTP/1.1\n"});
    const size_t query = target.find('?');
    r.path = target.substr(0, query);
    if (query != std::string::npos) r.query = target.substr(query + 1);
    std::getline(in, line);
    while (std::getline(in, line) && line != "\r") {
      const size_t colon = line.find(':');
      if (colon == std::string::npos || Lower(line.substr(0, colon)) != "authorization") continue;
      const size_t from = line.find_first_not_of(" \t", colon + 1), to = line.find_last_not_of(" \t\r");
      r.authorization = from == std::string::npos || to < from ? "" : line.substr(from, to - from + 1);
    }
    Reply(r.method, endpoint->Answer(r));
  }

  void Reply(const std::string& method, HttpResponse r) {
    endpoint->HeadDone(this);
    timer.expires_after(Ms(endpoint->options.reply_timeout_s));
    timer.async_wait([self = shared_from_this()](std::error_code ec) {
      if (!ec) self->socket.close(ec);
    });
    out = "HTTP/1.1 " + std::to_string(r.status) + " " + StatusText(r.status) + "\r\nContent-Type: " + r.content_type +
          "\r\nContent-Length: " + std::to_string(r.body.size()) +
          (r.status == 401 ? "\r\nWWW-Authenticate: Bearer" : "") +
          "\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n";
    if (method != "HEAD") out += r.body;
    asio::async_write(socket, asio::buffer(out), [self = shared_from_this()](std::error_code, size_t) {
      std::error_code ignored;
      self->socket.shutdown(tcp::socket::shutdown_both, ignored);
      self->socket.close(ignored);
      self->timer.cancel();
    });
  }

  HttpEndpoint::Impl* endpoint;
  tcp::socket socket;
  asio::steady_timer timer;
  asio::streambuf head;
  std::string out;
  const std::string source;
  std::list<Exchange*>::iterator position;  // in the source's `reading`, while reading
  bool registered = false, reading = false;
};

}  // namespace

// A newcomer always gets a place: beyond its source's share it takes that
// of its source's oldest incomplete connection; in a full table, that of
// the busiest source's. Only when every such connection is already
// answering (written within reply_timeout_s) is the newcomer closed.
void HttpEndpoint::Impl::Admit(tcp::socket socket) {
  std::error_code ec;
  const tcp::endpoint peer = socket.remote_endpoint(ec);
  if (ec) return;  // gone already
  std::string source = peer.address().to_string();
  auto mine = sources.find(source);
  bool room = true;
  if (mine != sources.end() && mine->second.total >= options.max_per_source) {
    room = EvictOldestReading(source);
  } else if (open >= options.max_connections) {
    const std::string* busiest = BusiestSource();
    room = busiest && EvictOldestReading(*busiest);
  }
  if (!room) return Count(&HttpEndpointCounts::refused);  // the socket closes here
  std::make_shared<Exchange>(this, std::move(socket), std::move(source))->Start();
}

bool HttpEndpoint::Impl::EvictOldestReading(const std::string& source) {
  auto it = sources.find(source);
  if (it == sources.end() || it->second.reading.empty()) return false;
  Count(&HttpEndpointCounts::evicted);  // before the close a peer may see
  it->second.reading.front()->Evict();  // may erase `it`
  return true;
}

// The source with the most connections among those with one still reading.
const std::string* HttpEndpoint::Impl::BusiestSource() const {
  const std::string* best = nullptr;
  int most = 0;
  for (const auto& [address, s] : sources)
    if (!s.reading.empty() && s.total > most) best = &address, most = s.total;
  return best;
}

void HttpEndpoint::Impl::HeadDone(Exchange* x) {
  if (!x->registered || !x->reading) return;
  sources[x->source].reading.erase(x->position);
  x->reading = false;
}

void HttpEndpoint::Impl::Release(Exchange* x) {
  if (!x->registered) return;
  HeadDone(x);
  x->registered = false;
  --open;
  auto it = sources.find(x->source);
  if (it != sources.end() && --it->second.total <= 0) sources.erase(it);
}

Status CheckHttpBind(const std::string& bind) {
  const size_t colon = bind.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == bind.size())
    return InvalidArgument("HTTP bind \"" + bind + "\" is not host:port (e.g. 127.0.0.1:0)");
  const std::string host = bind.substr(0, colon), port = bind.substr(colon + 1);
  int p = -1;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (ec != std::errc() || end != port.data() + port.size() || p < 0 || p > 65535)
    return InvalidArgument("HTTP bind \"" + bind + "\": the port must be 0..65535");
  if (host.find_first_of("/ ,") != std::string::npos)
    return InvalidArgument("HTTP bind \"" + bind + "\": the host must be an address or a name");
  return Status::Ok();
}

bool BearerMatches(const std::string& authorization, const std::string& token) {
  if (token.empty() || authorization.size() < 7 || Lower(authorization.substr(0, 7)) != "bearer ") return false;
  const std::string given = authorization.substr(7);
  return given.size() == token.size() && CRYPTO_memcmp(given.data(), token.data(), token.size()) == 0;
}

StatusOr<std::string> ReadMetricsToken(const std::string& file) {
  GD_ASSIGN_OR_RETURN(std::string text, ReadFile(file));
  std::string token = text.substr(0, text.find_first_of("\r\n"));
  if (token.size() < 16 || token.find_first_of(" \t") != std::string::npos)
    return InvalidArgument("metrics token file " + file +
                           ": its first line must be a token of 16 characters or more, without spaces");
  return token;
}

namespace {

// Answers /metrics, /healthz and /readyz; /metrics only with the token, if one is set.
void HandleDefaults(HttpEndpoint& e, HttpEndpoint::Impl* impl) {
  e.Handle("/metrics", [impl](const HttpRequest& r) {
    const std::string& token = impl->options.metrics_token;
    if (!token.empty() && !BearerMatches(r.authorization, token))
      return HttpResponse{.status = 401, .body = "a bearer token is required (Authorization: Bearer T)\n"};
    return HttpResponse{.content_type = "text/plain; version=0.0.4; charset=utf-8", .body = impl->metrics->Text()};
  });
  e.Handle("/healthz", [](const HttpRequest&) { return HttpResponse{.body = "ok\n"}; });
  e.Handle("/readyz", [impl](const HttpRequest&) {
    const bool ready = impl->options.ready ? impl->options.ready() : impl->metrics->published();
    return ready ? HttpResponse{.body = "ready\n"} : HttpResponse{.status = 503, .body = "not ready\n"};
  });
}

}  // namespace

StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(HttpEndpointOptions options,
                                                            const MetricsSnapshot* metrics) {
  GD_RETURN_IF_ERROR(CheckHttpBind(options.bind));
  if (options.max_connections < 1 || options.max_per_source < 1 || options.head_timeout_s <= 0 ||
      options.reply_timeout_s <= 0)
    return InvalidArgument("HTTP endpoint: connection bounds and timeouts must be positive");
  std::unique_ptr<HttpEndpoint> e(new HttpEndpoint());
  e->impl_ = std::make_unique<Impl>();
  Impl& impl = *e->impl_;
  impl.options = std::move(options);
  impl.metrics = metrics;
  HandleDefaults(*e, &impl);
  const size_t colon = impl.options.bind.rfind(':');
  const std::string host = impl.options.bind.substr(0, colon), port = impl.options.bind.substr(colon + 1);
  std::error_code ec;
  tcp::resolver resolver(impl.io);
  auto where = resolver.resolve(host, port, ec);
  if (!ec && where.empty()) ec = asio::error::host_not_found;
  if (!ec) impl.acceptor.open(where->endpoint().protocol(), ec);
  if (!ec) impl.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl.acceptor.bind(where->endpoint(), ec);
  // The kernel's longest queue: connections wait there only until the io
  // thread accepts them, which a flood of connects must not crowd out.
  if (!ec) impl.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Unavailable("cannot serve HTTP on " + impl.options.bind + ": " + ec.message());
  e->address_ = host + ":" + std::to_string(impl.acceptor.local_endpoint().port());
  impl.Accept();
  Impl* raw = &impl;
  impl.thread = std::thread([raw] { raw->io.run(); });
  return e;
}

HttpEndpoint::~HttpEndpoint() {
  if (!impl_) return;
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

void HttpEndpoint::Handle(const std::string& path, HttpHandler handler) {
  MutexLock lock(impl_->mu);
  impl_->handlers[path] = std::move(handler);
}

HttpEndpointCounts HttpEndpoint::counts() const {
  MutexLock lock(impl_->mu);
  return impl_->counts;
}

namespace {

using Deadline = std::chrono::steady_clock::time_point;

int MsLeft(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::max<int64_t>(0, left.count()));
}

// A connected TCP socket to host:port by `deadline` (a probe's timeout
// covers its connect), or an error.
StatusOr<int> Connect(const std::string& address, Deadline deadline) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return InvalidArgument("not host:port: " + address);
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(address.substr(0, colon).c_str(), address.substr(colon + 1).c_str(), &hints, &res) != 0 || !res)
    return Unavailable("cannot resolve " + address);
  const int fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int rc = fd < 0 ? -1 : connect(fd, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (rc != 0 && fd >= 0 && errno == EINPROGRESS) {
    pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
    int error = 0;
    socklen_t len = sizeof(error);
    if (poll(&p, 1, MsLeft(deadline)) <= 0) {
      close(fd);
      return DeadlineExceeded("cannot connect to " + address + " in time");
    }
    rc = getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error == 0 ? 0 : -1;
    if (error != 0) errno = error;
  }
  if (rc != 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) close(fd);
    return Unavailable("cannot connect to " + address + ": " + why);
  }
  return fd;
}

// A chunked body ("1a\r\n<26 bytes>\r\n...0\r\n\r\n") joined; what
// does not parse ends it.
std::string Dechunk(const std::string& in) {
  std::string out;
  size_t at = 0;
  while (at < in.size()) {
    const size_t eol = in.find("\r\n", at);
    if (eol == std::string::npos) break;
    const size_t n = std::strtoul(in.substr(at, eol - at).c_str(), nullptr, 16);
    if (n == 0 || eol + 2 + n > in.size()) break;
    out.append(in, eol + 2, n);
    at = eol + 2 + n + 2;
  }
  return out;
}

// Parses "HTTP/1.1 200 OK\r\n...\r\n\r\nbody".
StatusOr<HttpResponse> ParseResponse(const std::string& raw, const std::string& address) {
  HttpResponse r;
  const size_t sp = raw.find(' '), end = raw.find("\r\n\r\n");
  if (raw.compare(0, 5, "HTTP/") != 0 || sp == std::string::npos || end == std::string::npos)
    return Unavailable("not an HTTP response from " + address);
  r.status = std::atoi(raw.c_str() + sp + 1);
  r.body = raw.substr(end + 4);
  std::string head = raw.substr(0, end);
  std::transform(head.begin(), head.end(), head.begin(), [](unsigned char c) { return std::tolower(c); });
  if (head.find("transfer-encoding: chunked") != std::string::npos) r.body = Dechunk(r.body);
  const size_t ct = raw.find("Content-Type: ");
  if (ct != std::string::npos && ct < end) r.content_type = raw.substr(ct + 14, raw.find("\r\n", ct) - ct - 14);
  return r;
}

}  // namespace

StatusOr<HttpResponse> HttpGet(const std::string& address, const std::string& path, double timeout_s,
                               const std::string& bearer) {
  const Deadline deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s));
  GD_ASSIGN_OR_RETURN(int fd, Connect(address, deadline));
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: " + address +
                              (bearer.empty() ? "" : "\r\nAuthorization: Bearer " + bearer) +
                              "\r\nConnection: close\r\n\r\n";
  std::string raw;
  bool sent = send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size());
  while (sent) {
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    if (poll(&p, 1, MsLeft(deadline)) <= 0) {
      close(fd);
      return DeadlineExceeded("GET " + path + " from " + address + ": no answer in " + std::to_string(timeout_s) +
                              " s");
    }
    char buf[16384];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  if (!sent) return Unavailable("GET " + path + " from " + address + ": send failed");
  return ParseResponse(raw, address);
}

Status WriteHttpAddress(const HttpEndpoint& endpoint, const std::string& file) {
  if (file.empty()) return Status::Ok();
  return WriteFileAtomic(file, endpoint.address());
}

void ProcessMetrics::Linger(const HttpOptions& o, bool finished) const {
  if (endpoint_ && o.linger_s > 0) snapshot_.AwaitFinalScrape(o.linger_s);
  if (!finished || !o.hold_until || o.hold_until->load()) return;
  GD_LOG(INFO) << "finished; holding until stopped (--hold-after-exit)";
  while (!o.hold_until->load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

Status ProcessMetrics::Start(const HttpOptions& options, std::function<bool()> ready) {
  if (options.bind.empty()) return Status::Ok();
  HttpEndpointOptions o;
  o.bind = options.bind;
  // Ready once the role says so and its metrics are there to scrape.
  o.ready = [this, ready = std::move(ready)] { return snapshot_.published() && (!ready || ready()); };
  if (!options.metrics_token_file.empty()) {
    GD_ASSIGN_OR_RETURN(o.metrics_token, ReadMetricsToken(options.metrics_token_file));
  }
  GD_ASSIGN_OR_RETURN(endpoint_, HttpEndpoint::Start(std::move(o), &snapshot_));
  return WriteHttpAddress(*endpoint_, options.address_file);
}

}  // namespace geodesic::transport

// HttpEndpoint: a process's small HTTP server for Prometheus' /metrics and
// the /healthz (alive) and /readyz (joined and serving) probes. It runs on
// one thread of its own (Asio, asynchronous), never on a role's event
// loop: a handler only reads what the loop last published
// (MetricsSnapshot), so a slow or hostile HTTP client costs that thread
// and nothing else, and thousands of idle connections cost no threads.
//
// Bounds (HttpEndpointOptions; docs/security.md "HTTP endpoints"): a
// request head over 16 KiB is answered 431, a head not complete in 2 s is
// dropped, an answer not written in 5 s too; no keep-alive; GET and HEAD
// only, HTTP/1.0 and 1.1 only (505 for other versions). At most 256
// connections are open, at most 64 from one source address. A newcomer
// beyond either bound is not refused: it takes the place of the oldest
// connection still sending its head, from its own source when that source
// is at its share, else from the source holding the most. So a client
// whose request arrives complete at once (a probe, a scrape) is served
// however many incomplete requests others keep open (a slowloris), and a
// source can only churn its own share. It binds loopback unless told
// otherwise. With a metrics token, /metrics answers only requests that
// carry it (`Authorization: Bearer T`, compared in constant time; 401
// otherwise); /healthz and /readyz stay open: they tell only alive and ready.
//
// Not civetweb (Debian's, or prometheus-cpp's pull exposer built on it):
// it starts its threads with a 100 KB stack, and in a process that links
// LibTorch, whose static TLS does not fit in that, pthread_create fails.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <prometheus/metric_family.h>

#include "common/status.h"
#include "common/thread_annotations.h"

namespace geodesic::transport {

// What a handler answers.
struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;  // a 401 goes out with `WWW-Authenticate: Bearer`
};

// What a handler is asked: GET or HEAD, the path without the query.
struct HttpRequest {
  std::string method;
  std::string path;
  std::string query;          // after '?', undecoded; empty if none
  std::string authorization;  // the Authorization header's value, if any
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

// The latest metric families a role published, for the HTTP threads.
class MetricsSnapshot {
 public:
  void Publish(std::vector<prometheus::MetricFamily> families);
  // Prometheus' text exposition format (version 0.0.4).
  std::string Text() const;
  bool published() const;
  // At exit: waits until a Text() has been served since the last Publish
  // (a final scrape), or `max_s` passed.
  void AwaitFinalScrape(double max_s) const;

 private:
  mutable Mutex mu_;
  std::vector<prometheus::MetricFamily> families_ GD_GUARDED_BY(mu_);
  bool published_ GD_GUARDED_BY(mu_) = false;
  uint64_t generation_ GD_GUARDED_BY(mu_) = 0;
  mutable uint64_t served_ GD_GUARDED_BY(mu_) = 0;
};

struct HttpEndpointOptions {
  std::string bind = "127.0.0.1:0";  // host:port; port 0 picks a free one
  // /readyz answers 200 when this says so (default: once metrics are published).
  std::function<bool()> ready;
  // Set: /metrics requires `Authorization: Bearer <metrics_token>`.
  std::string metrics_token;
  int max_connections = 256;   // open at once
  int max_per_source = 64;     // open at once from one source address
  double head_timeout_s = 2;   // the request line and headers, from the accept
  double reply_timeout_s = 5;  // the answer, from the end of the head
};

// What an endpoint did to bound its connections (io thread's counts).
struct HttpEndpointCounts {
  uint64_t evicted = 0;        // incomplete connections closed to make room for a newcomer
  uint64_t refused = 0;        // newcomers closed at once (no incomplete connection to evict)
  uint64_t head_timeouts = 0;  // heads not complete within head_timeout_s
};

class HttpEndpoint {
 public:
  // Starts serving /metrics from `metrics` (kept alive by the caller).
  static StatusOr<std::unique_ptr<HttpEndpoint>> Start(HttpEndpointOptions options, const MetricsSnapshot* metrics);
  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  // "host:port" as bound (the port picked when 0 was asked).
  const std::string& address() const { return address_; }
  // Adds a handler for GET `path` (exact match); before or after Start.
  void Handle(const std::string& path, HttpHandler handler);
  HttpEndpointCounts counts() const;

  struct Impl;

 private:
  HttpEndpoint() = default;
  std::unique_ptr<Impl> impl_;
  std::string address_;
};

// "127.0.0.1:0" -> ok; refuses what civetweb would misread (no port, a
// port out of range, a path, a scheme).
Status CheckHttpBind(const std::string& bind);

// A plain HTTP/1.1 GET of `path` from "host:port" (IPv4), for probes and
// tests, with `Authorization: Bearer <bearer>` if that is set: the status
// and body, or Unavailable / DeadlineExceeded.
StatusOr<HttpResponse> HttpGet(const std::string& address, const std::string& path, double timeout_s = 5,
                               const std::string& bearer = "");

// Whether an Authorization header's value is `Bearer <token>` (the scheme
// in any case), compared in constant time; never for an empty token.
bool BearerMatches(const std::string& authorization, const std::string& token);

// A metrics token from `file`: its first line, at least 16 characters.
StatusOr<std::string> ReadMetricsToken(const std::string& file);

// Writes the bound address to `file` (atomically) when `file` is set.
Status WriteHttpAddress(const HttpEndpoint& endpoint, const std::string& file);

// Where a process serves its metrics: a role's options carry one.
struct HttpOptions {
  std::string bind;          // host:port; empty: no endpoint
  std::string address_file;  // if set, the bound host:port is written here
  // If set, /metrics requires the bearer token in this file (its first
  // line; ReadMetricsToken): secured jobs (docs/observability.md).
  std::string metrics_token_file;
  // At exit, keep serving until the final metrics were scraped once, for
  // at most this long (s): Prometheus then holds the process's last counts.
  double linger_s = 0;
  // --hold-after-exit: after a successful end, keep serving (/healthz, the
  // final metrics) until this is set (SIGTERM), rather than exit: a
  // Kubernetes StatefulSet starts a process that exits again, finished or
  // not, so the rendered StatefulSets hold. Null: exit at once.
  const std::atomic<bool>* hold_until = nullptr;
};

// A process's metrics and their endpoint: the role's loop publishes (only
// when serving(): with no endpoint it need not build the families), the
// endpoint's thread serves.
class ProcessMetrics {
 public:
  // Starts the endpoint if `options.bind` is set; `ready` answers /readyz.
  Status Start(const HttpOptions& options, std::function<bool()> ready);
  void Publish(std::vector<prometheus::MetricFamily> families) { snapshot_.Publish(std::move(families)); }
  bool serving() const { return endpoint_ != nullptr; }
  // Waits (at exit, after the final Publish) until they were scraped, or
  // `o.linger_s` passed (at once with no endpoint); then, if the process
  // `finished` well and `o.hold_until` is set, until that is set.
  void Linger(const HttpOptions& o, bool finished) const;
  HttpEndpoint* endpoint() { return endpoint_.get(); }

 private:
  MetricsSnapshot snapshot_;
  std::unique_ptr<HttpEndpoint> endpoint_;
};

}  // namespace geodesic::transport

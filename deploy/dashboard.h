// Dashboard: the launcher's live view of a job in a browser, and the
// launcher's own /metrics (the emulated links). Served on loopback by
// default (`geodesic launch --dashboard HOST:PORT`; the URL is printed and
// written to RUN_DIR/http/dashboard). The page (deploy/dashboard_page.cc)
// is plain HTML and JavaScript, no library and nothing fetched from
// anywhere but the launcher; it polls /api/state once a second.
//
// What it shows comes from what the launcher already watches: the
// coordinator's status replies (workers' clocks, throughput, step-time
// split, passive link estimates; shards' load and staleness), the shards'
// stats files (chunks, the staleness histogram), the emulated links'
// bytes and probes, and the launcher's event lines (joins, exits,
// failovers, cuts, re-plans).
//
// Secured jobs (security.mode: curve): off unless given a token; then every
// request must carry it (`Authorization: Bearer T`, or a query parameter
// named exactly `token`, `?token=T`, for the page itself, which passes it
// on). The URL it reports never carries the token (the launcher prints it on
// stdout, which logs keep). /metrics also takes the job's metrics token
// (RUN_DIR/metrics.token) as a bearer token, so that one Prometheus
// credential scrapes every process of the job and the launcher.
//
// Threads: Update* and Event are the launcher thread's; the endpoint's
// thread reads only the JSON and metric families they last published.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "config/job.h"
#include "deploy/run_dir.h"
#include "proto/geodesic.pb.h"
#include "transport/http_endpoint.h"

namespace geodesic::deploy {

struct DashboardOptions {
  std::string bind = "127.0.0.1:0";  // host:port; empty: no dashboard
  std::string token;                 // required of every request when set
  std::string metrics_token;         // also admits /metrics (Authorization: Bearer only)
};

class Dashboard {
 public:
  static StatusOr<std::unique_ptr<Dashboard>> Start(const JobSpec& job, const RunDir& dir, DashboardOptions options);

  // "http://host:port/", never with the token (add ?token=T to open it
  // when one is required).
  std::string url() const;
  bool requires_token() const { return !options_.token.empty(); }
  const std::string& address() const { return endpoint_->address(); }

  // A status reply from the coordinator, with the smoothed samples/s.
  void UpdateStatus(const wire::StatusReply& st, double samples_per_s);
  // The emulated links: their probes (once) and bytes so far ({from, to, bytes}).
  void UpdateLinks(const nlohmann::json& probes, const nlohmann::json& traffic);
  // One event line, as the terminal shows it.
  void Event(const std::string& text);
  // The job's end: its status, the final scores the summary has
  // (test_accuracy, test_loss, test_perplexity) and the summary's links
  // (their final bytes).
  void Finish(const std::string& status, const nlohmann::json& summary, const nlohmann::json& links);
  // Waits until the final metrics were scraped, at most `max_s`.
  void Linger(double max_s) const;

  // Published state, as /api/state serves it (for tests).
  std::string StateJson() const;

  // Whether someone was served the page, /api/state or /metrics (with the
  // token where one is required) within the last `within_s` seconds: the
  // launcher reads the kernel links' counters for the dashboard only then.
  bool Watched(double within_s) const;

 private:
  Dashboard(const JobSpec& job, const RunDir& dir, DashboardOptions options);
  void ReadShardStats();
  // Each registered aggregator: live or not, and the counts of its stats file.
  nlohmann::json AggregatorsJson(const wire::StatusReply& st) const;
  void Publish();
  transport::HttpResponse Guard(const transport::HttpRequest& r, transport::HttpResponse ok,
                                bool metrics = false) const;

  JobSpec job_;
  RunDir dir_;
  DashboardOptions options_;
  double started_ = 0;  // unix seconds
  nlohmann::json state_;
  std::deque<nlohmann::json> history_, events_;
  double last_history_ = -1, last_stats_read_ = -1;
  mutable Mutex mu_;
  std::string published_ GD_GUARDED_BY(mu_);
  transport::MetricsSnapshot metrics_;
  std::unique_ptr<transport::HttpEndpoint> endpoint_;
  mutable std::atomic<int64_t> last_served_ms_{-1};  // steady clock; -1: never
};

// The value of the query parameter named exactly `name` in `query` (the
// part after '?', undecoded), percent-decoded; empty if absent.
std::string QueryParameter(const std::string& query, const std::string& name);

// The page: HTML with its script inline.
const std::string& DashboardPage();

}  // namespace geodesic::deploy

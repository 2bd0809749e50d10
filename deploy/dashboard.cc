#include "deploy/dashboard.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <openssl/crypto.h>

#include "common/files.h"
#include "deploy/process_id.h"
#include "proto/stats.pb.h"
#include "proto/stats_json.h"
#include "transport/metrics.h"

namespace geodesic::deploy {

using json = nlohmann::json;

namespace {

constexpr size_t kHistory = 3600;  // points of the curves (one a second at most)
constexpr size_t kEvents = 200;

double Now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

json WorkerJson(const wire::WorkerStatus& w) {
  const wire::WorkerProgress& p = w.progress();
  json links = json::array();
  for (const auto& l : p.links())
    links.push_back({{"server_region", l.server_region()}, {"min_rtt_ms", l.min_rtt_ms()}, {"mbit", l.mbit()}});
  return {{"id", w.id()},
          {"region", w.region()},
          {"live", w.live()},
          {"done", w.done()},
          {"clock", w.clock()},
          {"steps", p.steps()},
          {"target_steps", p.target_steps()},
          {"samples", p.samples()},
          {"loss", p.loss()},
          {"train_accuracy", p.train_accuracy()},
          {"compute_s", p.compute_seconds()},
          {"comm_s", p.comm_seconds()},
          {"wait_s", p.wait_seconds()},
          {"links", links}};
}

json ShardJson(const wire::ServerStatus& s, bool backup) {
  const wire::ServerProgress& p = s.progress();
  return {{"id", s.id()},
          {"region", s.region()},
          {"live", s.live()},
          {"backup", backup},
          {"promoted", p.promoted()},
          {"updates", p.updates_applied()},
          {"staleness_mean", p.staleness_mean()},
          {"staleness_max", p.staleness_max()},
          {"held_pulls", p.held_pulls()},
          {"refused", p.messages_refused()}};
}

// Means over the live workers that have trained: accuracy, loss (-1: none
// reported; models with their own loss may measure no accuracy).
std::pair<double, double> MeanProgress(const json& workers) {
  double acc = 0, loss = 0;
  int accurate = 0, reporting = 0;
  for (const auto& w : workers) {
    if (w["steps"].get<int64_t>() == 0 || w["loss"].get<double>() < 0) continue;
    loss += w["loss"].get<double>(), ++reporting;
    if (w["train_accuracy"].get<double>() >= 0) acc += w["train_accuracy"].get<double>(), ++accurate;
  }
  return {accurate ? acc / accurate : -1.0, reporting ? loss / reporting : -1.0};
}

}  // namespace

Dashboard::Dashboard(const JobSpec& job, const RunDir& dir, DashboardOptions options)
    : job_(job), dir_(dir), options_(std::move(options)), started_(Now()) {
  json links = json::array();
  for (const LinkSpec& l : job.wan.links)
    links.push_back({{"from", l.from}, {"to", l.to}, {"delay_ms", l.delay_ms}, {"bandwidth_mbit", l.bandwidth_mbit}});
  json regions = json::array();
  for (const RegionSpec& r : job.regions) regions.push_back(r.name);
  state_ = {{"job", job.name},
            {"status", "starting"},
            {"regions", regions},
            {"links", links},
            {"workers", json::array()},
            {"shards", json::array()},
            {"aggregators", json::array()},
            {"staleness", json::object()},
            {"staleness_bound", job.training.staleness_bound},
            {"elapsed_s", 0.0},
            {"samples_per_s", 0.0}};
}

StatusOr<std::unique_ptr<Dashboard>> Dashboard::Start(const JobSpec& job, const RunDir& dir, DashboardOptions options) {
  std::unique_ptr<Dashboard> d(new Dashboard(job, dir, std::move(options)));
  transport::HttpEndpointOptions o;
  o.bind = d->options_.bind;
  o.ready = [] { return true; };
  GD_ASSIGN_OR_RETURN(d->endpoint_, transport::HttpEndpoint::Start(std::move(o), &d->metrics_));
  Dashboard* raw = d.get();
  d->endpoint_->Handle("/", [raw](const transport::HttpRequest& r) {
    return raw->Guard(r, {.content_type = "text/html; charset=utf-8", .body = DashboardPage()});
  });
  d->endpoint_->Handle("/api/state", [raw](const transport::HttpRequest& r) {
    return raw->Guard(r, {.content_type = "application/json", .body = raw->StateJson()});
  });
  d->endpoint_->Handle("/metrics", [raw](const transport::HttpRequest& r) {
    return raw->Guard(r, {.content_type = "text/plain; version=0.0.4; charset=utf-8", .body = raw->metrics_.Text()},
                      /*metrics=*/true);
  });
  d->Publish();
  GD_RETURN_IF_ERROR(transport::WriteHttpAddress(*d->endpoint_, dir.http("dashboard")));
  return d;
}

std::string Dashboard::url() const { return "http://" + endpoint_->address() + "/"; }

bool Dashboard::Watched(double within_s) const {
  const int64_t at = last_served_ms_.load();
  return at >= 0 && static_cast<double>(SteadyMs() - at) <= within_s * 1000;
}

namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX and '+' decoded; a '%' not followed by two hex digits stays.
std::string PercentDecode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && HexDigit(s[i + 1]) >= 0 && HexDigit(s[i + 2]) >= 0) {
      out += static_cast<char>(HexDigit(s[i + 1]) * 16 + HexDigit(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// A constant-time comparison with a token (never equal to an empty one).
bool SameToken(const std::string& given, const std::string& token) {
  return !token.empty() && given.size() == token.size() && CRYPTO_memcmp(given.data(), token.data(), token.size()) == 0;
}

}  // namespace

std::string QueryParameter(const std::string& query, const std::string& name) {
  size_t at = 0;
  while (at <= query.size()) {
    const size_t end = std::min(query.find('&', at), query.size());
    const std::string pair = query.substr(at, end - at);
    const size_t eq = pair.find('=');
    if (PercentDecode(pair.substr(0, eq)) == name)
      return eq == std::string::npos ? "" : PercentDecode(pair.substr(eq + 1));
    at = end + 1;
  }
  return "";
}

transport::HttpResponse Dashboard::Guard(const transport::HttpRequest& r, transport::HttpResponse ok,
                                         bool metrics) const {
  const std::string& t = options_.token;
  const bool admitted = t.empty() || transport::BearerMatches(r.authorization, t) ||
                        SameToken(QueryParameter(r.query, "token"), t) ||
                        (metrics && transport::BearerMatches(r.authorization, options_.metrics_token));
  if (!admitted) return {.status = 401, .body = "a token is required (Authorization: Bearer T, or ?token=T)\n"};
  last_served_ms_ = SteadyMs();
  return ok;
}

void Dashboard::UpdateStatus(const wire::StatusReply& st, double samples_per_s) {
  json workers = json::array(), shards = json::array();
  for (const auto& w : st.workers()) workers.push_back(WorkerJson(w));
  for (const auto& s : st.servers()) shards.push_back(ShardJson(s, false));
  for (const auto& s : st.backups()) shards.push_back(ShardJson(s, true));
  if (Now() - last_stats_read_ >= 2) ReadShardStats();
  for (auto& s : shards) {
    const json& chunks = state_["chunks_by_shard"];
    const std::string key = std::to_string(s["id"].get<int>()) + (s["backup"].get<bool>() ? "b" : "");
    if (chunks.is_object() && chunks.contains(key)) s["chunks"] = chunks[key];
  }
  state_["workers"] = workers;
  state_["shards"] = shards;
  state_["aggregators"] = AggregatorsJson(st);
  state_["status"] = st.job_finished() ? "finishing" : st.training_started() ? "training" : "starting";
  state_["elapsed_s"] = st.training_seconds();
  state_["samples_per_s"] = samples_per_s;
  state_["min_clock"] = st.min_clock();
  const double now = Now();
  if (st.training_started() && now - last_history_ >= 1) {
    const auto [acc, loss] = MeanProgress(workers);
    history_.push_back({st.training_seconds(), samples_per_s, acc, loss});
    if (history_.size() > kHistory) history_.pop_front();
    last_history_ = now;
  }
  Publish();
}

json Dashboard::AggregatorsJson(const wire::StatusReply& st) const {
  json out = json::array();
  for (const auto& a : st.aggregators()) {
    json j = {{"region", a.region()}, {"id", a.id()}, {"live", a.live()}};
    // Its counts, from the stats file it writes every 2 s.
    auto text = ReadFile(dir_.stats(ProcessId::Aggregator(a.id()).Name()));
    if (text.ok()) {
      const json stats = json::parse(*text, nullptr, /*allow_exceptions=*/false);
      if (stats.is_object())
        for (const char* k : {"pushes_taken", "clocks_forwarded", "late_forwards", "pulls_served", "upstream_pulls",
                              "upstream_bytes_sent", "upstream_bytes_received", "pushes_refused"})
          if (stats.contains(k)) j[k] = stats[k];
    }
    out.push_back(std::move(j));
  }
  return out;
}

void Dashboard::ReadShardStats() {
  last_stats_read_ = Now();
  std::map<int64_t, uint64_t> staleness;
  json chunks = json::object();
  for (int i = 0; i < job_.NumServers(); ++i) {
    for (const ProcessId who : {ProcessId::Server(i), ProcessId::Backup(i)}) {
      auto text = ReadFile(dir_.stats(who.Name()));
      stats::ShardStats s;
      if (!text.ok() || !StatsFromJson(*text, &s).ok()) continue;
      chunks[std::to_string(i) + (who.is(ProcessRole::kBackup) ? "b" : "")] = s.chunks();
      if (!s.serving()) continue;
      for (const auto& [k, v] : s.staleness_histogram()) staleness[k] += v;
    }
  }
  json hist = json::object();
  for (const auto& [k, v] : staleness) hist[std::to_string(k)] = v;
  state_["staleness"] = hist;
  state_["chunks_by_shard"] = chunks;
}

void Dashboard::UpdateLinks(const json& probes, const json& traffic) {
  for (auto& l : state_["links"]) {
    for (const auto& p : probes)
      if (p.value("from", "") == l["from"] && p.value("to", "") == l["to"]) {
        l["probed_rtt_ms"] = p.value("probed_rtt_ms", json());
        l["probed_mbit"] = p.value("probed_mbit", json());
      }
    for (const auto& t : traffic)
      if (t.value("from", "") == l["from"] && t.value("to", "") == l["to"]) l["bytes"] = t["bytes"];
  }
  Publish();
}

void Dashboard::Event(const std::string& text) {
  events_.push_back({Now() - started_, text});
  if (events_.size() > kEvents) events_.pop_front();
  Publish();
}

void Dashboard::Finish(const std::string& status, const json& summary, const json& links) {
  state_["status"] = status;
  for (const char* key : {"test_accuracy", "test_loss", "test_perplexity"})
    if (summary.contains(key) && summary[key].is_number()) state_[key] = summary[key];
  UpdateLinks(json::array(), links);
}

void Dashboard::Linger(double max_s) const { metrics_.AwaitFinalScrape(max_s); }

std::string Dashboard::StateJson() const {
  MutexLock lock(mu_);
  return published_;
}

void Dashboard::Publish() {
  json out = state_;
  out.erase("chunks_by_shard");
  out["history"] = json(std::vector<json>(history_.begin(), history_.end()));
  out["events"] = json(std::vector<json>(events_.begin(), events_.end()));
  transport::MetricsBuilder b(
      {.job = job_.name, .region = job_.CoordinatorRegion().name, .role = "launcher", .id = "0"});
  for (const auto& l : state_["links"]) {
    const transport::ExtraLabels link = {{"from", l["from"]}, {"to", l["to"]}};
    b.Gauge("link_declared_delay_seconds", "A link's declared one-way delay.", l["delay_ms"].get<double>() / 1e3, link);
    if (l.contains("bytes"))
      b.Counter("link_bytes_total", "Bytes the emulated link delivered, this direction.", l["bytes"].get<double>(),
                link);
    if (l.contains("probed_rtt_ms") && l["probed_rtt_ms"].is_number())
      b.Gauge("link_probed_rtt_seconds", "The link's round trip as probed before training.",
              l["probed_rtt_ms"].get<double>() / 1e3, link);
    if (l.contains("probed_mbit") && l["probed_mbit"].is_number())
      b.Gauge("link_probed_bandwidth_bytes_per_second", "The link's throughput as probed before training.",
              l["probed_mbit"].get<double>() * 1e6 / 8, link);
  }
  metrics_.Publish(b.Take());
  MutexLock lock(mu_);
  published_ = out.dump();
}

}  // namespace geodesic::deploy

// JobSpec's derived values: role placement, codecs per link, step counts; the
// partition spec's text form.
#include "config/job.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace geodesic {

int JobSpec::NumServers() const {
  int n = 0;
  for (const auto& r : regions) n += r.servers;
  return n;
}

int JobSpec::NumWorkers() const {
  int n = 0;
  for (const auto& r : regions) n += std::max(r.workers, r.max_workers);
  return n;
}

std::vector<int32_t> JobSpec::WorkerRegions() const {
  std::vector<int32_t> out;
  for (size_t i = 0; i < regions.size(); ++i)
    out.insert(out.end(), std::max(regions[i].workers, regions[i].max_workers), static_cast<int32_t>(i));
  return out;
}

bool JobSpec::HasAutoAggregators() const {
  for (const auto& r : regions)
    if (r.aggregator_auto) return true;
  return false;
}

bool JobSpec::HasAggregators() const {
  for (const auto& r : regions)
    if (r.aggregator) return true;
  return false;
}

int JobSpec::RegionIndex(const std::string& name) const {
  for (size_t i = 0; i < regions.size(); ++i)
    if (regions[i].name == name) return static_cast<int>(i);
  return -1;
}

int JobSpec::InitialWorkers() const {
  int n = 0;
  for (const auto& r : regions) n += r.workers;
  return n;
}

int JobSpec::FirstWorkerOfRegion(size_t index) const {
  int n = 0;
  for (size_t i = 0; i < index && i < regions.size(); ++i) n += std::max(regions[i].workers, regions[i].max_workers);
  return n;
}

bool JobSpec::IsInitialWorker(int id) const {
  for (const auto& r : regions) {
    const int ids = std::max(r.workers, r.max_workers);
    if (id < ids) return id >= 0 && id < r.workers;
    id -= ids;
  }
  return false;
}

int64_t JobSpec::UnitSamples() const {
  return static_cast<int64_t>(data.batch_size) * std::max(1, training.local_steps);
}

int64_t JobSpec::TrainSamples() const {
  if (data.train_samples > 0) return data.train_samples;
  if (data.dataset == DatasetKind::kFashionMnist) return kFashionTrainSamples;
  return data.dataset == DatasetKind::kCifar10 ? kCifar10TrainSamples : 0;
}

int64_t JobSpec::UnitsPerEpoch() const { return std::max<int64_t>(1, TrainSamples() / UnitSamples()); }

int64_t JobSpec::TotalUnits() const {
  if (training.steps > 0)
    return (training.steps * InitialWorkers() + std::max(1, training.local_steps) - 1) /
           std::max(1, training.local_steps);
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(training.epochs * static_cast<double>(UnitsPerEpoch()))));
}

const RegionSpec& JobSpec::RegionOfServer(int id) const {
  for (const auto& r : regions) {
    if (id < r.servers) return r;
    id -= r.servers;
  }
  return regions.back();
}

const RegionSpec& JobSpec::RegionOfBackup(int id) const {
  const RegionSpec& primary = RegionOfServer(id);
  for (size_t i = 0; i < regions.size(); ++i)
    if (&regions[i] == &primary) return regions[(i + 1) % regions.size()];
  return primary;
}

const RegionSpec& JobSpec::RegionOfWorker(int id) const {
  for (const auto& r : regions) {
    if (id < std::max(r.workers, r.max_workers)) return r;
    id -= std::max(r.workers, r.max_workers);
  }
  return regions.back();
}

namespace {

const CompressionLinkSpec* LinkFor(const CompressionSpec& c, const std::string& a, const std::string& b) {
  for (const auto& l : c.links)
    if ((l.region_a == a && l.region_b == b) || (l.region_a == b && l.region_b == a)) return &l;
  return nullptr;
}

}  // namespace

const std::string& JobSpec::PushCodec(const std::string& worker_region, const std::string& server_region) const {
  const CompressionLinkSpec* l = LinkFor(compression, worker_region, server_region);
  return l && !l->push.empty() ? l->push : compression.push;
}

const std::string& JobSpec::PullCodec(const std::string& worker_region, const std::string& server_region) const {
  const CompressionLinkSpec* l = LinkFor(compression, worker_region, server_region);
  return l && !l->pull.empty() ? l->pull : compression.pull;
}

int64_t JobSpec::StepsPerWorker() const {
  if (federated.enabled()) return federated.rounds;
  if (training.steps > 0) return training.steps;
  double total = training.epochs * static_cast<double>(TrainSamples());
  double per_step = static_cast<double>(std::max(1, InitialWorkers())) * data.batch_size;
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(total / per_step)));
}

int64_t JobSpec::ClocksPerWorker() const {
  if (federated.enabled()) return federated.rounds;
  const int64_t h = std::max(1, training.local_steps);
  return (StepsPerWorker() + h - 1) / h;
}

OptimizerSpec JobSpec::ShardOptimizer() const {
  OptimizerSpec o = optimizer;
  if (compression.momentum_correction) o.momentum = 0;
  if (training.local_steps > 1 || federated.enabled()) {
    o = OptimizerSpec{};
    o.name = OptimizerKind::kSgd;
    o.lr = training.outer_lr;
    o.momentum = training.outer_momentum;
    o.nesterov = training.outer_nesterov;
    o.weight_decay = 0;
  }
  return o;
}

double LearningRateFactor(const OptimizerSpec& spec, int64_t step, int64_t steps) {
  if (steps <= 0) return 1.0;
  const double n = static_cast<double>(steps), k = static_cast<double>(std::clamp<int64_t>(step, 0, steps));
  const double warm = std::ceil(spec.warmup * n);
  if (k < warm) return (k + 1) / warm;
  switch (spec.schedule) {
    case LrSchedule::kCosine: {
      const double u = n > warm ? (k - warm) / (n - warm) : 1.0;
      return 0.5 * (1.0 + std::cos(M_PI * u));
    }
    case LrSchedule::kStep: {
      double f = 1.0;
      for (double m : spec.milestones)
        if (k >= m * n) f *= spec.gamma;
      return f;
    }
    case LrSchedule::kConstant:
      break;
  }
  return 1.0;
}

const LinkSpec* JobSpec::Link(const std::string& from, const std::string& to) const {
  for (const auto& l : wan.links)
    if (l.from == from && l.to == to) return &l;
  return nullptr;
}

const RegionSpec* JobSpec::FindRegion(const std::string& name) const {
  for (const auto& r : regions)
    if (r.name == name) return &r;
  return nullptr;
}

const RegionSpec& JobSpec::CoordinatorRegion() const {
  const RegionSpec* r = FindRegion(coordinator_region);
  return r ? *r : regions.front();
}

std::string ToString(const PartitionSpec& p) {
  std::string out = ToString(p.kind);
  if (p.kind == DataPartition::kIid || p.kind == DataPartition::kDocuments || p.kind == DataPartition::kGroups)
    return out;
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, p.param);  // shortest text that reads back the same
  return out + ":" + std::string(buf, r.ptr);
}

StatusOr<PartitionSpec> ParsePartition(std::string_view text) {
  const std::string_view usage = "; use iid, dirichlet:ALPHA, shards:K, lognormal:SIGMA, documents or groups";
  const size_t colon = text.find(':');
  const std::string_view word = text.substr(0, colon);
  std::optional<DataPartition> kind = FromString<DataPartition>(word);
  if (!kind) return InvalidArgument("'" + std::string(text) + "' is not a partition" + std::string(usage));
  PartitionSpec p{.kind = *kind};
  if (*kind == DataPartition::kIid || *kind == DataPartition::kDocuments || *kind == DataPartition::kGroups) {
    if (colon != std::string_view::npos) return InvalidArgument(std::string(word) + " takes no parameter");
    return p;
  }
  const std::string_view number = colon == std::string_view::npos ? "" : text.substr(colon + 1);
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), p.param);
  if (number.empty() || ec != std::errc() || end != number.data() + number.size() || !std::isfinite(p.param))
    return InvalidArgument("'" + std::string(text) + "' needs a number after '" + std::string(word) + ":'" +
                           std::string(usage));
  switch (*kind) {
    case DataPartition::kDirichlet:
      if (!(p.param > 0 && p.param <= 1000)) return InvalidArgument("dirichlet's ALPHA must be in (0, 1000]");
      break;
    case DataPartition::kShards:
      if (p.param != std::floor(p.param) || p.param < 1 || p.param > 1000)
        return InvalidArgument("shards' K must be a whole number in [1, 1000]");
      break;
    default:
      if (!(p.param > 0 && p.param <= 10)) return InvalidArgument("lognormal's SIGMA must be in (0, 10]");
  }
  return p;
}

}  // namespace geodesic

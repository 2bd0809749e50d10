#include "aggregator/region_sums.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace geodesic::aggregator {

wire::PushResult Reply::result() const {
  return applied ? wire::APPLIED : duplicate ? wire::DUPLICATE : wire::STALE_DROPPED;
}

RegionSums::RegionSums(const cluster::ChunkLayout& layout, int first_worker, int num_workers, FragmentFn fragment_of)
    : layout_(layout), first_worker_(first_worker), num_workers_(num_workers), fragment_of_(std::move(fragment_of)) {}

std::optional<cluster::ChunkRange> RegionSums::FragmentOf(int64_t clock) const {
  return fragment_of_ ? fragment_of_(clock) : std::nullopt;
}

uint32_t RegionSums::ChunksOf(int64_t clock) const {
  const auto f = FragmentOf(clock);
  return f ? f->end - f->begin : layout_.num_chunks();
}

void RegionSums::SetLive(bool valid, const std::vector<int>& live, const std::vector<int64_t>& clocks) {
  std::map<int, int64_t> now;
  if (!valid) {
    for (int w = first_worker_; w < first_worker_ + num_workers_; ++w) now[w] = 0;
  } else {
    for (size_t i = 0; i < live.size(); ++i) {
      const int w = live[i];
      if (w < first_worker_ || w >= first_worker_ + num_workers_) continue;
      auto was = live_.find(w);
      now[w] = was != live_.end() ? was->second : (i < clocks.size() ? clocks[i] : 0);
    }
  }
  // The unfinished pushes of a worker that was live and is gone: it
  // resends them if it comes back (none of them was acknowledged). Those
  // of a worker not live yet (a restarted one whose registration this view
  // does not show) are kept.
  std::erase_if(late_, [&](const auto& e) { return live_.count(e.first.second) && !now.count(e.first.second); });
  live_ = std::move(now);
}

void RegionSums::Add(Gradient& g, int64_t clock, AckTo to, const std::vector<PushedChunk>& chunks) {
  if (g.values.empty()) {
    g.values.assign(layout_.num_params(), 0.0f);
    g.got.assign(layout_.num_chunks(), false);
  }
  const auto fragment = FragmentOf(clock);
  for (const PushedChunk& c : chunks) {
    if (g.got[c.id] || (fragment && !fragment->Contains(c.id))) continue;  // a resend, or not this clock's
    std::memcpy(g.values.data() + layout_.Begin(c.id), c.values, layout_.Size(c.id) * sizeof(float));
    g.got[c.id] = true;
    ++g.chunks;
  }
  g.acks.push_back(std::move(to));
}

std::vector<Reply> RegionSums::Take(int worker, int64_t clock, AckTo to, const std::vector<PushedChunk>& chunks) {
  if (auto h = history_.find(clock); h != history_.end()) {
    if (auto dropped = h->second.find(worker); dropped != h->second.end()) {
      Reply r{.to = std::move(to), .clock = clock};
      for (uint32_t c : r.to.chunks) ++(dropped->second.count(c) ? r.dropped : r.duplicate);
      return {std::move(r)};
    }
  }
  for (auto it = sent_.lower_bound({clock, {}}); it != sent_.end() && it->first.first == clock; ++it) {
    const std::vector<int>& covers = it->first.second;
    if (std::find(covers.begin(), covers.end(), worker) == covers.end()) continue;
    it->second.acks[worker].push_back(std::move(to));  // a resend of a push in flight
    return {};
  }
  Add(clock >= next_open_ ? open_[clock].grads[worker] : late_[{clock, worker}], clock, std::move(to), chunks);
  return {};
}

void RegionSums::Skip(int worker, int64_t clock) {
  if (clock >= next_open_) open_[clock].skipped.insert(worker);
}

bool RegionSums::Ready(int64_t clock, const Open& o) const {
  for (const auto& [w, from] : live_) {
    if (from > clock || o.skipped.count(w)) continue;
    auto g = o.grads.find(w);
    if (g == o.grads.end() || !Whole(g->second, clock)) return false;
  }
  return true;
}

Forward RegionSums::Send(int64_t clock, std::map<int, Gradient>& grads) {
  Forward f{.clock = clock, .covers = {}, .sum = nullptr, .only = FragmentOf(clock)};
  Sent sent{.acks = {}, .answers = {}, .chunks = ChunksOf(clock)};
  // The values the clock's chunks hold (the fragment's span with fragments).
  size_t begin = 0, end = layout_.num_params();
  if (f.only && !f.only->empty()) {
    begin = layout_.Begin(f.only->begin);
    end = layout_.Begin(f.only->end - 1) + layout_.Size(f.only->end - 1);
  }
  for (auto& [w, g] : grads) {
    f.covers.push_back(w);
    sent.acks[w] = std::move(g.acks);
    if (!f.sum) {
      f.sum = std::make_shared<std::vector<float>>(std::move(g.values));
      continue;
    }
    float* out = f.sum->data();
    const float* in = g.values.data();
    for (size_t k = begin; k < end; ++k) out[k] += in[k];  // worker order, as a shard adds them
  }
  sent_[{clock, f.covers}] = std::move(sent);
  return f;
}

std::vector<Forward> RegionSums::TakeReady() {
  std::vector<Forward> out;
  while (!open_.empty() && Ready(open_.begin()->first, open_.begin()->second)) {
    auto it = open_.begin();
    const int64_t clock = it->first;
    std::map<int, Gradient> whole;
    for (auto& [w, g] : it->second.grads)
      if (Whole(g, clock))
        whole.emplace(w, std::move(g));
      else
        late_[{clock, w}] = std::move(g);  // it goes alone once it finishes
    open_.erase(it);
    next_open_ = clock + 1;
    if (!whole.empty()) out.push_back(Send(clock, whole));
  }
  for (auto it = late_.begin(); it != late_.end();) {
    if (!Whole(it->second, it->first.first)) {
      ++it;
      continue;
    }
    std::map<int, Gradient> one;
    one.emplace(it->first.second, std::move(it->second));
    out.push_back(Send(it->first.first, one));
    out.back().late = true;
    it = late_.erase(it);
  }
  Trim();
  return out;
}

void RegionSums::Answered(int64_t clock, const std::vector<int>& covers, const std::vector<uint32_t>& chunks,
                          const wire::PushAck& ack) {
  auto it = sent_.find({clock, covers});
  if (it == sent_.end()) return;  // an answer to a resend of a forward already answered
  Sent& s = it->second;
  const uint32_t applied = ack.applied_chunks(), duplicate = ack.duplicate_chunks();
  for (uint32_t i = 0; i < chunks.size(); ++i)
    s.answers[chunks[i]] = i < applied               ? wire::APPLIED
                           : i < applied + duplicate ? wire::DUPLICATE
                                                     : wire::STALE_DROPPED;
  if (s.answers.size() < s.chunks) return;
  for (auto& [w, acks] : s.acks) {
    std::set<uint32_t>& dropped = history_[clock][w];
    for (const auto& [c, result] : s.answers)
      if (result == wire::STALE_DROPPED) dropped.insert(c);
    for (AckTo& to : acks) answered_.push_back(Answer(std::move(to), clock, s.answers));
  }
  sent_.erase(it);
  Trim();
}

Reply RegionSums::Answer(AckTo to, int64_t clock, const std::map<uint32_t, wire::PushResult>& answers) const {
  Reply r{.to = std::move(to), .clock = clock};
  for (uint32_t c : r.to.chunks) {
    auto a = answers.find(c);
    const wire::PushResult result = a == answers.end() ? wire::APPLIED : a->second;
    ++(result == wire::APPLIED ? r.applied : result == wire::DUPLICATE ? r.duplicate : r.dropped);
  }
  return r;
}

std::vector<Reply> RegionSums::TakeAnswered() { return std::exchange(answered_, {}); }

int64_t RegionSums::OldestOpen() const {
  int64_t oldest = next_open_;
  if (!open_.empty()) oldest = std::min(oldest, open_.begin()->first);
  if (!late_.empty()) oldest = std::min(oldest, late_.begin()->first.first);
  if (!sent_.empty()) oldest = std::min(oldest, sent_.begin()->first.first);
  return oldest;
}

void RegionSums::Trim() {
  // A push that never finished, this far behind: the shards closed its
  // round long ago, and its worker resends it if it is still there.
  while (!late_.empty() && late_.begin()->first.first < next_open_ - kHistory) late_.erase(late_.begin());
  const int64_t keep_from = OldestOpen() - kHistory;
  while (!history_.empty() && history_.begin()->first < keep_from) history_.erase(history_.begin());
}

}  // namespace geodesic::aggregator

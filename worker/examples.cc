#include "worker/examples.h"

#include "worker/partition.h"

namespace geodesic::worker {

Examples Examples::Rows(const std::vector<int64_t>& rows) const {
  torch::Tensor sel =
      torch::from_blob(const_cast<int64_t*>(rows.data()), {static_cast<int64_t>(rows.size())}, torch::kInt64);
  return Rows(sel);
}

Examples Examples::Head(int64_t n) const {
  if (n >= size()) return *this;
  return {x.narrow(0, 0, n), y.narrow(0, 0, n)};
}

Examples ImageExamples(const ImageSet& set, const std::vector<int64_t>* indices) {
  return {ImagesTensor(set, indices), LabelsTensor(set, indices)};
}

Examples TokenExamples(const TokenSet& set, const std::vector<int64_t>* windows) {
  const int64_t n = windows ? static_cast<int64_t>(windows->size()) : set.windows(), c = set.context;
  torch::Tensor x = torch::empty({n, c}, torch::kInt64), y = torch::empty({n, c}, torch::kInt64);
  int64_t *xd = x.data_ptr<int64_t>(), *yd = y.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t* t = set.tokens.data() + (windows ? (*windows)[i] : i) * c;
    for (int64_t k = 0; k < c; ++k) {
      xd[i * c + k] = t[k];
      yd[i * c + k] = t[k + 1];
    }
  }
  return {x, y};
}

SampleShape ShapeOf(const TokenSet& set, const DataSpec& data) {
  SampleShape s;
  s.context = set.context;
  s.vocab = data.vocab > 0 ? data.vocab : int64_t{set.max_token} + 1;
  s.vocab_from = data.vocab > 0 ? "data.vocab" : set.file;
  return s;
}

StatusOr<SplitExamples> LoadExamples(const DataSpec& data, const std::string& split, int64_t max_samples) {
  SplitExamples out;
  if (data.dataset == DatasetKind::kTokens) {
    GD_ASSIGN_OR_RETURN(TokenSet set, LoadTokens(data, split, max_samples));
    out.shape = ShapeOf(set, data);
    out.examples = TokenExamples(set);
  } else {
    GD_ASSIGN_OR_RETURN(ImageSet set, LoadDataset(data, split, max_samples));
    out.shape = ShapeOf(set);
    out.examples = ImageExamples(set);
  }
  if (max_samples > 0) out.examples = out.examples.Head(max_samples);
  return out;
}

namespace {

// The split of `train` dealt by `split` (its rows per client), with client
// `only`'s rows alone when only >= 0 (see LoadClientSplit).
template <typename Set, typename ExamplesOf>
StatusOr<ClientSplit> Deal(StatusOr<std::vector<std::vector<int64_t>>> split, const Set& train, SampleShape shape,
                           ExamplesOf examples_of, int64_t only) {
  if (!split.ok()) return InvalidArgument("data.partition over federated.clients: " + split.status().message());
  ClientSplit s;
  s.clients = std::move(*split);
  s.shape = std::move(shape);
  s.digest = PartitionDigest(s.clients);
  if (only < 0) {
    s.examples = examples_of(train, nullptr);
    return s;
  }
  std::vector<int64_t>& mine = s.clients[static_cast<size_t>(only)];
  s.examples = examples_of(train, &mine);
  for (size_t c = 0; c < s.clients.size(); ++c)
    if (static_cast<int64_t>(c) != only) s.clients[c].clear();
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<int64_t>(i);
  return s;
}

}  // namespace

StatusOr<ClientSplit> ClientSplitOf(const JobSpec& job, const ImageSet& train, int64_t only) {
  return Deal(PartitionSamples(train.labels, train.classes, static_cast<int>(job.federated.clients), job.data.partition,
                               job.seed, job.data.batch_size),
              train, ShapeOf(train), ImageExamples, only);
}

StatusOr<ClientSplit> ClientSplitOf(const JobSpec& job, const TokenSet& train, int64_t only) {
  return Deal(PartitionWindows(train, static_cast<int>(job.federated.clients), job.data.partition, job.seed,
                               job.data.batch_size),
              train, ShapeOf(train, job.data), TokenExamples, only);
}

StatusOr<ClientSplit> LoadClientSplit(const JobSpec& job, int64_t only) {
  if (job.data.dataset == DatasetKind::kTokens) {
    GD_ASSIGN_OR_RETURN(TokenSet train, LoadTokens(job.data, "train"));
    return ClientSplitOf(job, train, only);
  }
  GD_ASSIGN_OR_RETURN(ImageSet train, LoadDataset(job.data, "train"));
  return ClientSplitOf(job, train, only);
}

}  // namespace geodesic::worker

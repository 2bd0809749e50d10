// `geodesic deploy render --target kubernetes` (deploy/render.h,
// docs/deploy.md): the job as Kubernetes objects in one multi-document
// file. The objects are built as insertion-ordered JSON values and written
// as YAML by deploy/yaml_writer.h. Deterministic.
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/format.h"
#include "deploy/render.h"
#include "deploy/scrape_config.h"
#include "deploy/yaml_writer.h"
#include "transport/security.h"

namespace geodesic::deploy {
namespace {

using Node = nlohmann::ordered_json;

constexpr int kZmqPort = 7400;  // every pod has its own IP: one port for all
constexpr int kHttpPort = 9400;
constexpr const char* kDataDir = "/var/lib/geodesic";
constexpr const char* kRegionLabel = "topology.kubernetes.io/region";
constexpr int kUser = 10001;  // the image's user and group (deploy/container/build-image.sh)

struct RenderContext {
  const JobSpec& job;
  const RenderOptions& options;
  std::string ns, job_label;
};

bool PodsMode(const RenderContext& k) { return k.options.workload == "pods"; }
bool Secure(const RenderContext& k) { return k.job.security.mode == SecurityMode::kCurve; }

// Secured jobs: where a member's pod mounts the coordinator's public key and
// its set's join tokens (Secrets; RenderKubernetesSecrets).
constexpr const char* kKeyDir = "/var/run/secrets/geodesic/coordinator";
constexpr const char* kTokenDir = "/var/run/secrets/geodesic/tokens";
constexpr const char* kCoordinatorSecret = "geodesic-coordinator";
constexpr const char* kKeySecret = "geodesic-coordinator-key";
// Every pod of a secured job: the metrics token /metrics requires.
constexpr const char* kMetricsDir = "/var/run/secrets/geodesic/metrics";
constexpr const char* kMetricsSecret = "geodesic-metrics";
std::string TokenSecret(const std::string& set) { return "geodesic-tokens-" + set; }

struct Set {
  std::string name, component, region;
  int replicas = 1, id_offset = 0;
  // Elastic jobs' worker sets: the replicas a scale-up may reach (ids
  // id_offset.. of the region's max_workers), which get join tokens too.
  int max_replicas = 0;
  bool worker0 = false;  // worker 0 with the evaluator beside it
};

Node Labels(const RenderContext& k, const std::string& component, const std::string& region) {
  Node l;
  l["app.kubernetes.io/name"] = "geodesic";
  l["app.kubernetes.io/instance"] = k.job_label;
  l["app.kubernetes.io/component"] = component;
  if (!region.empty()) l["geodesic.dev/region"] = DnsLabel(region);
  return l;
}

Node Meta(const RenderContext& k, const std::string& name, const Node& labels) {
  Node m;
  m["name"] = name;
  m["namespace"] = k.ns;
  m["labels"] = labels;
  return m;
}

// An object's head: apiVersion, kind, metadata.
Node Object(const char* api_version, const char* kind, Node metadata) {
  Node o;
  o["apiVersion"] = api_version;
  o["kind"] = kind;
  o["metadata"] = std::move(metadata);
  return o;
}

Node HttpProbe(const char* path, int port, int period_s, int failures) {
  Node p;
  p["httpGet"]["path"] = path;
  p["httpGet"]["port"] = port;
  p["periodSeconds"] = period_s;
  p["failureThreshold"] = failures;
  return p;
}

Node Resources(const std::string& cpu, const std::string& memory, const std::string& memory_limit) {
  Node r;
  r["requests"]["cpu"] = cpu;
  r["requests"]["memory"] = memory;
  r["limits"]["memory"] = memory_limit;
  return r;
}

Node Mount(const std::string& name, const std::string& path, bool read_only) {
  Node m;
  m["name"] = name;
  m["mountPath"] = path;
  if (read_only) m["readOnly"] = true;
  return m;
}

Node Env(const std::string& name, const std::string& value) {
  Node e;
  e["name"] = name;
  e["value"] = value;
  return e;
}

Node SecretEnv(const std::string& name, const std::string& secret, const std::string& key) {
  Node e;
  e["name"] = name;
  e["valueFrom"]["secretKeyRef"]["name"] = secret;
  e["valueFrom"]["secretKeyRef"]["key"] = key;
  return e;
}

// Secured jobs: the coordinator takes the job secret and its keypair from
// environment values (a Secret's files would be root's, readable by all
// in the pod, which the coordinator refuses for them); a member reads the
// coordinator's public key and its join token, `token`, from its pod's
// Secret volumes.
void AddCredentials(const RenderContext& k, const std::string& token, std::vector<std::string>& args, Node& c) {
  if (!Secure(k)) return;
  args.insert(args.end(), {"--metrics-token-file", std::string(kMetricsDir) + "/token"});
  c["volumeMounts"].push_back(Mount("metrics-token", kMetricsDir, true));
  if (args.front() == "coordinator") {
    c["env"].push_back(SecretEnv("GEODESIC_JOB_SECRET", kCoordinatorSecret, "secret"));
    c["env"].push_back(SecretEnv("GEODESIC_COORDINATOR_KEYPAIR", kCoordinatorSecret, "keypair"));
    return;
  }
  args.insert(args.end(), {"--coordinator-key-file", std::string(kKeyDir) + "/coordinator.key", "--token-file",
                           std::string(kTokenDir) + "/" + token});
  c["volumeMounts"].push_back(Mount("coordinator-key", kKeyDir, true));
  c["volumeMounts"].push_back(Mount("tokens", kTokenDir, true));
}

// The container of one process; `args` after the subcommand. The
// containers of one pod share its network: the second one of worker 0's pod
// (the evaluator) serves HTTP on the next port.
Node FieldEnv(const std::string& name, const std::string& field) {
  Node e;
  e["name"] = name;
  e["valueFrom"]["fieldRef"]["fieldPath"] = field;
  return e;
}

Node Container(const RenderContext& k, const std::string& name, std::vector<std::string> args, bool listens,
               const Node& resources, const std::string& token, int http_port = kHttpPort) {
  args.insert(args.end(), {"--http-bind", "0.0.0.0:" + std::to_string(http_port)});
  // A StatefulSet's pod restarts a process that exits, finished or not: a
  // finished one serves /healthz until the pod is deleted. Pods
  // (restartPolicy OnFailure) let finished ones exit.
  if (!PodsMode(k)) args.push_back("--hold-after-exit");
  Node c;
  c["name"] = name;
  c["image"] = k.options.image;
  c["imagePullPolicy"] = k.options.pull_policy;
  c["env"] = Node::array();
  if (!PodsMode(k)) {  // listeners bind $(POD_IP); Pods bind their host name
    c["env"].push_back(FieldEnv("POD_IP", "status.podIP"));
    if (Secure(k)) c["env"].push_back(FieldEnv("POD_NAME", "metadata.name"));  // its token's file
  }
  c["env"].push_back(Env("OMP_NUM_THREADS", "1"));
  // Informational in Kubernetes (Services and probes name the numbers);
  // podman 4.3 publishes every containerPort on the host, so pods sharing
  // a port number collide: Pods go without.
  if (!PodsMode(k)) {
    for (const auto& [name, port] : {std::pair{"zmq", kZmqPort}, std::pair{"http", http_port}}) {
      if (!listens && port == kZmqPort) continue;
      Node p;
      p["name"] = name;
      p["containerPort"] = port;
      c["ports"].push_back(p);
    }
  }
  c["livenessProbe"] = HttpProbe("/healthz", http_port, 10, 6);
  c["readinessProbe"] = HttpProbe("/readyz", http_port, 5, 3);
  c["resources"] = resources;
  c["volumeMounts"].push_back(Mount("job", "/etc/geodesic", true));
  c["volumeMounts"].push_back(Mount("data", kDataDir, false));
  AddCredentials(k, token, args, c);
  c["args"] = args;
  c["securityContext"]["allowPrivilegeEscalation"] = false;
  return c;
}

// A region's aggregator: the one pod of StatefulSet (or Pods)
// aggregator-REGION, by its stable DNS name under the set's headless Service.
std::string AggregatorSet(const std::string& region) { return "aggregator-" + DnsLabel(region, 40); }
std::string AggregatorEndpoint(const std::string& region) {
  return "tcp://" + AggregatorSet(region) + "-0." + AggregatorSet(region) + ":" + std::to_string(kZmqPort);
}

std::vector<std::string> MemberArgs(const std::string& role, const Set& set) {
  return {role,
          "--job",
          kContainerJobPath,
          "--id-from-hostname",
          std::to_string(set.id_offset),
          "--coordinator",
          "tcp://coordinator:" + std::to_string(kZmqPort)};
}

// The pod's containers: the process, and for worker 0 the evaluator.
// Listeners bind `bind_host`.
Node Containers(const RenderContext& k, const Set& set, const std::string& bind_host) {
  // A member's token file: its pod's name (a StatefulSet's pods read theirs from the downward API).
  const std::string token = PodsMode(k) ? bind_host : "$(POD_NAME)";
  Node cs;
  const std::string bind = "tcp://" + bind_host + ":" + std::to_string(kZmqPort);
  const std::string ckpt = std::string(kDataDir) + "/checkpoints";
  // Each process's stats (and a worker's push ledgers) on its pod's volume,
  // named as in a launcher's run directory (`geodesic deploy summarize`).
  const std::string stats = std::string(kDataDir) + "/stats/";
  if (set.component == "coordinator") {
    cs.push_back(Container(k, "coordinator",
                           {"coordinator", "--job", kContainerJobPath, "--bind", bind, "--state-file",
                            std::string(kDataDir) + "/coordinator.state", "--stats-file", stats + "coordinator.json"},
                           true, Resources("250m", "256Mi", "1Gi"), ""));
  } else if (set.component == "server" || set.component == "backup") {
    auto args = MemberArgs("server", set);
    if (set.component == "backup") args.insert(args.begin() + 1, "--backup");
    args.insert(args.end(),
                {"--bind", bind, "--checkpoint-dir", ckpt, "--stats-file", stats + set.component + "-{id}.json"});
    cs.push_back(Container(k, "server", args, true, Resources("500m", "512Mi", "2Gi"), token));
  } else if (set.component == "aggregator") {
    cs.push_back(Container(k, "aggregator",
                           {"aggregator", "--job", kContainerJobPath, "--region", set.region, "--coordinator",
                            "tcp://coordinator:" + std::to_string(kZmqPort), "--bind", bind, "--stats-file",
                            stats + "aggregator-" + std::to_string(set.id_offset) + ".json"},
                           true, Resources("500m", "512Mi", "2Gi"), token));
  } else {
    auto args = MemberArgs("worker", set);
    if (const int r = k.job.RegionIndex(set.region); k.job.regions[static_cast<size_t>(r)].aggregator)
      args.insert(args.end(), {"--aggregator", AggregatorEndpoint(set.region)});
    const std::string snapshots = std::string(kDataDir) + "/snapshots";
    if (set.worker0) args.insert(args.end(), {"--snapshot-dir", snapshots});
    args.insert(args.end(), {"--stats-file", stats + "worker-{id}.json"});
    cs.push_back(Container(k, "worker", args, false, Resources("1", "1Gi", "4Gi"), token));
    if (set.worker0)
      cs.push_back(Container(
          k, "evaluator",
          {"eval", "--job", kContainerJobPath, "--coordinator", "tcp://coordinator:" + std::to_string(kZmqPort),
           "--snapshot-dir", snapshots, "--result-file", std::string(kDataDir) + "/result.json", "--dump-params",
           std::string(kDataDir) + "/final_params.bin"},
          false, Resources("500m", "1Gi", "2Gi"), "evaluator", kHttpPort + 1));
  }
  return cs;
}

Node RegionAffinity(const std::string& region) {
  Node e;
  e["key"] = kRegionLabel;
  e["operator"] = "In";
  e["values"].push_back(region);
  Node term;
  term["matchExpressions"].push_back(e);
  Node a;
  a["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"].push_back(term);
  return a;
}

// A pod's placement, containers and volumes: the job's ConfigMap, and the
// data volume (a StatefulSet's claim template names it; a Pod names its
// claim, `claim`).
void FillPodSpec(const RenderContext& k, const Set& set, const std::string& bind_host, const std::string& claim,
                 Node& spec) {
  spec["affinity"] = RegionAffinity(set.region);
  spec["containers"] = Containers(k, set, bind_host);
  // The image's user; volumes (data claims, Secrets) are given its group.
  spec["securityContext"]["runAsNonRoot"] = true;
  spec["securityContext"]["runAsUser"] = kUser;
  spec["securityContext"]["runAsGroup"] = kUser;
  spec["securityContext"]["fsGroup"] = kUser;
  spec["terminationGracePeriodSeconds"] = 30;
  Node job;
  job["name"] = "job";
  job["configMap"]["name"] = "geodesic-job";
  spec["volumes"].push_back(job);
  std::vector<std::pair<std::string, std::string>> secrets;  // volume, Secret
  if (Secure(k) && set.component != "coordinator") {
    secrets.emplace_back("coordinator-key", kKeySecret);
    secrets.emplace_back("tokens", TokenSecret(set.name));
  }
  if (Secure(k)) secrets.emplace_back("metrics-token", kMetricsSecret);
  for (const auto& [volume, secret] : secrets) {
    Node v;
    v["name"] = volume;
    v["secret"]["secretName"] = secret;
    v["secret"]["defaultMode"] = 0440;  // octal: read-only (the files are root's, the group the pod's)
    spec["volumes"].push_back(v);
  }
  if (claim.empty()) return;
  Node data;
  data["name"] = "data";
  data["persistentVolumeClaim"]["claimName"] = claim;
  spec["volumes"].push_back(data);
}

Node ClaimSpec(const RenderContext& k) {
  Node spec;
  spec["accessModes"].push_back("ReadWriteOnce");
  spec["resources"]["requests"]["storage"] = k.options.volume_size;
  return spec;
}

Node StatefulSet(const RenderContext& k, const Set& set) {
  const Node labels = Labels(k, set.component, set.region);
  Node s = Object("apps/v1", "StatefulSet", Meta(k, set.name, labels));
  s["spec"]["serviceName"] = set.name;
  s["spec"]["replicas"] = set.replicas;
  s["spec"]["podManagementPolicy"] = "Parallel";  // members wait for each other themselves
  s["spec"]["selector"]["matchLabels"] = labels;
  Node& pod = s["spec"]["template"];
  pod["metadata"]["labels"] = labels;
  FillPodSpec(k, set, "$(POD_IP)", "", pod["spec"]);
  Node claim;
  claim["metadata"]["name"] = "data";
  claim["spec"] = ClaimSpec(k);
  s["spec"]["volumeClaimTemplates"].push_back(claim);
  return s;
}

// Workload "pods": a set's pods one by one, each after its data claim. The
// names are the StatefulSet's (NAME-ORDINAL, so --id-from-hostname reads
// the same ids), but for the coordinator's pod: `coordinator`.
// Ordinals [from, to); to -1: the set's replicas.
void AppendPods(const RenderContext& k, const Set& set, std::vector<Node>& docs, int from = 0, int to = -1) {
  const Node labels = Labels(k, set.component, set.region);
  for (int ordinal = from; ordinal < (to < 0 ? set.replicas : to); ++ordinal) {
    const std::string name = set.component == "coordinator" ? set.name : set.name + "-" + std::to_string(ordinal);
    Node claim = Object("v1", "PersistentVolumeClaim", Meta(k, "data-" + name, labels));
    claim["spec"] = ClaimSpec(k);
    docs.push_back(claim);
    Node pod = Object("v1", "Pod", Meta(k, name, labels));
    pod["spec"]["hostname"] = name;
    if (set.component != "coordinator") pod["spec"]["subdomain"] = set.name;  // NAME-i.NAME.<ns>.svc
    pod["spec"]["restartPolicy"] = "OnFailure";
    FillPodSpec(k, set, name, claim["metadata"]["name"], pod["spec"]);
    docs.push_back(pod);
  }
}

Node Service(const RenderContext& k, const Set& set, bool headless, bool listens) {
  const Node labels = Labels(k, set.component, set.region);
  Node s = Object("v1", "Service", Meta(k, set.name, labels));
  if (headless) s["spec"]["clusterIP"] = "None";
  s["spec"]["selector"] = labels;
  for (const auto& [name, port] : {std::pair{"zmq", kZmqPort}, std::pair{"http", kHttpPort}}) {
    if (!listens && port == kZmqPort) continue;
    Node p;
    p["name"] = name;
    p["port"] = port;
    p["targetPort"] = port;
    s["spec"]["ports"].push_back(p);
  }
  return s;
}

// The StatefulSets: the coordinator; per region its shards, the backups it
// holds (of the previous region's shards) and its workers, worker 0 in a set
// of its own with the evaluator.
std::vector<Set> Sets(const JobSpec& job) {
  std::vector<Set> sets = {{.name = "coordinator", .component = "coordinator", .region = job.CoordinatorRegion().name}};
  int server = 0, worker = 0;
  for (const RegionSpec& r : job.regions) {
    if (r.servers > 0)
      sets.push_back({.name = "server-" + DnsLabel(r.name, 40),
                      .component = "server",
                      .region = r.name,
                      .replicas = r.servers,
                      .id_offset = server});
    server += r.servers;
  }
  for (const RegionSpec& r : job.regions) {
    int first = -1, count = 0;
    for (int i = 0; i < job.NumServers() && job.replication.backups > 0; ++i)
      if (job.RegionOfBackup(i).name == r.name) first = first < 0 ? i : first, ++count;
    if (count > 0)
      sets.push_back({.name = "backup-" + DnsLabel(r.name, 40),
                      .component = "backup",
                      .region = r.name,
                      .replicas = count,
                      .id_offset = first});
  }
  for (size_t i = 0; i < job.regions.size(); ++i)
    if (job.regions[i].aggregator)
      sets.push_back({.name = AggregatorSet(job.regions[i].name),
                      .component = "aggregator",
                      .region = job.regions[i].name,
                      .id_offset = static_cast<int>(i)});
  for (const RegionSpec& r : job.regions) {
    int first = worker, count = r.workers, most = std::max(r.workers, r.max_workers);
    if (worker == 0 && count > 0) {
      sets.push_back({.name = "worker-0", .component = "worker", .region = r.name, .worker0 = true});
      ++first, --count, --most;
    }
    if (most > 0)  // an elastic region may start with none and be scaled up
      sets.push_back({.name = "worker-" + DnsLabel(r.name, 40),
                      .component = "worker",
                      .region = r.name,
                      .replicas = count,
                      .id_offset = first,
                      .max_replicas = most});
    worker += std::max(r.workers, r.max_workers);
  }
  return sets;
}

Node Namespace(const RenderContext& k) {
  Node meta;
  meta["name"] = k.ns;
  meta["labels"] = Labels(k, "job", "");
  return Object("v1", "Namespace", meta);
}

Node JobConfigMap(const RenderContext& k) {
  Node c = Object("v1", "ConfigMap", Meta(k, "geodesic-job", Labels(k, "job", "")));
  JobSpec rendered = k.job;
  rendered.wan.emulation = WanEmulation::kNone;  // between pods the links are real
  c["data"]["job.yaml"] = JobToYaml(rendered);   // written as a literal block
  return c;
}

// Voluntary evictions (drains, upgrades) take one shard pod at a time, so
// a shard and its backup are never both evicted.
Node ShardBudget(const RenderContext& k) {
  Node b = Object("policy/v1", "PodDisruptionBudget", Meta(k, "shards", Labels(k, "shards", "")));
  b["spec"]["maxUnavailable"] = 1;
  Node e;
  e["key"] = "app.kubernetes.io/component";
  e["operator"] = "In";
  e["values"].push_back("server");
  e["values"].push_back("backup");
  b["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] = k.job_label;
  b["spec"]["selector"]["matchExpressions"].push_back(e);
  return b;
}

Node Port(int port) {
  Node p;
  p["protocol"] = "TCP";
  p["port"] = port;
  return p;
}

// Who may reach the job's pods: the job's own pods anything; the ZeroMQ
// port anyone, as without a policy (CURVE and join tokens guard a secured
// job); the HTTP ports the monitoring namespace's pods. The kubelet's
// probes come from the node, which a NetworkPolicy does not block: a
// stranger on the pod network can no longer open a connection to the HTTP
// ports at all, and one on the node shares its source address with the
// kubelet, whose probes the endpoint serves first (transport/http_endpoint.h).
Node IngressPolicy(const RenderContext& k) {
  Node p = Object("networking.k8s.io/v1", "NetworkPolicy", Meta(k, "geodesic-ingress", Labels(k, "job", "")));
  p["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] = k.job_label;
  p["spec"]["policyTypes"].push_back("Ingress");
  Node own, zmq, monitoring, peer;
  peer["podSelector"] = Node::object();  // every pod of this namespace
  own["from"].push_back(peer);
  zmq["ports"].push_back(Port(kZmqPort));
  Node ns;
  ns["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] = k.options.metrics_namespace;
  monitoring["from"].push_back(ns);
  monitoring["ports"].push_back(Port(kHttpPort));
  monitoring["ports"].push_back(Port(kHttpPort + 1));  // the evaluator's, beside worker 0
  for (Node* rule : {&own, &zmq, &monitoring}) p["spec"]["ingress"].push_back(*rule);
  return p;
}

RenderContext Context(const JobSpec& job, const RenderOptions& options) {
  return {.job = job, .options = options, .ns = DnsLabel("geodesic-" + job.name), .job_label = DnsLabel(job.name)};
}

Node OpaqueSecret(const RenderContext& k, const std::string& name, const Node& labels) {
  Node s = Object("v1", "Secret", Meta(k, name, labels));
  s["type"] = "Opaque";
  return s;
}

// One set's join tokens, by pod name (and "evaluator" in worker 0's pod).
StatusOr<Node> TokenSecretOf(const RenderContext& k, const Set& set, const std::string& secret, int64_t now_unix) {
  Node t = OpaqueSecret(k, TokenSecret(set.name), Labels(k, set.component, set.region));
  // A backup joins with its shard's server token; an aggregator's id is its region's index.
  const std::string role = set.component == "backup" ? "server" : set.component;
  for (int ordinal = 0; ordinal < std::max(set.replicas, set.max_replicas); ++ordinal) {
    GD_ASSIGN_OR_RETURN(std::string token, JoinToken(k.job, secret, role, set.id_offset + ordinal, now_unix));
    t["stringData"][set.name + "-" + std::to_string(ordinal)] = token;
  }
  if (set.worker0) {
    GD_ASSIGN_OR_RETURN(t["stringData"]["evaluator"], JoinToken(k.job, secret, "evaluator", 0, now_unix));
  }
  return t;
}

std::string Header(const JobSpec& job, const RenderOptions& options) {
  std::ostringstream s;
  s << "# Geodesic job '" << job.name
    << "' for Kubernetes (rendered by `geodesic deploy render --target kubernetes --workload " << options.workload
    << "`).\n";
  if (options.workload == "pods")
    s << "# Plain Pods, one per process group, for `podman play kube` (which runs no StatefulSets) or a cluster.\n";
  s << "# Regions are placed by the nodes' " << kRegionLabel << " label, which must equal the job's region names:";
  for (const RegionSpec& r : job.regions) s << " " << r.name;
  s << ".\n" << LinkMatrixComment(job, "between pods");
  if (job.security.mode == SecurityMode::kCurve)
    s << "# security.mode: curve: apply kubernetes-secrets.yaml (the job secret, the coordinator's keypair, the\n"
      << "# join tokens, the metrics token) first; every pod reads its credentials from those Secrets, and\n"
      << "# /metrics answers only `Authorization: Bearer` with Secret geodesic-metrics' token.\n";
  s << "# NetworkPolicy geodesic-ingress: the HTTP ports (/metrics, probes) admit only this job's pods, the\n"
    << "# kubelet and namespace '" << options.metrics_namespace << "' (--metrics-namespace).\n";
  return s.str();
}

}  // namespace

StatusOr<std::string> RenderKubernetes(const JobSpec& job, const RenderOptions& options) {
  if (options.workload != "statefulsets" && options.workload != "pods")
    return InvalidArgument("deploy render: --workload '" + options.workload + "' is not one of statefulsets, pods");
  if (options.metrics_namespace.empty() || DnsLabel(options.metrics_namespace) != options.metrics_namespace)
    return InvalidArgument("deploy render: --metrics-namespace '" + options.metrics_namespace +
                           "' is not a namespace name (lower-case letters, digits and '-')");
  const RenderContext k = Context(job, options);
  std::vector<Node> docs = {Namespace(k), JobConfigMap(k)};
  for (const Set& set : Sets(job)) {
    // The coordinator behind a stable virtual IP; the others headless, for
    // their pods' stable DNS names.
    docs.push_back(Service(k, set, set.component != "coordinator", set.component != "worker"));
    if (PodsMode(k))
      AppendPods(k, set, docs);
    else
      docs.push_back(StatefulSet(k, set));
  }
  if (job.replication.backups > 0) docs.push_back(ShardBudget(k));
  docs.push_back(IngressPolicy(k));
  std::string out = Header(job, options);
  for (const Node& d : docs) {
    out += "---\n";
    out += ToYaml(d);
  }
  return out;
}

std::string RenderKubernetesLateWorkers(const JobSpec& job, const RenderOptions& options) {
  if (!job.membership.elastic || options.workload != "pods") return "";
  const RenderContext k = Context(job, options);
  std::vector<Node> docs;
  for (const Set& set : Sets(job))
    if (set.max_replicas > set.replicas) AppendPods(k, set, docs, set.replicas, set.max_replicas);
  if (docs.empty()) return "";
  std::string out = "# Geodesic job '" + job.name +
                    "': the pods of the worker ids kept for workers that join later (membership.elastic),\n"
                    "# rendered by `geodesic deploy render --target kubernetes --workload pods`. Play one pod (its\n"
                    "# claim and itself) to add a worker, as scaling its StatefulSet up would.\n";
  for (const Node& d : docs) out += "---\n" + ToYaml(d);
  return out;
}

StatusOr<std::string> RenderKubernetesSecrets(const JobSpec& job, const RenderOptions& options,
                                              const std::string& secret, const transport::CurveKeyPair& keys,
                                              int64_t now_unix) {
  const RenderContext k = Context(job, options);
  Node coordinator = OpaqueSecret(k, kCoordinatorSecret, Labels(k, "coordinator", job.CoordinatorRegion().name));
  coordinator["stringData"]["secret"] = secret;
  coordinator["stringData"]["keypair"] = keys.public_key + "\n" + keys.secret_key + "\n";
  Node key = OpaqueSecret(k, kKeySecret, Labels(k, "job", ""));
  key["stringData"]["coordinator.key"] = keys.public_key + "\n";
  Node metrics = OpaqueSecret(k, kMetricsSecret, Labels(k, "job", ""));
  metrics["stringData"]["token"] = MetricsToken(secret, job.name);
  std::vector<Node> docs = {coordinator, key, metrics};
  for (const Set& set : Sets(job)) {
    if (set.component == "coordinator") continue;
    GD_ASSIGN_OR_RETURN(Node tokens, TokenSecretOf(k, set, secret, now_unix));
    docs.push_back(std::move(tokens));
  }
  std::string out = "# Geodesic job '" + job.name +
                    "': its Secrets for Kubernetes (rendered by `geodesic deploy render --target kubernetes`).\n"
                    "# The job secret, the coordinator's CURVE keypair and every member's join token, valid for\n"
                    "# security.token_ttl_s (" +
                    std::to_string(job.security.token_ttl_s) +
                    " s) from rendering. Keep this file private; apply it before kubernetes.yaml.\n";
  for (const Node& d : docs) out += "---\n" + ToYaml(d);
  return out;
}

}  // namespace geodesic::deploy

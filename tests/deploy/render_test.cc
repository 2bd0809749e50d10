// deploy/render.h: the hosts target places every process once, with
// distinct ports, renders identical files twice, writes scripts bash
// accepts, carries the job's name and link matrix, gives a secured job's
// hosts their own secrets, and refuses what it cannot express with a clear
// error.
#include "deploy/render.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <numeric>
#include <regex>
#include <set>
#include <tuple>

#include "common/files.h"
#include "deploy/scrape_config.h"
#include "tests/scratch_dir.h"
#include "tests/test_paths.h"
#include "transport/security.h"

namespace geodesic::deploy {
namespace {

JobSpec Load(const std::string& example, const std::vector<std::string>& overrides = {}) {
  auto job = LoadJobFile(::geodesic::testing::SourcePath("examples/") + example, overrides);
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

// The text of `file` rendered for `target` (empty, and a failure, if the
// render fails).
std::string Rendered(const JobSpec& job, const std::string& target, const std::string& file) {
  auto files = Render(job, {.target = target});
  EXPECT_TRUE(files.ok()) << files.status();
  return files.ok() && files->contains(file) ? files->at(file) : "";
}

// Three regions on three hosts, links declared, a backup per shard.
JobSpec ThreeHosts() {
  return Load("three_regions.yaml", {"regions.us.host=10.0.0.1", "regions.eu.host=10.0.0.2",
                                     "regions.asia.host=node-3.example", "replication.backups=1"});
}

TEST(RenderHostsTest, EveryProcessIsStartedOnceOnItsRegionsHost) {
  const JobSpec job = ThreeHosts();
  auto files = Render(job, {});
  ASSERT_TRUE(files.ok()) << files.status();
  auto placed = PlaceProcesses(job, {});
  ASSERT_TRUE(placed.ok());
  ASSERT_EQ(placed->size(), 2 + 2u * job.NumServers() + job.NumWorkers());
  std::set<std::string> started;
  const std::regex start_line(R"(^start (\S+) (\S+) .*--http-bind (\S+):(\d+)$)");
  for (const std::string host : {"10.0.0.1", "10.0.0.2", "node-3.example"}) {
    ASSERT_TRUE(files->contains("host-" + host + ".sh")) << host;
    std::istringstream script(files->at("host-" + host + ".sh"));
    for (std::string line; std::getline(script, line);) {
      std::smatch m;
      if (!std::regex_match(line, m, start_line)) continue;
      EXPECT_TRUE(started.insert(m[1]).second) << m[1] << " started twice";
      EXPECT_EQ(m[3], host) << line;
      if (m[2] != "coordinator") {
        EXPECT_NE(line.find("--coordinator tcp://10.0.0.1:7400"), std::string::npos) << line;
      }
    }
  }
  EXPECT_EQ(started.size(), placed->size());
  std::set<int> ports;
  for (const auto& p : *placed) {
    EXPECT_TRUE(started.contains(p.name)) << p.name;
    if (p.port) {
      EXPECT_TRUE(ports.insert(p.port).second) << p.name;
    }
    EXPECT_TRUE(ports.insert(p.http_port).second) << p.name;
    if (p.name == "evaluator") {
      EXPECT_EQ(p.host, job.RegionOfWorker(0).host) << "the evaluator reads worker 0's snapshots";
    }
    if (p.name == "backup-0") {
      EXPECT_EQ(p.region, job.RegionOfBackup(0).name);
    }
  }
  EXPECT_EQ(Render(job, {}).value(), *files) << "rendering twice gives identical files";
}

// A region's aggregator starts on its region's host with a port of its own,
// and that region's workers are told to push there; other regions' are not.
TEST(RenderHostsTest, AnAggregatorStartsOnItsRegionsHostAndItsWorkersPushThere) {
  const JobSpec job =
      Load("three_regions.yaml", {"regions.us.host=10.0.0.1", "regions.eu.host=10.0.0.2", "regions.asia.host=10.0.0.3",
                                  "regions.us.aggregator=true", "regions.asia.aggregator=true"});
  auto files = Render(job, {});
  ASSERT_TRUE(files.ok()) << files.status();
  auto placed = PlaceProcesses(job, {});
  ASSERT_TRUE(placed.ok());
  ASSERT_EQ(placed->size(), 2 + job.NumServers() + job.NumWorkers() + 2u);
  std::map<std::string, std::string> endpoint;  // region -> its aggregator's
  for (const auto& p : *placed)
    if (p.role == "aggregator") endpoint[p.region] = "tcp://" + p.host + ":" + std::to_string(p.port);
  ASSERT_EQ(endpoint.size(), 2u);
  EXPECT_EQ(endpoint["us"].rfind("tcp://10.0.0.1:", 0), 0u) << endpoint["us"];
  const std::string us = files->at("host-10.0.0.1.sh"), eu = files->at("host-10.0.0.2.sh");
  EXPECT_NE(us.find("start aggregator-0 aggregator --job \"$here/job.yaml\" --region us --bind " + endpoint["us"]),
            std::string::npos)
      << us;
  const std::regex worker_line(R"(^start (worker-\d+) .*$)");
  for (const auto& [script, want] : {std::pair{us, endpoint["us"]}, std::pair{eu, std::string()}}) {
    std::istringstream in(script);
    int workers = 0;
    for (std::string line; std::getline(in, line);) {
      if (!std::regex_match(line, worker_line)) continue;
      ++workers;
      const size_t at = line.find("--aggregator ");
      if (want.empty())
        EXPECT_EQ(at, std::string::npos) << line;
      else
        EXPECT_NE(line.find("--aggregator " + want), std::string::npos) << line;
    }
    EXPECT_EQ(workers, 2);
  }
}

// Kubernetes: an aggregator per region that has one, a StatefulSet of one
// pod behind a headless Service, and that region's workers told its pod's
// stable DNS name; the others are not.
TEST(RenderKubernetesTest, AnAggregatorIsAStatefulSetOfOneThatItsRegionsWorkersPushTo) {
  const std::string yaml =
      Rendered(Load("three_regions.yaml", {"regions.us.aggregator=true"}), "kubernetes", "kubernetes.yaml");
  EXPECT_NE(yaml.find("kind: \"StatefulSet\"\nmetadata:\n  name: \"aggregator-us\"\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("kind: \"Service\"\nmetadata:\n  name: \"aggregator-us\"\n"), std::string::npos);
  EXPECT_NE(yaml.find("serviceName: \"aggregator-us\"\n  replicas: 1\n"), std::string::npos);
  EXPECT_EQ(yaml.find("name: aggregator-eu"), std::string::npos);
  const std::string endpoint = "tcp://aggregator-us-0.aggregator-us:7400";
  size_t at = 0;
  int told = 0;
  while ((at = yaml.find(endpoint, at)) != std::string::npos) ++told, ++at;
  EXPECT_EQ(told, 2) << "worker-0 (a set of its own, in us) and worker-us; not eu's or asia's";
  EXPECT_NE(yaml.find("- \"--region\"\n            - \"us\"\n"), std::string::npos);
  EXPECT_NE(yaml.find("aggregator-0.json"), std::string::npos);
}

// Compose: the aggregator is a container on its region's network, dialled
// by its name; the link router has no route to it (only its region's
// workers reach it).
TEST(RenderComposeTest, AnAggregatorIsAContainerOnItsRegionsNetwork) {
  const JobSpec job = Load("three_regions.yaml", {"regions.eu.aggregator=true"});
  const RenderOptions compose{.target = "compose"};
  const std::string yaml = Rendered(job, "compose", "compose.yaml");
  EXPECT_NE(yaml.find("  aggregator-1:\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("tcp://aggregator-1:7400"), std::string::npos);
  auto placed = ComposeProcesses(job, compose);
  ASSERT_TRUE(placed.ok());
  for (const PlacedProcess& p : *placed) {
    if (p.role == "worker") {
      EXPECT_EQ(p.aggregator, p.region == "eu" ? "tcp://aggregator-1:7400" : "") << p.name;
    }
  }
  auto routes = RouterRoutes(job, compose);
  ASSERT_TRUE(routes.ok());
  for (const RouterRoute& r : *routes) EXPECT_NE(r.target, "aggregator-1");
}

TEST(RenderHostsTest, ScriptsParseAndCarryTheJobAndItsLinks) {
  const JobSpec job = ThreeHosts();
  auto files = Render(job, {.base_port = 20000, .http_base_port = 21000});
  ASSERT_TRUE(files.ok()) << files.status();
  const geodesic::testing::ScratchDir scratch("gd-render");
  const std::string dir = scratch / "hosts";
  ASSERT_TRUE(WriteRendered(dir, *files).ok());
  for (const auto& [name, text] : *files) {
    if (name.ends_with(".sh")) {
      EXPECT_EQ(std::system(("bash -n " + dir + "/" + name).c_str()), 0) << name << ":\n" << text;
      EXPECT_NE(std::filesystem::status(dir + "/" + name).permissions() & std::filesystem::perms::owner_exec,
                std::filesystem::perms::none);
      EXPECT_NE(text.find("Geodesic job '" + job.name + "'"), std::string::npos) << name;
      EXPECT_NE(text.find("us -> asia: 160 ms RTT, 50 Mbit/s, loss 0.01"), std::string::npos) << text;
      EXPECT_NE(text.find(":2000"), std::string::npos) << "--base-port is used";
    }
  }
  // The rendered job is the job: the roles read the same spec (without the
  // launcher's emulation, which does not exist between real hosts).
  auto back = LoadJobFile(dir + "/job.yaml");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->wan.emulation, WanEmulation::kNone);
  EXPECT_EQ(back->wan.links.size(), job.wan.links.size());
  EXPECT_EQ(back->NumWorkers(), job.NumWorkers());
  EXPECT_NE(files->at("prometheus.yml").find("node-3.example:21"), std::string::npos);
}

TEST(RenderHostsTest, WhatTheTargetCannotExpressIsAClearError) {
  auto expect_error = [](const JobSpec& job, const RenderOptions& o, const std::string& says) {
    auto files = Render(job, o);
    ASSERT_FALSE(files.ok()) << says;
    EXPECT_EQ(files.status().code(), Code::kInvalidArgument);
    EXPECT_NE(files.status().message().find(says), std::string::npos) << files.status();
  };
  const JobSpec job = ThreeHosts();
  expect_error(job, {.target = "swarm"}, "unknown target 'swarm'");
  expect_error(job, {.base_port = 9400, .http_base_port = 9405}, "overlap");
  expect_error(job, {.base_port = 65530}, "do not fit");
  expect_error(Load("federated.yaml"), {}, "federated jobs are not rendered yet");
  JobSpec script = job;
  script.model.name = ModelKind::kTorchScript;
  script.model.path = "/models/m.pt";
  expect_error(script, {.target = "kubernetes"}, "the image does not hold /models/m.pt");
  expect_error(script, {.target = "compose"}, "the image does not hold /models/m.pt");
  EXPECT_TRUE(Render(script, {}).ok());  // hosts: the file is at that path on every host
  JobSpec cifar = job;
  cifar.model.name = ModelKind::kMlp;
  cifar.data.dataset = DatasetKind::kCifar10;
  cifar.data.path = "/data/cifar";
  expect_error(cifar, {.target = "kubernetes"}, "data.dataset cifar10: the image holds only Fashion-MNIST");
  EXPECT_TRUE(Render(cifar, {}).ok());
}

// A secured job: the coordinator's script names the secret and keypair, every
// other process its own token and the coordinator's public key; the secrets
// are private files, the tokens verify for their process, and a second
// render keeps the secret and keypair (tokens already handed out stay good).
TEST(RenderHostsTest, ASecuredJobGetsItsSecretsPerHost) {
  const JobSpec job = Load("fashion_mnist.yaml", {"security.mode=curve", "regions.us-east.host=10.0.0.1",
                                                  "regions.eu-west.host=10.0.0.2", "regions.eu-west.aggregator=true"});
  auto files = Render(job, {});
  ASSERT_TRUE(files.ok()) << files.status();
  const std::string& us = files->at("host-10.0.0.1.sh");
  EXPECT_NE(us.find("start coordinator coordinator --job \"$here/job.yaml\" --bind tcp://10.0.0.1:7400"),
            std::string::npos);
  EXPECT_NE(us.find("--secret-file \"$here/secrets/host-10.0.0.1/secret\" --keypair-file"), std::string::npos) << us;
  EXPECT_NE(files->at("host-10.0.0.2.sh")
                .find("--coordinator-key-file \"$here/coordinator.key\" --token-file "
                      "\"$here/secrets/host-10.0.0.2/server-1.token\""),
            std::string::npos)
      << files->at("host-10.0.0.2.sh");
  EXPECT_NE(files->at("host-10.0.0.2.sh").find("--token-file \"$here/secrets/host-10.0.0.2/aggregator-1.token\""),
            std::string::npos);
  const std::string dir = std::filesystem::temp_directory_path() / ("gd-secrets-" + std::to_string(::getpid()));
  ASSERT_TRUE(WriteRendered(dir, *files).ok());
  ASSERT_TRUE(WriteSecrets(job, {}, dir).ok());
  const std::string coord = dir + "/secrets/host-10.0.0.1/";
  auto secret = transport::LoadSecret(coord + "secret");  // refuses a file others may read
  ASSERT_TRUE(secret.ok()) << secret.status();
  const std::string key = ReadFile(dir + "/coordinator.key").value();
  EXPECT_TRUE(transport::IsCurveKey(key.substr(0, 40))) << key;
  for (const auto& [name, host, role, id] : std::vector<std::tuple<std::string, std::string, std::string, int>>{
           {"server-1", "10.0.0.2", "server", 1},
           {"worker-3", "10.0.0.2", "worker", 3},
           {"aggregator-1", "10.0.0.2", "aggregator", 1},
           {"evaluator", "10.0.0.1", "evaluator", 0}}) {
    const std::string path = dir + "/secrets/host-" + host + "/" + name + ".token";
    EXPECT_EQ(std::filesystem::status(path).permissions(),
              std::filesystem::perms::owner_read | std::filesystem::perms::owner_write)
        << path;
    auto token = ReadFile(path);
    ASSERT_TRUE(token.ok()) << path;
    EXPECT_TRUE(
        transport::VerifyToken(*secret, token->substr(0, token->find('\n')), job.name, role, id, transport::UnixNow())
            .ok())
        << name;
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/secrets/host-10.0.0.2/secret")) << "the secret stays on one host";
  ASSERT_TRUE(WriteSecrets(job, {}, dir).ok());
  EXPECT_EQ(transport::LoadSecret(coord + "secret").value(), *secret);
  EXPECT_EQ(ReadFile(dir + "/coordinator.key").value(), key);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace geodesic::deploy

namespace geodesic::deploy {
namespace {

std::vector<YAML::Node> Documents(const std::string& text) {
  std::vector<YAML::Node> docs;
  for (const YAML::Node& d : YAML::LoadAll(text))
    if (d.IsMap()) docs.push_back(d);
  return docs;
}

std::string Arg(const YAML::Node& container, const std::string& flag) {
  const YAML::Node args = container["args"];
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i].as<std::string>() == flag) return args[i + 1].as<std::string>();
  return "";
}

// A pod (a StatefulSet's template or a Pod) of the rendered job: ports,
// probes, quoting, and the member ids it serves as the pods with
// `ordinals` (added to `ids`, by component), each in the region its node
// affinity names.
void CheckPodSpec(const JobSpec& job, const YAML::Node& pod, const std::vector<int>& ordinals,
                  std::map<std::string, std::set<int>>* ids) {
  const std::string region = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                                ["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0]
                                    .as<std::string>();
  std::set<int> http_ports;
  for (const YAML::Node& c : pod["spec"]["containers"]) {
    for (const YAML::Node& a : c["args"]) EXPECT_EQ(a.Tag(), "!") << "quoted: " << a.as<std::string>();
    for (const YAML::Node& e : c["env"]) {
      if (e["value"]) {
        EXPECT_EQ(e["value"].Tag(), "!");
      }
    }
    const std::string http = Arg(c, "--http-bind");
    const int port = std::stoi(http.substr(http.find(':') + 1));
    EXPECT_TRUE(http_ports.insert(port).second) << "two containers of a pod on one port";
    EXPECT_EQ(c["livenessProbe"]["httpGet"]["port"].as<int>(), port);
    EXPECT_EQ(c["readinessProbe"]["httpGet"]["path"].as<std::string>(), "/readyz");
    EXPECT_TRUE(c["resources"]["requests"]["cpu"] && c["resources"]["limits"]["memory"]);
    const std::string role = c["args"][0].as<std::string>();
    if (role != "server" && role != "worker") continue;
    const std::string component = role == "worker"                               ? "worker"
                                  : c["args"][1].as<std::string>() == "--backup" ? "backup"
                                                                                 : "server";
    const int offset = std::stoi(Arg(c, "--id-from-hostname"));
    for (int ordinal : ordinals) {
      const int id = offset + ordinal;
      EXPECT_TRUE((*ids)[component].insert(id).second) << component << " " << id << " twice";
      const RegionSpec& r = component == "worker"   ? job.RegionOfWorker(id)
                            : component == "backup" ? job.RegionOfBackup(id)
                                                    : job.RegionOfServer(id);
      EXPECT_EQ(r.name, region) << component << " " << id;
    }
    if (component == "worker" && offset == 0) {
      EXPECT_EQ(pod["spec"]["containers"].size(), 2u) << "worker 0 has the evaluator beside it";
    }
  }
}

// One StatefulSet: its selector matches its pods' labels; its pods listen
// on their IP from the downward API.
void CheckStatefulSet(const JobSpec& job, const YAML::Node& d, std::map<std::string, std::set<int>>* ids) {
  const YAML::Node spec = d["spec"], pod = spec["template"];
  for (const auto& l : spec["selector"]["matchLabels"])
    EXPECT_EQ(pod["metadata"]["labels"][l.first.as<std::string>()].as<std::string>(), l.second.as<std::string>());
  std::vector<int> ordinals(spec["replicas"].as<int>());
  std::iota(ordinals.begin(), ordinals.end(), 0);
  CheckPodSpec(job, pod, ordinals, ids);
  // A StatefulSet restarts a process that exits: finished ones hold.
  for (const YAML::Node& c : pod["spec"]["containers"]) {
    bool hold = false;
    for (const YAML::Node& a : c["args"]) hold |= a.as<std::string>() == "--hold-after-exit";
    EXPECT_TRUE(hold) << c["name"].as<std::string>();
  }
  const std::string bind = Arg(pod["spec"]["containers"][0], "--bind");
  if (!bind.empty()) {
    EXPECT_EQ(bind, "tcp://$(POD_IP):7400");
  }
}

// The three-region job with a backup per shard: every object is where it
// belongs, every member id is served by exactly one StatefulSet pod in its
// region, probes and ports agree, strings stay strings.
TEST(RenderKubernetesTest, EveryMemberIsOnePodOfAStatefulSetInItsRegion) {
  const JobSpec job = Load("three_regions.yaml", {"replication.backups=1"});
  auto text = RenderKubernetes(job, {.target = "kubernetes"});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_NE(text->find("# Geodesic job 'three-regions'"), std::string::npos);
  EXPECT_NE(text->find("#   us -> asia: 160 ms RTT, 50 Mbit/s"), std::string::npos);
  const auto docs = Documents(*text);
  ASSERT_GE(docs.size(), 3u);
  EXPECT_EQ(docs[0]["kind"].as<std::string>(), "Namespace");
  const std::string ns = docs[0]["metadata"]["name"].as<std::string>();
  EXPECT_EQ(ns, "geodesic-three-regions");
  auto job_back = ParseJob(docs[1]["data"]["job.yaml"].as<std::string>(), "configmap");
  ASSERT_TRUE(job_back.ok()) << job_back.status();
  EXPECT_EQ(job_back->NumWorkers(), job.NumWorkers());
  std::set<std::string> services;
  std::map<std::string, std::set<int>> ids;  // component -> ids served
  int budgets = 0;
  for (const YAML::Node& d : docs) {
    const std::string kind = d["kind"].as<std::string>();
    if (kind != "Namespace") {
      EXPECT_EQ(d["metadata"]["namespace"].as<std::string>(), ns);
    }
    if (kind == "Service") services.insert(d["metadata"]["name"].as<std::string>());
    if (kind == "PodDisruptionBudget") {
      ++budgets;
      EXPECT_EQ(d["spec"]["maxUnavailable"].as<int>(), 1);
    }
    if (kind == "StatefulSet") {
      EXPECT_TRUE(services.contains(d["spec"]["serviceName"].as<std::string>())) << "its Service comes first";
      CheckStatefulSet(job, d, &ids);
    }
  }
  EXPECT_EQ(ids["server"].size(), static_cast<size_t>(job.NumServers()));
  EXPECT_EQ(ids["backup"].size(), static_cast<size_t>(job.NumServers()));
  EXPECT_EQ(ids["worker"].size(), static_cast<size_t>(job.NumWorkers()));
  EXPECT_TRUE(services.contains("coordinator"));
  EXPECT_EQ(budgets, 1);
  EXPECT_EQ(RenderKubernetes(job, {.target = "kubernetes"}).value(), *text) << "rendering twice gives identical files";
}

// A member container's join token, checked against the job secret: the
// token its --token-file names (in pod `pod`) in the Secret its pod mounts
// at that directory. Returns whether it verified.
bool CheckToken(const JobSpec& job, const YAML::Node& spec, const YAML::Node& c, const std::string& pod,
                const std::map<std::string, YAML::Node>& secrets, const std::string& secret) {
  std::string file = Arg(c, "--token-file");
  if (auto at = file.find("$(POD_NAME)"); at != std::string::npos) file.replace(at, 11, pod);
  EXPECT_EQ(Arg(c, "--coordinator-key-file"), "/var/run/secrets/geodesic/coordinator/coordinator.key");
  std::string secret_name;
  for (const YAML::Node& v : spec["volumes"])
    if (v["name"].as<std::string>() == "tokens") secret_name = v["secret"]["secretName"].as<std::string>();
  if (!secrets.contains(secret_name)) return false;
  const YAML::Node token = secrets.at(secret_name)[file.substr(file.rfind('/') + 1)];
  if (!token) return false;
  const std::string role = c["args"][0].as<std::string>();
  const int id = role == "eval" ? 0
                 : role == "aggregator"
                     ? job.RegionIndex(Arg(c, "--region"))
                     : std::stoi(Arg(c, "--id-from-hostname")) + std::stoi(pod.substr(pod.rfind('-') + 1));
  auto claims = transport::VerifyToken(secret, token.as<std::string>(), job.name, role == "eval" ? "evaluator" : role,
                                       id, transport::UnixNow());
  EXPECT_TRUE(claims.ok()) << pod << " " << role << ": " << claims.status();
  return claims.ok();
}

// A secured job: the coordinator takes the job secret and its keypair from
// a Secret through its environment; every other process's token, minted
// for its role and id, and the coordinator's public key come from Secrets
// its pod mounts; the Secrets file is private, and a second render keeps the
// secret and keypair (members holding tokens stay admitted).
TEST(RenderKubernetesTest, ASecuredJobTakesItsCredentialsFromSecrets) {
  const JobSpec job =
      Load("three_regions.yaml", {"security.mode=curve", "replication.backups=1", "regions.eu.aggregator=true"});
  for (const std::string workload : {"statefulsets", "pods"}) {
    const RenderOptions o{.target = "kubernetes", .workload = workload};
    auto text = RenderKubernetes(job, o);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(*RenderKubernetes(job, o), *text);
    const geodesic::testing::ScratchDir scratch("k8s-secrets");
    const std::string dir = scratch.path();
    ASSERT_TRUE(WriteSecrets(job, o, dir).ok());
    const std::string file = dir + "/kubernetes-secrets.yaml";
    EXPECT_EQ(std::filesystem::status(file).permissions(),
              std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    std::map<std::string, YAML::Node> secrets;
    for (const YAML::Node& d : Documents(ReadFile(file).value()))
      secrets[d["metadata"]["name"].as<std::string>()] = d["stringData"];
    const std::string secret = secrets["geodesic-coordinator"]["secret"].as<std::string>();
    auto keys = transport::ParseKeyPair(secrets["geodesic-coordinator"]["keypair"].as<std::string>(), "keypair");
    ASSERT_TRUE(keys.ok()) << keys.status();
    EXPECT_EQ(secrets["geodesic-coordinator-key"]["coordinator.key"].as<std::string>(), keys->public_key + "\n");
    int verified = 0;
    for (const YAML::Node& d : Documents(*text)) {
      const std::string kind = d["kind"].as<std::string>(), name = d["metadata"]["name"].as<std::string>();
      if (kind != "Pod" && kind != "StatefulSet") continue;
      const YAML::Node spec = kind == "Pod" ? d["spec"] : d["spec"]["template"]["spec"];
      EXPECT_EQ(spec["securityContext"]["fsGroup"].as<int>(), 10001) << "Secret files readable by the image's user";
      const int replicas = kind == "Pod" ? 1 : d["spec"]["replicas"].as<int>();
      for (const YAML::Node& c : spec["containers"]) {
        if (c["args"][0].as<std::string>() == "coordinator") {
          std::set<std::string> from_secret;
          for (const YAML::Node& e : c["env"])
            if (e["valueFrom"] && e["valueFrom"]["secretKeyRef"] &&
                e["valueFrom"]["secretKeyRef"]["name"].as<std::string>() == "geodesic-coordinator")
              from_secret.insert(e["valueFrom"]["secretKeyRef"]["key"].as<std::string>());
          EXPECT_EQ(from_secret, (std::set<std::string>{"secret", "keypair"}));
          continue;
        }
        for (int ordinal = 0; ordinal < replicas; ++ordinal)
          verified +=
              CheckToken(job, spec, c, kind == "Pod" ? name : name + "-" + std::to_string(ordinal), secrets, secret);
      }
    }
    EXPECT_EQ(verified, 2 * job.NumServers() + job.NumWorkers() + 1 + 1) << workload << " (and eu's aggregator)";
    ASSERT_TRUE(WriteSecrets(job, o, dir).ok());
    EXPECT_EQ(Documents(ReadFile(file).value())[0]["stringData"]["keypair"].as<std::string>(),
              secrets["geodesic-coordinator"]["keypair"].as<std::string>())
        << "a second render keeps the keypair";
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace geodesic::deploy

namespace geodesic::deploy {
namespace {

// Workload "pods", for podman play kube: the same members as Pods named as
// a StatefulSet names its pods, each after its own data claim, listening on
// its host name (no downward API), finished processes staying finished.
TEST(RenderKubernetesTest, PodsWorkloadServesEveryMemberOnceWithoutTheDownwardApi) {
  const JobSpec job = Load("three_regions.yaml", {"replication.backups=1"});
  auto text = RenderKubernetes(job, {.target = "kubernetes", .workload = "pods"});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->find("kind: \"StatefulSet\""), std::string::npos);
  EXPECT_EQ(text->find("status.podIP"), std::string::npos);
  std::set<std::string> services, claims, pods;
  std::map<std::string, std::set<int>> ids;
  for (const YAML::Node& d : Documents(*text)) {
    const std::string kind = d["kind"].as<std::string>(), name = d["metadata"]["name"].as<std::string>();
    if (kind == "Service") services.insert(name);
    if (kind == "PersistentVolumeClaim") claims.insert(name);
    if (kind != "Pod") continue;
    pods.insert(name);
    const YAML::Node spec = d["spec"];
    EXPECT_EQ(spec["hostname"].as<std::string>(), name);
    EXPECT_EQ(spec["restartPolicy"].as<std::string>(), "OnFailure");
    EXPECT_TRUE(claims.contains(spec["volumes"][1]["persistentVolumeClaim"]["claimName"].as<std::string>()))
        << name << ": its claim comes first";
    const std::string bind = Arg(spec["containers"][0], "--bind");
    if (!bind.empty()) {
      EXPECT_EQ(bind, "tcp://" + name + ":7400");
    }
    if (name == "coordinator") continue;
    EXPECT_TRUE(services.contains(spec["subdomain"].as<std::string>())) << name;
    CheckPodSpec(job, d, {std::stoi(name.substr(name.rfind('-') + 1))}, &ids);
  }
  EXPECT_TRUE(pods.contains("coordinator"));
  EXPECT_EQ(ids["server"].size(), static_cast<size_t>(job.NumServers()));
  EXPECT_EQ(ids["backup"].size(), static_cast<size_t>(job.NumServers()));
  EXPECT_EQ(ids["worker"].size(), static_cast<size_t>(job.NumWorkers()));
  EXPECT_EQ(pods.size(), 1 + 2u * job.NumServers() + job.NumWorkers());
  EXPECT_FALSE(RenderKubernetes(job, {.target = "kubernetes", .workload = "deployments"}).ok());
  EXPECT_EQ(text->find("--hold-after-exit"), std::string::npos) << "Pods let finished processes exit";
  EXPECT_EQ(RenderKubernetesLateWorkers(job, {.target = "kubernetes", .workload = "pods"}), "");
}

// Elastic jobs: the pods a scale-up would create, apart, with the ids kept
// for late workers; every pod names its stats file by its id.
TEST(RenderKubernetesTest, ElasticJobsRenderTheLateWorkersPodsApart) {
  const JobSpec job = Load("elastic.yaml", {});
  const RenderOptions o{.target = "kubernetes", .workload = "pods"};
  auto text = RenderKubernetes(job, o);
  ASSERT_TRUE(text.ok()) << text.status();
  const std::string late = RenderKubernetesLateWorkers(job, o);
  std::map<std::string, std::set<int>> initial, later;
  for (const auto& [docs, ids] : {std::pair{Documents(*text), &initial}, std::pair{Documents(late), &later}})
    for (const YAML::Node& d : docs) {
      const std::string name = d["metadata"]["name"].as<std::string>();
      if (d["kind"].as<std::string>() != "Pod" || name == "coordinator") continue;
      CheckPodSpec(job, d, {std::stoi(name.substr(name.rfind('-') + 1))}, ids);
      EXPECT_NE(Arg(d["spec"]["containers"][0], "--stats-file").find("/stats/"), std::string::npos) << name;
    }
  EXPECT_EQ(initial["worker"], (std::set<int>{0, 1, 4, 5}));
  EXPECT_EQ(later["worker"], (std::set<int>{2, 3, 6, 7}));
  EXPECT_TRUE(later["server"].empty());
}

// The compose target: a service per process, hostname = service name, on
// its region's network alone; the router on every region's network; each
// process routes exactly the listeners of other regions through the router's
// port for (its region, that listener), as the router itself computes them.
TEST(RenderComposeTest, EveryProcessIsAServiceOnItsRegionsNetworkReachingOtherRegionsOnlyThroughTheRouter) {
  const JobSpec job = Load("three_regions.yaml", {"replication.backups=1"});
  const RenderOptions o{.target = "compose", .image = "localhost/geodesic:test"};
  auto files = Render(job, o);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(*files, *Render(job, o)) << "rendering twice gives identical files";
  ASSERT_TRUE(files->contains("job.yaml"));
  const std::string& text = files->at("compose.yaml");
  EXPECT_NE(text.find("three-regions"), std::string::npos);
  EXPECT_NE(text.find("us -> asia: 160 ms RTT, 50 Mbit/s"), std::string::npos);
  const YAML::Node doc = YAML::Load(text);
  auto placed = ComposeProcesses(job, o);
  auto routes = RouterRoutes(job, o);
  ASSERT_TRUE(placed.ok() && routes.ok());
  EXPECT_EQ(doc["services"].size(), placed->size() + 1);
  EXPECT_EQ(doc["services"]["wan"]["networks"].size(), job.regions.size());
  std::set<int> router_ports;
  for (const RouterRoute& r : *routes) EXPECT_TRUE(router_ports.insert(r.port).second) << r.port;
  size_t listeners = 0;
  for (const PlacedProcess& p : *placed) listeners += p.port != 0;
  EXPECT_EQ(routes->size(), listeners * (job.regions.size() - 1)) << "one route per region and foreign listener";
  for (const PlacedProcess& p : *placed) {
    const YAML::Node s = doc["services"][p.name];
    ASSERT_TRUE(s.IsMap()) << p.name;
    EXPECT_EQ(s["hostname"].as<std::string>(), p.name);
    EXPECT_EQ(s["image"].as<std::string>(), "localhost/geodesic:test");
    ASSERT_EQ(s["networks"].size(), 1u) << p.name;
    EXPECT_EQ(s["networks"][0].as<std::string>(), "region-" + p.region);
    EXPECT_EQ(s["command"][0].as<std::string>(), p.role);
    std::string advertised;
    for (size_t i = 0; i + 1 < s["command"].size(); ++i)
      if (s["command"][i].as<std::string>() == "--advertise") advertised = s["command"][i + 1].as<std::string>();
    EXPECT_EQ(advertised, p.role == "server" ? "tcp://" + p.name + ":7400" : "")
        << p.name << ": shards advertise their names, which the routes know";
    std::set<std::string> routed;
    for (size_t i = 0; i + 1 < s["command"].size(); ++i) {
      if (s["command"][i].as<std::string>() != "--route") continue;
      const std::string spec = s["command"][i + 1].as<std::string>();
      const std::string target = spec.substr(6, spec.find(':', 6) - 6);
      routed.insert(target);
      auto r = std::find_if(routes->begin(), routes->end(),
                            [&](const RouterRoute& r) { return r.client_region == p.region && r.target == target; });
      ASSERT_NE(r, routes->end()) << spec;
      EXPECT_EQ(spec, "tcp://" + target + ":7400=tcp://wan:" + std::to_string(r->port));
    }
    for (const PlacedProcess& q : *placed)
      EXPECT_EQ(routed.contains(q.name), q.port != 0 && q.region != p.region) << p.name << " -> " << q.name;
  }
  auto secured = Render(Load("three_regions.yaml", {"security.mode=curve"}), o);
  ASSERT_FALSE(secured.ok());
  EXPECT_NE(secured.status().message().find("compose does not render security.mode: curve"), std::string::npos);
}

}  // namespace
}  // namespace geodesic::deploy

namespace geodesic::deploy {
namespace {

// The ports of a NetworkPolicy ingress rule (empty: every port).
std::set<int> RulePorts(const YAML::Node& rule) {
  std::set<int> ports;
  for (const YAML::Node& p : rule["ports"]) ports.insert(p["port"].as<int>());
  return ports;
}

// Who may open a connection to the HTTP ports (/metrics, the probes): the
// job's own pods and the monitoring namespace's, never everyone (the
// kubelet's probes come from the node, which no NetworkPolicy blocks).
// The ZeroMQ port stays open to all, as without a policy.
TEST(RenderKubernetesTest, OnlyTheJobsPodsAndMonitoringReachTheHttpPorts) {
  const JobSpec job = Load("three_regions.yaml", {"replication.backups=1"});
  for (const std::string workload : {"statefulsets", "pods"}) {
    RenderOptions o{.target = "kubernetes", .workload = workload};
    o.metrics_namespace = "prom";
    auto text = RenderKubernetes(job, o);
    ASSERT_TRUE(text.ok()) << text.status();
    std::vector<YAML::Node> policies;
    std::set<int> http_ports;
    std::vector<YAML::Node> pod_labels;
    for (const YAML::Node& d : Documents(*text)) {
      const std::string kind = d["kind"].as<std::string>();
      if (kind == "NetworkPolicy") policies.push_back(d);
      if (kind != "Pod" && kind != "StatefulSet") continue;
      const YAML::Node pod = kind == "Pod" ? d : d["spec"]["template"];
      pod_labels.push_back(pod["metadata"]["labels"]);
      for (const YAML::Node& c : pod["spec"]["containers"]) {
        const std::string http = Arg(c, "--http-bind");
        http_ports.insert(std::stoi(http.substr(http.find(':') + 1)));
        http_ports.insert(c["livenessProbe"]["httpGet"]["port"].as<int>());
      }
    }
    ASSERT_EQ(policies.size(), 1u) << workload;
    const YAML::Node spec = policies[0]["spec"];
    EXPECT_EQ(spec["policyTypes"][0].as<std::string>(), "Ingress");
    for (const YAML::Node& labels : pod_labels)
      for (const auto& l : spec["podSelector"]["matchLabels"])
        EXPECT_EQ(labels[l.first.as<std::string>()].as<std::string>(), l.second.as<std::string>())
            << "the policy selects every pod";
    std::set<int> from_monitoring;
    bool own_pods = false;
    for (const YAML::Node& rule : spec["ingress"]) {
      const std::set<int> ports = RulePorts(rule);
      if (!rule["from"]) {
        EXPECT_EQ(ports, std::set<int>{7400}) << "only ZeroMQ is open to every source";
        continue;
      }
      ASSERT_EQ(rule["from"].size(), 1u);
      const YAML::Node from = rule["from"][0];
      if (from["podSelector"] && !from["namespaceSelector"]) {
        own_pods = from["podSelector"].size() == 0 && ports.empty();
      } else {
        EXPECT_EQ(from["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"].as<std::string>(), "prom");
        from_monitoring.insert(ports.begin(), ports.end());
      }
    }
    EXPECT_TRUE(own_pods) << "the job's pods reach each other on every port";
    EXPECT_EQ(from_monitoring, http_ports) << workload;
  }
  RenderOptions bad{.target = "kubernetes"};
  bad.metrics_namespace = "Not A Namespace";
  auto refused = RenderKubernetes(job, bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--metrics-namespace 'Not A Namespace'"), std::string::npos);
}

// A secured job: every container, the coordinator's too, requires the job's
// metrics token for /metrics, from Secret geodesic-metrics mounted where
// its --metrics-token-file points; the token is the one the job secret
// derives (MetricsToken), so a second render gives the same.
TEST(RenderKubernetesTest, ASecuredJobsMetricsNeedTheTokenOfItsSecret) {
  const JobSpec job = Load("three_regions.yaml", {"security.mode=curve"});
  for (const std::string workload : {"statefulsets", "pods"}) {
    const RenderOptions o{.target = "kubernetes", .workload = workload};
    auto text = RenderKubernetes(job, o);
    ASSERT_TRUE(text.ok()) << text.status();
    const geodesic::testing::ScratchDir scratch("k8s-metrics");
    ASSERT_TRUE(WriteSecrets(job, o, scratch.path()).ok());
    std::map<std::string, YAML::Node> secrets;
    for (const YAML::Node& d : Documents(ReadFile(scratch / "kubernetes-secrets.yaml").value()))
      secrets[d["metadata"]["name"].as<std::string>()] = d["stringData"];
    const std::string secret = secrets["geodesic-coordinator"]["secret"].as<std::string>();
    const std::string token = secrets["geodesic-metrics"]["token"].as<std::string>();
    EXPECT_EQ(token, MetricsToken(secret, job.name));
    int containers = 0;
    for (const YAML::Node& d : Documents(*text)) {
      const std::string kind = d["kind"].as<std::string>();
      if (kind != "Pod" && kind != "StatefulSet") continue;
      const YAML::Node spec = kind == "Pod" ? d["spec"] : d["spec"]["template"]["spec"];
      std::string volume;
      for (const YAML::Node& v : spec["volumes"])
        if (v["secret"] && v["secret"]["secretName"].as<std::string>() == "geodesic-metrics")
          volume = v["name"].as<std::string>();
      ASSERT_FALSE(volume.empty()) << d["metadata"]["name"];
      for (const YAML::Node& c : spec["containers"]) {
        const std::string file = Arg(c, "--metrics-token-file");
        std::string mounted;
        for (const YAML::Node& m : c["volumeMounts"])
          if (m["name"].as<std::string>() == volume) mounted = m["mountPath"].as<std::string>();
        EXPECT_EQ(file, mounted + "/token") << c["name"];
        ++containers;
      }
    }
    // The coordinator, 3 shards, 6 workers and the evaluator: a container each
    // as Pods; one per set (coordinator, 3 of shards, 4 of workers, the evaluator) as StatefulSets.
    EXPECT_EQ(containers, workload == "pods" ? 11 : 9) << workload;
  }
  EXPECT_EQ(MetricsToken("s", "a").size(), 64u);
  EXPECT_NE(MetricsToken("s", "a"), MetricsToken("s", "b"));
  EXPECT_NE(MetricsToken("s", "a"), MetricsToken("t", "a"));
}

// The hosts target: every process is started with the metrics token of its
// host's secrets, and prometheus.yml authenticates with secrets/metrics.token.
TEST(RenderHostsTest, ASecuredJobsMetricsNeedTheToken) {
  const JobSpec job = Load("fashion_mnist.yaml", {"security.mode=curve", "regions.us-east.host=10.0.0.1",
                                                  "regions.eu-west.host=10.0.0.2", "regions.eu-west.aggregator=true"});
  auto files = Render(job, {});
  ASSERT_TRUE(files.ok()) << files.status();
  const geodesic::testing::ScratchDir scratch("hosts-metrics");
  ASSERT_TRUE(WriteRendered(scratch.path(), *files).ok());
  ASSERT_TRUE(WriteSecrets(job, {}, scratch.path()).ok());
  const std::string secret = transport::LoadSecret(scratch / "secrets/host-10.0.0.1/secret").value();
  const std::string token = MetricsToken(secret, job.name) + "\n";
  int started = 0;
  const std::regex flag(R"(--metrics-token-file "\$here/(secrets/host-([^/]+)/metrics.token)\")");
  for (const std::string host : {"10.0.0.1", "10.0.0.2"}) {
    std::istringstream script(files->at("host-" + host + ".sh"));
    for (std::string line; std::getline(script, line);) {
      if (!line.starts_with("start ")) continue;
      std::smatch m;
      ASSERT_TRUE(std::regex_search(line, m, flag)) << line;
      EXPECT_EQ(m[2], host) << line;
      EXPECT_EQ(ReadFile(scratch / m[1]).value(), token) << m[1];
      EXPECT_EQ(std::filesystem::status(scratch / m[1]).permissions(),
                std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
      ++started;
    }
  }
  EXPECT_EQ(started, 2 + job.NumServers() + job.NumWorkers() + 1) << "and eu-west's aggregator";
  EXPECT_NE(files->at("prometheus.yml").find("credentials_file: \"secrets/metrics.token\""), std::string::npos)
      << files->at("prometheus.yml");
  EXPECT_EQ(ReadFile(scratch / "secrets/metrics.token").value(), token);
  if (access("/usr/bin/promtool", X_OK) == 0) {
    EXPECT_EQ(
        std::system(("/usr/bin/promtool check config " + scratch / "prometheus.yml" + " > /dev/null 2>&1").c_str()), 0);
  }
  EXPECT_EQ(Render(Load("fashion_mnist.yaml"), {})->at("prometheus.yml").find("authorization"), std::string::npos)
      << "a plain job's /metrics is open";
}

// `geodesic metrics scrape-config RUN_DIR`: a secured run's config names
// its token file (absolute), never the token; a plain run's has none.
TEST(ScrapeConfigTest, ASecuredRunAuthenticatesWithItsTokenFile) {
  const geodesic::testing::ScratchDir scratch("scrape");
  ASSERT_TRUE(MakeDirs(scratch / "http").ok());
  ASSERT_TRUE(WriteFileAtomic(scratch / "http/coordinator", "127.0.0.1:9400").ok());
  auto plain = RenderScrapeConfig(scratch.path());
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->find("authorization"), std::string::npos);
  const std::string token = MetricsToken("secret", "job");
  ASSERT_TRUE(WriteFileAtomic(MetricsTokenPath(scratch.path()), token + "\n", false, 0600).ok());
  auto secured = RenderScrapeConfig(scratch.path());
  ASSERT_TRUE(secured.ok()) << secured.status();
  EXPECT_NE(secured->find("    authorization:\n      type: Bearer\n      credentials_file: \"" + scratch.path() +
                          "/metrics.token\"\n"),
            std::string::npos)
      << *secured;
  EXPECT_EQ(secured->find(token), std::string::npos);
  const YAML::Node doc = YAML::Load(*secured);
  EXPECT_EQ(doc["scrape_configs"][0]["static_configs"][0]["targets"][0].as<std::string>(), "127.0.0.1:9400");
}

}  // namespace
}  // namespace geodesic::deploy

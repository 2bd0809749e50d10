// Deployments rendered from a job file (`geodesic deploy render`;
// docs/deploy.md): the same processes `geodesic launch` starts on one
// machine, laid out for machines the launcher does not own.
//
// Target `hosts`: one shell script per distinct region host (a region's
// `host` is the address its processes bind and are reached at; regions that
// share a host share a script). A script starts that host's processes and
// nothing else, with fixed ports so that the others can find them, waits for
// them, and exits non-zero if one failed. Placement follows the launcher:
// the coordinator in the coordinator region, shard i and worker i in their
// regions, shard i's backup in the next region, and the evaluator beside
// worker 0 (it reads worker 0's parameter snapshots from local disk).
//
// Ports: the job's processes are numbered in one order (coordinator,
// servers, backups, workers, evaluator); process k listens for ZeroMQ on
// base_port + k (those that listen) and serves HTTP (/metrics, /healthz,
// /readyz) on http_base_port + k, so ports stay distinct even when every
// region shares one host. Rendering is deterministic: the same job and
// options give byte-identical files.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/job.h"
#include "transport/security.h"

namespace geodesic::deploy {

struct RenderOptions {
  std::string target = "hosts";              // hosts | kubernetes | compose
  int base_port = 7400;                      // hosts: ZeroMQ listeners at base_port + k; compose: the port
  int http_base_port = 9400;                 // hosts: HTTP endpoints at http_base_port + k; compose: the port
  std::string image = "geodesic:latest";     // kubernetes, compose: the image every container runs
  std::string pull_policy = "IfNotPresent";  // kubernetes: imagePullPolicy
  std::string volume_size = "1Gi";           // kubernetes: each pod's data volume
  std::string workload = "statefulsets";     // kubernetes: statefulsets | pods (for podman play kube)
  // kubernetes: the namespace whose pods (Prometheus) may reach the HTTP
  // ports past the NetworkPolicy (the job's own pods and the kubelet always can).
  std::string metrics_namespace = "monitoring";
  int router_base_port = 7500;  // compose: the link router's listeners at router_base_port + i
};

// One placed process of a rendered deployment.
struct PlacedProcess {
  std::string name;  // coordinator, server-0, backup-0, worker-0, evaluator
  std::string role;  // the `geodesic` subcommand
  int id = 0;
  std::string region, host;
  int port = 0;  // ZeroMQ listener; 0 when it does not listen
  int http_port = 0;
  std::string aggregator;  // a worker whose region has an aggregator: its endpoint
};

// Every process of `job` with its host and ports, in the numbering order.
StatusOr<std::vector<PlacedProcess>> PlaceProcesses(const JobSpec& job, const RenderOptions& options);

// A DNS-1123 label from `s`: lower case, [a-z0-9-], at most `max` characters.
std::string DnsLabel(const std::string& s, size_t max = 63);

// "tcp://HOST:PORT" of a listening process.
std::string Endpoint(const PlacedProcess& p);

// Where the job file is mounted (read only) in every container that the
// compose and Kubernetes targets render.
inline constexpr const char* kContainerJobPath = "/etc/geodesic/job.yaml";

// Where a process's command line finds the job file, the coordinator, and
// the files it writes.
struct ProcessPaths {
  std::string job_file, coordinator, http_host;
  std::function<std::string(const std::string&)> in_run_dir;  // "stats/x.json" -> its path
};

// The `geodesic` arguments of process `p` (without security flags).
std::vector<std::string> ProcessArgs(const PlacedProcess& p, const ProcessPaths& at);

// Target compose: every process with its own container, named (and reached)
// by the process's name, and one port for all (RenderOptions::base_port,
// http_base_port).
StatusOr<std::vector<PlacedProcess>> ComposeProcesses(const JobSpec& job, const RenderOptions& options);

// Target compose: the link router's routes. For each region and each
// listening process of another region, one listener of the router, at
// router_base_port + i in a fixed order, that forwards to the process
// through the link between the two regions (its declared shape, or
// unshaped where the job declares none, as the regions' networks meet
// only in the router).
struct RouterRoute {
  std::string client_region;  // whose processes dial this route
  std::string target;         // the process it reaches (its name, a DNS name)
  int target_port = 0;
  std::pair<std::string, std::string> link;  // the two regions, in job order
  bool forward = true;                       // client -> target is link.first -> link.second
  int port = 0;                              // the router's listener
};
StatusOr<std::vector<RouterRoute>> RouterRoutes(const JobSpec& job, const RenderOptions& options);

// Target compose, as compose.yaml (beside the rendered job.yaml): a network
// per region; a service per process on its region's network, its
// connections to other regions' processes routed (`--route`) through the
// link router, service `wan` (`geodesic wan-router`), the one container on
// every region's network; one volume `run` shared by all, the run
// directory that `geodesic deploy summarize` reads. Deterministic.
StatusOr<std::string> RenderCompose(const JobSpec& job, const RenderOptions& options);

// The rendered files, by path relative to the output directory. hosts:
// job.yaml, one host-<host>.sh per host, prometheus.yml, README.txt
// (secrets are written by WriteSecrets). kubernetes: kubernetes.yaml
// (RenderKubernetes). compose: job.yaml and compose.yaml (RenderCompose).
// A clear InvalidArgument for what the target cannot express.
StatusOr<std::map<std::string, std::string>> Render(const JobSpec& job, const RenderOptions& options);

// Target kubernetes, as one multi-document file: a namespace
// geodesic-<job>; the job in ConfigMap `geodesic-job`; the coordinator as a
// StatefulSet behind a Service `coordinator`; per region, StatefulSets of
// its shards, of the backups it holds and of its workers, each with a
// headless Service (stable pod names: a member's id is its set's first id
// plus its pod's ordinal, `--id-from-hostname`), placed by required node
// affinity on topology.kubernetes.io/region = the region's name; worker 0
// in a set of its own with the evaluator beside it (they share the
// snapshots volume); liveness and readiness probes on /healthz and
// /readyz; resource requests and memory limits; a data volume per pod
// (coordinator state, checkpoints, snapshots); a PodDisruptionBudget of
// one shard pod at a time in replicated jobs; a NetworkPolicy that admits
// to the HTTP ports only the job's own pods and metrics_namespace's (the
// kubelet's probes come from the node, which a NetworkPolicy never
// blocks), the ZeroMQ port from anywhere as before. A secured job's
// processes require the metrics token of Secret geodesic-metrics for
// /metrics. Deterministic.
//
// With workload "pods", each StatefulSet's pods are written out as Pods of
// their own (the same names, host names, containers and affinity; a
// PersistentVolumeClaim `data-<pod>` each; restartPolicy OnFailure, so a
// finished process stays finished), for `podman play kube`, which runs
// Pods but not StatefulSets and has no downward API for the pod's IP:
// listeners bind their pod's host name instead, and the coordinator's pod
// is named `coordinator`, the name members dial.
StatusOr<std::string> RenderKubernetes(const JobSpec& job, const RenderOptions& options);

// Elastic jobs, workload "pods": the Pods (and claims) of the worker ids
// beyond those the job starts with, which a scale-up would create; empty
// otherwise. Written as kubernetes-late-workers.yaml.
std::string RenderKubernetesLateWorkers(const JobSpec& job, const RenderOptions& options);

// The declared link matrix as comment lines, one per direction (RTT, rate,
// loss), for the head of a rendered file; `where` says between what the
// links are real ("across real hosts", "between pods").
std::string LinkMatrixComment(const JobSpec& job, const std::string& where);

// A join token for process role `role` ("eval" is the evaluator's) and
// `id`, minted with the job secret, valid for security.token_ttl_s from
// `now_unix`.
StatusOr<std::string> JoinToken(const JobSpec& job, const std::string& secret, const std::string& role, int id,
                                int64_t now_unix);

// Target kubernetes, secured jobs (security.mode: curve): the Secrets
// kubernetes.yaml names, as one multi-document file: geodesic-coordinator
// (the job secret, the coordinator's keypair: the coordinator's
// environment), geodesic-coordinator-key (its public key),
// geodesic-metrics (`token`, the job's metrics token, MetricsToken: every
// pod mounts it, Prometheus presents it) and per member set
// geodesic-tokens-<set> (a join token per pod, by pod name, and the
// evaluator's in worker 0's), minted with `secret`, valid for
// security.token_ttl_s from `now_unix`. Members mount their set's tokens and
// the public key under /var/run/secrets/geodesic/.
StatusOr<std::string> RenderKubernetesSecrets(const JobSpec& job, const RenderOptions& options,
                                              const std::string& secret, const transport::CurveKeyPair& keys,
                                              int64_t now_unix);

// Writes `files` under `dir` (created), scripts executable.
Status WriteRendered(const std::string& dir, const std::map<std::string, std::string>& files);

// Secured jobs (security.mode: curve): the secrets the scripts name, under
// `dir`. In the coordinator host's secrets/host-<host>/: the job secret
// (security.secret_file's, else a fresh one) and the coordinator's CURVE
// keypair, both kept if already there, so that a second render does not
// lock out members holding the first one's tokens; coordinator.key, its
// public key, for every host; a join token per process in its host's
// secrets/host-<host>/, valid for security.token_ttl_s from now (tokens are
// the one part of a render that differs between renders); and the job's
// metrics token (MetricsToken) in every host's directory and in
// secrets/metrics.token, which prometheus.yml names. Directories
// 0700, secrets 0600. Target kubernetes: the secret and keypair, kept the
// same way, in secrets/, and kubernetes-secrets.yaml (0600;
// RenderKubernetesSecrets). Nothing for an unsecured job.
Status WriteSecrets(const JobSpec& job, const RenderOptions& options, const std::string& dir);

}  // namespace geodesic::deploy

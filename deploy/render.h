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

#include <map>
#include <string>

#include "common/status.h"
#include "config/job.h"

namespace geodesic::deploy {

struct RenderOptions {
  std::string target = "hosts";              // hosts | kubernetes (compose: not yet)
  int base_port = 7400;                      // hosts: ZeroMQ listeners at base_port + k
  int http_base_port = 9400;                 // hosts: HTTP endpoints at http_base_port + k
  std::string image = "geodesic:latest";     // kubernetes: the image every pod runs
  std::string pull_policy = "IfNotPresent";  // kubernetes: imagePullPolicy
  std::string volume_size = "1Gi";           // kubernetes: each pod's data volume
  std::string workload = "statefulsets";     // kubernetes: statefulsets | pods (for podman play kube)
};

// One placed process of a rendered deployment.
struct PlacedProcess {
  std::string name;  // coordinator, server-0, backup-0, worker-0, evaluator
  std::string role;  // the `geodesic` subcommand
  int id = 0;
  std::string region, host;
  int port = 0;  // ZeroMQ listener; 0 when it does not listen
  int http_port = 0;
};

// Every process of `job` with its host and ports, in the numbering order.
StatusOr<std::vector<PlacedProcess>> PlaceProcesses(const JobSpec& job, const RenderOptions& options);

// The rendered files, by path relative to the output directory. hosts:
// job.yaml, one host-<host>.sh per host, prometheus.yml, README.txt
// (secrets are written by WriteSecrets). kubernetes: kubernetes.yaml
// (RenderKubernetes). A clear InvalidArgument for what the target cannot
// express.
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
// one shard pod at a time in replicated jobs. Deterministic.
//
// With workload "pods", each StatefulSet's pods are written out as Pods of
// their own (the same names, host names, containers and affinity; a
// PersistentVolumeClaim `data-<pod>` each; restartPolicy OnFailure, so a
// finished process stays finished), for `podman play kube`, which runs
// Pods but not StatefulSets and has no downward API for the pod's IP:
// listeners bind their pod's host name instead, and the coordinator's pod
// is named `coordinator`, the name members dial.
StatusOr<std::string> RenderKubernetes(const JobSpec& job, const RenderOptions& options);

// The declared link matrix as comment lines, one per direction (RTT, rate,
// loss), for the head of a rendered file; `where` says between what the
// links are real ("across real hosts", "between pods").
std::string LinkMatrixComment(const JobSpec& job, const std::string& where);

// Writes `files` under `dir` (created), scripts executable.
Status WriteRendered(const std::string& dir, const std::map<std::string, std::string>& files);

// Secured jobs (security.mode: curve): the secrets the scripts name, under
// `dir`. In the coordinator host's secrets/host-<host>/: the job secret
// (security.secret_file's, else a fresh one) and the coordinator's CURVE
// keypair, both kept if already there, so that a second render does not
// lock out members holding the first one's tokens; coordinator.key, its
// public key, for every host; and a join token per process in its host's
// secrets/host-<host>/, valid for security.token_ttl_s from now (tokens are
// the one part of a render that differs between renders). Directories
// 0700, secrets 0600. Nothing for an unsecured job.
Status WriteSecrets(const JobSpec& job, const RenderOptions& options, const std::string& dir);

}  // namespace geodesic::deploy

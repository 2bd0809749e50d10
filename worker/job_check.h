// What `geodesic launch` and `geodesic plan` check of a job before anything
// starts: the training device, the data, and the model on that data. A
// header without LibTorch: the checks are compiled with the worker's other
// LibTorch units (one batch), so that the command-line code, which includes
// this, compiles in seconds instead of half a minute.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "config/job.h"
#include "proto/geodesic.pb.h"

namespace geodesic::worker {

// training.device resolved as a worker will (ResolveDevice in model.h):
// a device this machine lacks is InvalidArgument naming the key; `chose`
// (if set) says which was chosen and why.
Status CheckDevice(const JobSpec& job, std::string* chose = nullptr);

// The job's model built on the CPU for samples of the job's data, as every
// worker builds it: both splits of the dataset read and checked (same
// shape, the count epochs are taken over), a TorchScript module loaded and
// tried. Returns the model's signature (its parameter count and blocks). A
// synthetic model reads no data.
StatusOr<wire::ModelSignature> CheckModelOnData(const JobSpec& job);

}  // namespace geodesic::worker

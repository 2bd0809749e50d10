// The stats files' JSON form (proto/stats.proto): proto field names, every
// non-optional field printed, so that the files keep their snake_case keys.
// Thread-safe (no shared state).
#pragma once

#include <google/protobuf/message.h>

#include <string>

#include "common/status.h"

namespace geodesic {

// `stats` as indented JSON.
std::string StatsToJson(const google::protobuf::Message& stats);

// Parses a stats file's JSON into `stats` (unknown keys are passed over, so
// that an older launcher reads a newer process's file).
Status StatsFromJson(const std::string& json, google::protobuf::Message* stats);

}  // namespace geodesic

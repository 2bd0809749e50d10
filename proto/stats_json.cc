#include "proto/stats_json.h"

#include <google/protobuf/util/json_util.h>

namespace geodesic {

std::string StatsToJson(const google::protobuf::Message& stats) {
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.always_print_primitive_fields = true;
  o.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(stats, &out, o);
  return out;
}

Status StatsFromJson(const std::string& json, google::protobuf::Message* stats) {
  google::protobuf::util::JsonParseOptions o;
  o.ignore_unknown_fields = true;
  auto s = google::protobuf::util::JsonStringToMessage(json, stats, o);
  if (!s.ok()) return InvalidArgument(std::string(s.message()));
  return Status::Ok();
}

}  // namespace geodesic

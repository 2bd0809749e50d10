// YAML for rendered deployments (Kubernetes manifests, compose files):
// insertion-ordered JSON values written as block YAML. Every string value is
// double-quoted (so "1" stays a string where Kubernetes or compose wants
// one, like an argument or an environment value), numbers and booleans
// plain, text with line breaks as a literal block, keys as they are (the
// renderers use only plain keys). Deterministic; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace geodesic::deploy {

// `doc` as one YAML document (no "---" line), ending in a line break.
std::string ToYaml(const nlohmann::ordered_json& doc);

}  // namespace geodesic::deploy

#include "deploy/process_id.h"

#include <array>
#include <cctype>
#include <utility>

namespace geodesic::deploy {
namespace {

// Roles with an id, and the prefix of their names.
constexpr std::array<std::pair<ProcessRole, const char*>, 4> kIndexed = {{{ProcessRole::kServer, "server-"},
                                                                          {ProcessRole::kBackup, "backup-"},
                                                                          {ProcessRole::kWorker, "worker-"},
                                                                          {ProcessRole::kAggregator, "aggregator-"}}};

}  // namespace

std::string ProcessId::Name() const {
  switch (role) {
    case ProcessRole::kCoordinator:
      return "coordinator";
    case ProcessRole::kEvaluator:
      return "evaluator";
    default:
      for (const auto& [r, prefix] : kIndexed)
        if (r == role) return prefix + std::to_string(id);
  }
  return "?";
}

std::optional<ProcessId> ProcessId::Parse(const std::string& name) {
  if (name == "coordinator") return Coordinator();
  if (name == "evaluator") return Evaluator();
  for (const auto& [role, prefix] : kIndexed) {
    const std::string p = prefix;
    if (name.rfind(p, 0) != 0) continue;
    const std::string digits = name.substr(p.size());
    // Decimal, no sign, no leading zero (the name of id 1 is "worker-1"), at most 9 digits.
    if (digits.empty() || digits.size() > 9 || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
    for (char ch : digits)
      if (!std::isdigit(static_cast<unsigned char>(ch))) return std::nullopt;
    return ProcessId{role, std::stoi(digits)};
  }
  return std::nullopt;
}

}  // namespace geodesic::deploy

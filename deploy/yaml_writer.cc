#include "deploy/yaml_writer.h"

#include <sstream>

namespace geodesic::deploy {
namespace {

using Node = nlohmann::ordered_json;

void Emit(const Node& n, int indent, std::string& out);

// A scalar after "key: " or "- ".
void EmitScalar(const Node& n, int indent, std::string& out) {
  if (!n.is_string()) {
    out += n.dump() + "\n";
    return;
  }
  const std::string& s = n.get_ref<const std::string&>();
  if (s.find('\n') == std::string::npos) {
    out += n.dump() + "\n";  // a JSON string is a YAML double-quoted scalar
    return;
  }
  out += "|\n";
  std::istringstream lines(s);
  for (std::string line; std::getline(lines, line);) out += std::string(indent + 2, ' ') + line + "\n";
}

// A value after "key:" or "- ": nested collections on the following lines.
void EmitValue(const Node& v, int indent, std::string& out) {
  if (v.is_object() && !v.empty()) {
    out += "\n";
    Emit(v, indent + 2, out);
  } else if (v.is_array() && !v.empty()) {
    out += "\n";
    Emit(v, indent + 2, out);
  } else if (v.is_object() || v.is_array()) {
    out += v.is_object() ? " {}\n" : " []\n";
  } else {
    out += " ";
    EmitScalar(v, indent, out);
  }
}

void Emit(const Node& n, int indent, std::string& out) {
  const std::string pad(indent, ' ');
  if (n.is_object()) {
    for (const auto& [key, v] : n.items()) {
      out += pad + key + ":";
      EmitValue(v, indent, out);
    }
    return;
  }
  for (const Node& v : n) {
    if (v.is_object() && !v.empty()) {
      // The first key on the dash's line, the others under it.
      std::string item;
      Emit(v, indent + 2, item);
      out += pad + "- " + item.substr(indent + 2);
    } else {
      out += pad + "-";
      EmitValue(v, indent, out);
    }
  }
}

}  // namespace

std::string ToYaml(const Node& doc) {
  std::string out;
  Emit(doc, 0, out);
  return out;
}

}  // namespace geodesic::deploy

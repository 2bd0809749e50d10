// libFuzzer target: the job-file parser (ParseJob). Input: YAML text, then
// up to 8 "dotted.key=value" overrides, separated by NUL bytes. A job that
// parses must write back (JobToYaml) to YAML that parses to the same job;
// one that does not is refused with a message.
#include <string>
#include <vector>

#include "config/job.h"
#include "tests/fuzz/fuzz_input.h"

using namespace geodesic;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::QuietLogs();
  std::vector<std::string> pieces(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0 && pieces.size() < 9)
      pieces.emplace_back();
    else
      pieces.back().push_back(static_cast<char>(data[i]));
  }
  const std::vector<std::string> overrides(pieces.begin() + 1, pieces.end());
  StatusOr<JobSpec> job = ParseJob(pieces[0], "fuzz.yaml", overrides);
  if (!job.ok()) {
    fuzz::CheckRefusal(job.status(), "ParseJob");
    return 0;
  }
  const std::string yaml = JobToYaml(*job);
  StatusOr<JobSpec> again = ParseJob(yaml, "written.yaml");
  if (!again.ok()) fuzz::Fail("JobToYaml wrote a job that does not parse:\n" + yaml, again.status());
  if (JobToYaml(*again) != yaml) fuzz::Fail("a job does not survive JobToYaml and ParseJob:\n" + yaml);
  return 0;
}

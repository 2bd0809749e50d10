// The rows and tables of `geodesic sweep` (bench/sweep.h): one row per run,
// built from its summary.json, and the files written from all rows.
// Internal to bench/. Plain functions; not synchronized.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/sweep.h"

namespace geodesic::bench {

// A run's row: the point (index, run, axes, job_file, overrides), `status`
// (finished, failed, timed_out, interrupted), `failure`, and what the
// summary says (null where it has nothing, e.g. no summary at all).
// `params_sha256` is the SHA-256 of final_params.bin ("" if absent).
nlohmann::json SweepRow(const SweepSpec& spec, const SweepPoint& point, const std::string& run_dir,
                        const std::string& status, const std::string& failure, const nlohmann::json& summary,
                        const std::string& params_sha256);

// Writes OUT/results.csv, results.json, results.md and curves.csv from the
// rows (those of runs not done yet are null and skipped).
Status WriteSweepTables(const SweepSpec& spec, const std::vector<nlohmann::json>& rows, const std::string& out);

// "SHA-256 of the file, hex", or "" if it cannot be read.
std::string FileSha256(const std::string& path);

}  // namespace geodesic::bench

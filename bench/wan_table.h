// The tables of `geodesic bench wan`: the ratios between its runs, the
// medians of repeated runs, and the CSV and Markdown files. A row is one
// run's (or one configuration's median) JSON object: "config", "emulation"
// ("none" on the LAN), "seconds_to_target" (null: not reached) and the
// numbers the tables print; with --repeats also "run" and "repeat".
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace geodesic::bench {

// Adds each row's ratios of its time to the target: to the LAN BSP run's
// ("lan"; vs_lan), to the fastest row without emulation, whichever it is
// (vs_best_lan), to the row's own LAN twin ("own_lan"; vs_own_lan), and
// DDP's time over the row's (ddp_over_this, or ddp_over_this_at_least when
// DDP stopped at its time cap).
void AddRatios(nlohmann::json& rows);

// The ratios of every run against the runs of its own pass ("repeat" 1 to
// `repeats`), as AddRatios.
void AddRatiosPerPass(nlohmann::json& runs, int repeats);

// One row per configuration named in `configs` (in that order; those with no
// run are left out): the median of its runs' numbers, "runs" and
// "seconds_to_target_each". A run that missed the target counts as slower
// than any that reached it, so the median is null when half of them missed.
nlohmann::json Medians(const nlohmann::json& runs, const std::vector<std::string>& configs);

// OUT/STEM.csv and OUT/STEM.md, a line per row named by its "run" (else its
// "config").
void WriteTables(const nlohmann::json& rows, double target, const std::string& out, const std::string& stem);

}  // namespace geodesic::bench

// A federated job's per-round results (RUN_DIR/rounds.csv and the
// summary's federated.rounds; docs/federated.md "Per-round results"): the
// executors' round records (proto/stats.proto RoundStats) lined up by
// round, with the evaluator's test accuracy. Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "proto/stats.pb.h"

namespace geodesic::deploy {

// One row per round that any executor recorded, in order; `round` counts
// from 1. Per round:
//   test_accuracy    the global model after the round on the test set:
//   test_loss        worker 0's snapshot at step `round` (accuracy_curve
//                    and loss_curve points are [seconds, step, value]), or
//                    the job's test_accuracy and test_loss for its last
//                    round; null if neither (a language model has no
//                    accuracy);
//   selected, participants (usable updates), dropped, unusable, clipped,
//   samples          summed over the executors (FedBuff: selected are the
//                    clients started during the step);
//   bytes_up, bytes_down  what the executors sent to and received from the
//                    shards during the round;
//   wall_s           first start to last end over the executors;
//   compute_s, client_eval_s, straggler_wait_s, comm_s
//                    the mean executor's round, split: training its
//                    clients; evaluating them; idle until the slowest
//                    executor pushed; the rest (push, aggregation, pull);
//   client_accuracy_mean, client_accuracy_p10  over the round's evaluated
//                    clients (the round's global model on each one's data);
//   late             selected clients whose update came after the deadline
//                    or after the round had per_round updates (FedBuff:
//                    updates discarded as older than max_staleness);
//   simulated_s      the round's time under the device profiles;
//   mean_staleness   FedBuff: the participants' mean staleness (0 for
//                    synchronous rounds);
//   refused          clients whose update's norm passed
//                    federated.max_update_norm;
//   client_bytes_up  the participants' updates as their uplink codecs
//                    encoded them (federated.uplink_codec), before the
//                    executors summed them;
//   clients          the participants' ids, ascending (not in the CSV).
// `scores` is the evaluator's (or the summary's) accuracy_curve, loss_curve,
// test_accuracy and test_loss; any may be missing.
nlohmann::json RoundTable(const std::vector<std::vector<stats::RoundStats>>& executors, const nlohmann::json& scores,
                          int64_t last_round);

// The whole-job view of a RoundTable: rounds, mean wall time, each part's
// share of the mean executor's round, and the simulated time in all and of
// the longest round.
nlohmann::json RoundTotals(const nlohmann::json& table);

// RoundTable as CSV, one header line then a line per row; empty cells for
// nulls.
std::string RoundsCsv(const nlohmann::json& table);

}  // namespace geodesic::deploy

#!/usr/bin/env bash
# Sanitizer and fuzz build without LibTorch: builds build-fuzz with clang++,
# runs the codec tests under AddressSanitizer and UBSan, then every decoder's
# libFuzzer target for FUZZ_SECONDS (default 20) each, two at a time: one per
# codec (seeds in tests/compression/fuzz/corpus/<codec>/) and one per message
# receiver plus the job-file parser (tests/fuzz/, seeds in
# tests/fuzz/corpus/<target>/; docs/wire.md says what each feeds). Prints
# the executions and crashes per target; exits non-zero on any crash,
# sanitizer report or failed test. Crash inputs land in build-fuzz/fuzz/<target>/.
# FUZZ_TARGETS="shard job" runs only those. FUZZ_RUNS=10000000 runs each
# target for that many executions instead of a time (a long run, outside CI;
# docs/wire.md has the latest). FUZZ_RESUME=1 keeps each target's corpus
# from its last run and goes on from it: a long run in pieces. Each run adds
# its executions to build-fuzz/fuzz/<target>/executions, and the table shows
# the total since the corpus was started (an interrupted run's count is the
# last "#N" line of its log, to add by hand). FUZZ_TIMEOUT (default 10 s)
# is how long one input may run before it counts as a hang; a long run at
# low priority beside builds needs more (an input of 16 ms was once starved
# past 10 s at nice 19 while LibTorch compiled).
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS="${FUZZ_SECONDS:-20}"
LIMIT=(-max_total_time="$FUZZ_SECONDS")
[[ -n "${FUZZ_RUNS:-}" ]] && LIMIT=(-runs="$FUZZ_RUNS")
BUILD=build-fuzz
CODECS=(fp32 fp16 bf16 int8 int4 sign topk randk)
MESSAGES=(frames shard coordinator ps_client job)
read -r -a TARGETS <<<"${FUZZ_TARGETS:-${CODECS[*]} ${MESSAGES[*]}}"

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=/usr/bin/clang++ \
  -DGEODESIC_CODECS_ONLY=ON -DGEODESIC_SANITIZE=ON -DGEODESIC_FUZZ=ON >/dev/null
ninja -C "$BUILD" -j2 compression_test "${TARGETS[@]/#/fuzz_}"

# Any sanitizer report is fatal.
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:strict_string_checks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

echo "== codec tests under ASan+UBSan"
"$BUILD/tests/compression/compression_test" --gtest_brief=1

echo "== fuzzing each decoder for ${FUZZ_RUNS:-$FUZZ_SECONDS s}${FUZZ_RUNS:+ executions}"
run_fuzzer() {
  local target=$1 binary seeds
  local dir="$BUILD/fuzz/$target"
  if [[ -x "$BUILD/tests/fuzz/fuzz_$target" ]]; then
    binary="$BUILD/tests/fuzz/fuzz_$target" seeds="tests/fuzz/corpus/$target"
  else
    binary="$BUILD/tests/compression/fuzz_$target" seeds="tests/compression/fuzz/corpus/$target"
  fi
  if [[ "${FUZZ_RESUME:-}" == 1 && -d "$dir/corpus" ]]; then
    rm -f "$dir/rc" && mkdir -p "$dir/crashes"
  else
    rm -rf "$dir" && mkdir -p "$dir/corpus" "$dir/crashes"
  fi
  # The first corpus directory collects new inputs; the checked-in seeds are read only.
  "$binary" "${LIMIT[@]}" -max_len=8192 -timeout="${FUZZ_TIMEOUT:-10}" \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$dir/crashes/" \
    "$dir/corpus" "$seeds" >"$dir/log" 2>&1
  echo $? >"$dir/rc"
}
for ((i = 0; i < ${#TARGETS[@]}; i += 2)); do
  run_fuzzer "${TARGETS[i]}" &
  [[ -n "${TARGETS[i + 1]:-}" ]] && run_fuzzer "${TARGETS[i + 1]}" &
  wait
done

failed=0
printf '%-16s %12s %12s %8s\n' target executions total crashes
for target in "${TARGETS[@]}"; do
  dir="$BUILD/fuzz/$target"
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  [[ -z "$runs" ]] && runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$dir/log" | tail -1)
  [[ -n "$runs" ]] && echo "$runs" >>"$dir/executions"
  total=$(awk '{ s += $1 } END { print s + 0 }' "$dir/executions" 2>/dev/null || echo "?")
  crashes=$(find "$dir/crashes" -type f | wc -l)
  if [[ "$(cat "$dir/rc")" != 0 ]] || grep -qE 'ERROR: (AddressSanitizer|libFuzzer)|runtime error:' "$dir/log"; then
    crashes=$((crashes > 0 ? crashes : 1))
  fi
  printf '%-16s %12s %12s %8s\n' "fuzz_$target" "${runs:-?}" "$total" "$crashes"
  if [[ "$crashes" != 0 || -z "$runs" ]]; then
    failed=1
    echo "--- fuzz_$target log (last 30 lines; inputs in $dir/crashes):"
    tail -30 "$dir/log"
  fi
done
exit $failed

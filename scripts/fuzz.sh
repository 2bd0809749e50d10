#!/usr/bin/env bash
# Sanitizer and fuzz build of the codecs (no LibTorch): builds build-fuzz with
# clang++, runs the codec tests under AddressSanitizer and UBSan, then every
# decoder's libFuzzer target for FUZZ_SECONDS (default 20) each, two at a
# time, from the seed corpus in tests/compression/fuzz/corpus/. Prints the
# executions and crashes per target; exits non-zero on any crash, sanitizer
# report or failed test. Crash inputs land in build-fuzz/fuzz/<codec>/.
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS="${FUZZ_SECONDS:-20}"
BUILD=build-fuzz
CODECS=(fp32 fp16 bf16 int8 int4 sign topk randk)

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=/usr/bin/clang++ \
  -DGEODESIC_CODECS_ONLY=ON -DGEODESIC_SANITIZE=ON -DGEODESIC_FUZZ=ON >/dev/null
ninja -C "$BUILD" compression_test "${CODECS[@]/#/fuzz_}"

# Any sanitizer report is fatal.
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:strict_string_checks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

echo "== codec tests under ASan+UBSan"
"$BUILD/tests/compression/compression_test" --gtest_brief=1

echo "== fuzzing each decoder for ${FUZZ_SECONDS} s"
run_fuzzer() {
  local codec=$1
  local dir="$BUILD/fuzz/$codec"
  rm -rf "$dir" && mkdir -p "$dir/corpus" "$dir/crashes"
  # The first corpus directory collects new inputs; the checked-in seeds are read only.
  "$BUILD/tests/compression/fuzz_$codec" -max_total_time="$FUZZ_SECONDS" -max_len=4096 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$dir/crashes/" \
    "$dir/corpus" "tests/compression/fuzz/corpus/$codec" >"$dir/log" 2>&1
  echo $? >"$dir/rc"
}
for ((i = 0; i < ${#CODECS[@]}; i += 2)); do
  run_fuzzer "${CODECS[i]}" &
  [[ -n "${CODECS[i + 1]:-}" ]] && run_fuzzer "${CODECS[i + 1]}" &
  wait
done

failed=0
printf '%-8s %12s %8s\n' target executions crashes
for codec in "${CODECS[@]}"; do
  dir="$BUILD/fuzz/$codec"
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  [[ -z "$runs" ]] && runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$dir/log" | tail -1)
  crashes=$(find "$dir/crashes" -type f | wc -l)
  if [[ "$(cat "$dir/rc")" != 0 ]] || grep -qE 'ERROR: (AddressSanitizer|libFuzzer)|runtime error:' "$dir/log"; then
    crashes=$((crashes > 0 ? crashes : 1))
  fi
  printf '%-8s %12s %8s\n' "fuzz_$codec" "${runs:-?}" "$crashes"
  if [[ "$crashes" != 0 || -z "$runs" ]]; then
    failed=1
    echo "--- fuzz_$codec log (last 30 lines; inputs in $dir/crashes):"
    tail -30 "$dir/log"
  fi
done
exit $failed

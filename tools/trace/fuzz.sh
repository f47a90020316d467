#!/usr/bin/env bash
# Builds the libFuzzer target for the trace reader (and the views behind it) with clang and
# runs it for a bounded time on the checked-in seed corpus.
#
#   tools/trace/fuzz.sh [SECONDS=60] [WORK_DIR=build-fuzz]
#
# Needs clang++ with libFuzzer (Debian 12: apt-get install -y clang libclang-rt-14-dev).
# New inputs go to WORK_DIR/corpus; the seeds in tests/trace_tools/corpus are only read.
# A crash leaves WORK_DIR/crash-* and exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-60}"
work="${2:-build-fuzz}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || ((seconds < 1)); then
  echo "fuzz.sh: SECONDS must be a positive whole number, got '$seconds'" >&2
  exit 2
fi
cxx="${CXX_FUZZ:-}"
if [[ -z "$cxx" ]]; then
  for c in clang++ clang++-16 clang++-15 clang++-14; do
    if command -v "$c" >/dev/null; then cxx="$c"; break; fi
  done
fi
if [[ -z "$cxx" ]]; then
  echo "fuzz.sh: no clang++ found (Debian: apt-get install -y clang libclang-rt-14-dev)" >&2
  exit 2
fi
json_include=""
for d in /usr/local/include /opt/homebrew/include; do  # /usr/include is searched already
  if [[ -f "$d/nlohmann/json.hpp" ]]; then json_include="$d"; break; fi
done
mkdir -p "$work/corpus"
binary="$work/fuzz_trace_reader"
sources=(tools/trace/fuzz_reader.cpp tools/trace/src/trace_reader.cpp tools/trace/src/trace_model.cpp tools/trace/src/build_model.cpp tools/trace/src/critical_path.cpp tools/trace/summary.cpp
         tools/trace/summary_pipeline.cpp tools/trace/summary_critical_path.cpp tools/trace/text_table.cpp
         tools/trace/chrome_export.cpp tools/trace/timeline_rows.cpp tools/trace/timeline_svg.cpp tools/trace/message_graph.cpp runtime/src/error.cpp)
if [[ ! -x "$binary" ]] || [[ -n "$(find "${sources[@]}" tools/trace/*.hpp tools/trace/include/strata/trace_tools/*.hpp -newer "$binary" 2>/dev/null)" ]]; then
  echo "fuzz.sh: building $binary with $cxx"
  if ! "$cxx" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
       -Iruntime/include -Itools/trace/include -Itools/trace ${json_include:+-isystem "$json_include"} "${sources[@]}" -o "$binary"; then
    echo "fuzz.sh: building the fuzz target failed (is libFuzzer installed? apt-get install -y libclang-rt-14-dev)" >&2
    exit 2
  fi
fi
echo "fuzz.sh: fuzzing the trace reader for ${seconds}s (seeds: tests/trace_tools/corpus)"
"$binary" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/" "$work/corpus" tests/trace_tools/corpus

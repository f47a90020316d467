#!/usr/bin/env bash
# CI: builds strata twice more from the source tree, under AddressSanitizer+UBSan (build-asan)
# and ThreadSanitizer (build-tsan), and runs ctest in each. Any sanitizer report fails the run.
#
#   tools/ci/sanitizers.sh            both
#   tools/ci/sanitizers.sh asan       one of them (asan | tsan)
#
# Environment:
#   STRATA_SAN_JOBS     build parallelism (default: nproc)
#   STRATA_TEST_SCALE   factor for the heavy message-count tests (default here: 0.1, see
#                       docs/reliability.md); 1 = the release sizes
#   STRATA_SAN_CTEST_ARGS extra ctest arguments (e.g. "-R runtime")
#
# What is not run under sanitizers, and why (docs/reliability.md):
#   label "cluster" the runs across simulated hosts (tests/cluster, root only): release CI only
#                 (they exercise the network path; the same code runs under the sanitizers in
#                 the mpi pass on loopback)
#   label "load"  the 1M-actor / 100M-message / 10M-drop load tests: release CI only (they
#                 measure memory and throughput; a sanitizer's shadow memory and 5-15x slowdown
#                 make both meaningless and the run too long)
#   kernels (TSan only): one thread's math under TSan (kernels/cpu/kernel_support.hpp), > 10 min
#                 there; ASan runs it
#   public_headers_compile_alone, typed_send_*, installed_package_builds_a_consumer:
#                 compiler/installer checks that run no strata code (release CI covers them)
# Benchmarks are not built (-DSTRATA_BUILD_BENCH=OFF): their tests are release CI's. Of the rest,
# only the targets the selected tests run are built (not the header checks or the load tests).
#   mpi_bundle:   a packaging check of tools/mpi-bundle.sh (copies Open MPI); release CI runs it
#   label "mpi" runs in a second ctest pass (strata::net is built when MPI is found, as in
#   release): Debian's Open MPI is not built with sanitizers, and LSan can name its leaks only
#   with the slow unwinder (fast_unwind_on_malloc=0: MPI's MCA components have no frame
#   pointers and are unloaded at exit), which would slow every other test; the suppressions
#   for Open MPI's own leaks and lock orders are in the .supp files
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

jobs="${STRATA_SAN_JOBS:-$(nproc)}"
export STRATA_TEST_SCALE="${STRATA_TEST_SCALE:-0.1}"
# Warnings are not errors here: the release build already enforces them, and GCC 12's flow
# warnings (-Wmaybe-uninitialized in <regex>, <functional>) misfire under -fsanitize at -O1.
werror=OFF

exclude='^(public_headers_compile_alone|net_public_headers_compile_alone|typed_send_of_.*|typed_reply_control_compiles|device_impl_control_compiles|actor_deliver_hook_control_compiles|.*_does_not_compile|net_remote_protocol_with_serialization_compiles|installed_package_builds_a_consumer|mpi_bundle)$'

run_one() {
  local kind=$1 dir flags
  case "$kind" in
    asan)
      dir=build-asan
      flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
      # alloc_dealloc_mismatch=0: standalone Asio 1.22 recycles handler memory per thread
      # (asio/detail/thread_info_base.hpp) and frees blocks it got from aligned_alloc with
      # operator delete inside asio::detail::scheduler::run (seen on the sim clock's io_context);
      # the mismatch is Asio's, not ours, and every other ASan check stays on.
      export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:alloc_dealloc_mismatch=0"
      export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$root/tools/ci/sanitizer-suppressions/ubsan.supp"
      export LSAN_OPTIONS="suppressions=$root/tools/ci/sanitizer-suppressions/lsan.supp:print_suppressions=0"
      ;;
    tsan)
      dir=build-tsan
      flags="-fsanitize=thread -fno-omit-frame-pointer"
      export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=4:suppressions=$root/tools/ci/sanitizer-suppressions/tsan.supp"
      ;;
    *)
      echo "sanitizers.sh: unknown sanitizer '$kind' (expected asan or tsan)" >&2
      exit 2
      ;;
  esac
  local t0=$SECONDS
  # Ninja for a new build folder, as tools/setup.sh does.
  local generator=()
  if [[ -z "${CMAKE_GENERATOR:-}" && ! -f "$dir/CMakeCache.txt" ]] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
  # -O1 -g1: fast enough to run the suites, line tables for the reports' stack traces.
  cmake "${generator[@]}" -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DCMAKE_CXX_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" -DCMAKE_MODULE_LINKER_FLAGS="$flags" \
    -DSTRATA_CUDA=OFF -DSTRATA_MPI=AUTO -DSTRATA_BUILD_BENCH=OFF -DSTRATA_WERROR=$werror >/dev/null
  local skip="$exclude"
  # TSan: the kernels suites run on one thread there (no oneTBB under TSan, see tsan.supp) and
  # take > 10 min; ASan+UBSan runs them.
  if [[ "$kind" == tsan ]]; then skip="${exclude%)\$}|kernels|kernels_isa_.*)\$"; fi
  # Build only what the tests that run here run: the files named by the commands of the tests
  # neither skipped by name nor labelled load (test executables, samples, tools; what those start
  # by themselves is a declared dependency), read from the generated CTestTestfile.cmake files
  # (ctest --show-only leaves out the command of a test whose executable does not exist yet).
  # Not built: the header checks, the load tests' program, and (TSan) the kernels suite.
  local named known targets
  named=$(find "$dir" -name CTestTestfile.cmake -exec cat {} + |
          awk -v skip="$skip" -v dir="$root/$dir" '
            /^add_test\(/ { match($0, /\[=\[[^]]*\]=\]/); t = substr($0, RSTART + 3, RLENGTH - 6); cmd[t] = $0; order[++n] = t }
            /^set_tests_properties\(/ { match($0, /\[=\[[^]]*\]=\]/); t = substr($0, RSTART + 3, RLENGTH - 6)
                                        if (match($0, /LABELS "[^"]*"/)) labels[t] = substr($0, RSTART + 8, RLENGTH - 9) }
            END { for (i = 1; i <= n; i++) { t = order[i]
                    if (t ~ skip || labels[t] ~ /(^|;)(load|cluster)(;|$)/) continue
                    line = cmd[t]
                    while (match(line, dir "/[^\"[:space:];]+")) { print substr(line, RSTART, RLENGTH); line = substr(line, RSTART + RLENGTH) } } }' |
          xargs -r -n1 basename | sort -u)
  known=$(cmake --build "$dir" --target help | sed -n -e 's/^\.\.\. \([^ ]*\).*/\1/p' -e 's/^\([^ /:]*\): phony$/\1/p' | sort -u)
  targets=$(comm -12 <(echo "$named") <(echo "$known") | tr '\n' ' ')
  if [[ -z "$targets" ]]; then echo "sanitizers.sh: found no test targets to build in $dir"; return 1; fi
  # shellcheck disable=SC2086
  cmake --build "$dir" -j"$jobs" --target $targets || { echo "sanitizers.sh: the $kind build failed"; return 1; }
  local t1=$SECONDS
  local rc=0
  # shellcheck disable=SC2086
  ctest --test-dir "$dir" --output-on-failure -LE 'load|mpi|cluster' -E "$skip" -j"$jobs" ${STRATA_SAN_CTEST_ARGS:-} || rc=$?
  local t2=$SECONDS
  # The ranks under mpirun (label mpi): strata::net's communication thread, remote actors, the
  # distributed store and the LM across ranks. mpirun passes this environment to its ranks.
  local mpi_asan="${ASAN_OPTIONS:-}"
  [[ "$kind" == asan ]] && mpi_asan="$ASAN_OPTIONS:fast_unwind_on_malloc=0"
  # shellcheck disable=SC2086
  ASAN_OPTIONS="$mpi_asan" ctest --test-dir "$dir" --output-on-failure -L mpi -LE load -E "$skip" -j"$jobs" --no-tests=ignore \
    ${STRATA_SAN_CTEST_ARGS:-} || rc=$?
  local t3=$SECONDS
  echo "sanitizers.sh: $kind build $((t1 - t0)) s, tests $((t2 - t1)) s, mpi tests $((t3 - t2)) s, ctest exit $rc"
  return $rc
}

kinds=("$@")
if ((${#kinds[@]} == 0)); then kinds=(asan tsan); fi
failed=()
for k in "${kinds[@]}"; do
  run_one "$k" || failed+=("$k")
done
if ((${#failed[@]})); then
  echo "sanitizers.sh: failures under ${failed[*]}" >&2
  exit 1
fi

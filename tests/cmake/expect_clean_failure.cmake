# Runs a program that must reject its input cleanly, and fails (FATAL_ERROR) unless:
#   - it exits by itself within TIMEOUT seconds (no signal, no timeout) with a status in 1..127;
#   - stderr is exactly one line ending in a newline or, with ALLOW_USAGE_HINT, CLI11's two:
#     the error and "Run with --help for more information.";
#   - stderr matches the regex EXPECT, when given;
#   - the status is EXPECT_EXIT, when given.
#   cmake -DCMD="prog;arg;..." [-DEXPECT=regex] [-DEXPECT_EXIT=N] [-DTIMEOUT=60] [-DALLOW_USAGE_HINT=ON]
#         -P tests/cmake/expect_clean_failure.cmake
# CMD is a CMake list: pass it as one quoted argument ("-DCMD=$<TARGET_FILE:prog>;arg;arg").
include(${CMAKE_CURRENT_LIST_DIR}/run_command.cmake)
if(NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "the command did not exit normally (${rc}): ${CMD}\nstderr: ${err}")
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "the command accepted bad input (exit 0): ${CMD}\nstdout: ${out}\nstderr: ${err}")
endif()
if(rc GREATER_EQUAL 128)
  message(FATAL_ERROR "the command died (exit ${rc}): ${CMD}\nstderr: ${err}")
endif()
string(REGEX MATCHALL "\n" newlines "${err}")
list(LENGTH newlines lines)
set(usage_hint FALSE)
if(ALLOW_USAGE_HINT AND lines EQUAL 2 AND err MATCHES "^[^\n]+\nRun with --help for more information\\.\n$")
  set(usage_hint TRUE)
endif()
if(NOT err MATCHES "\n$" OR NOT (lines EQUAL 1 OR usage_hint))
  if(ALLOW_USAGE_HINT)
    set(wanted "one line on stderr (or CLI11's error + \"Run with --help\")")
  else()
    set(wanted "exactly one line on stderr")
  endif()
  message(FATAL_ERROR "expected ${wanted}, got ${lines}: ${CMD}\n${err}")
endif()
if(DEFINED EXPECT_EXIT AND NOT rc EQUAL EXPECT_EXIT)
  message(FATAL_ERROR "expected exit status ${EXPECT_EXIT}, got ${rc}: ${CMD}\n${err}")
endif()
if(DEFINED EXPECT AND NOT err MATCHES "${EXPECT}")
  message(FATAL_ERROR "stderr does not match '${EXPECT}': ${CMD}\n${err}")
endif()
message(STATUS "rejected as expected (exit ${rc}): ${err}")

# Runs a program that must reject its input cleanly:
#   - it exits by itself (no signal, no timeout) with a status in 1..127;
#   - stderr holds exactly one line, or CLI11's usual two: the error and
#     "Run with --help for more information.";
#   - stderr matches EXPECT when given.
#   cmake -DCMD="prog;arg;..." [-DEXPECT=regex] [-DTIMEOUT=60] -P expect_clean_rejection.cmake
if(NOT DEFINED TIMEOUT)
  set(TIMEOUT 60)
endif()
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT ${TIMEOUT})
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
set(cli11_pair FALSE)
if(lines EQUAL 2 AND err MATCHES "^[^\n]+\nRun with --help for more information\\.\n$")
  set(cli11_pair TRUE)
endif()
if(NOT err MATCHES "\n$" OR NOT (lines EQUAL 1 OR cli11_pair))
  message(FATAL_ERROR "expected one line on stderr (or CLI11's error + \"Run with --help\"), got ${lines}: ${CMD}\n${err}")
endif()
if(DEFINED EXPECT AND NOT err MATCHES "${EXPECT}")
  message(FATAL_ERROR "stderr does not match '${EXPECT}': ${CMD}\n${err}")
endif()
message(STATUS "rejected (exit ${rc}): ${err}")

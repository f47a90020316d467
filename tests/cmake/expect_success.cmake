# Runs a program that must succeed, and fails (FATAL_ERROR) unless:
#   - it exits by itself within TIMEOUT seconds with status 0;
#   - stderr matches the regex EXPECT_STDERR, when given, and has exactly STDERR_LINES lines,
#     when given;
#   - the file OUTPUT exists and is not empty, when given.
#   cmake -DCMD="prog;arg;..." [-DEXPECT_STDERR=regex] [-DSTDERR_LINES=N] [-DOUTPUT=file]
#         [-DTIMEOUT=60] -P tests/cmake/expect_success.cmake
# CMD is a CMake list: pass it as one quoted argument ("-DCMD=$<TARGET_FILE:prog>;arg;arg").
if(DEFINED OUTPUT)
  file(REMOVE "${OUTPUT}")
endif()
include(${CMAKE_CURRENT_LIST_DIR}/run_command.cmake)
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "the command failed (${rc}): ${CMD}\nstdout: ${out}\nstderr: ${err}")
endif()
if(DEFINED EXPECT_STDERR AND NOT err MATCHES "${EXPECT_STDERR}")
  message(FATAL_ERROR "stderr does not match '${EXPECT_STDERR}': ${CMD}\n${err}")
endif()
if(DEFINED STDERR_LINES)
  string(REGEX MATCHALL "\n" newlines "${err}")
  list(LENGTH newlines lines)
  if(NOT lines EQUAL STDERR_LINES)
    message(FATAL_ERROR "expected ${STDERR_LINES} lines on stderr, got ${lines}: ${CMD}\n${err}")
  endif()
endif()
if(DEFINED OUTPUT)
  if(NOT EXISTS "${OUTPUT}")
    message(FATAL_ERROR "the command did not write ${OUTPUT}: ${CMD}\n${err}")
  endif()
  file(SIZE "${OUTPUT}" size)
  if(size EQUAL 0)
    message(FATAL_ERROR "the command wrote an empty ${OUTPUT}: ${CMD}\n${err}")
  endif()
endif()
message(STATUS "succeeded as expected: ${err}")

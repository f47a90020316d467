# Runs CMD and REFERENCE, two programs that must both succeed, and fails (FATAL_ERROR) unless:
#   - each exits by itself within TIMEOUT seconds with status 0;
#   - CMD's stdout has exactly COUNT lines matching the regex LINES (a whole line);
#   - those lines equal, in order, REFERENCE's lines matching LINES.
#   cmake -DCMD="prog;--store" -DREFERENCE="prog" -DLINES="regex" -DCOUNT=N [-DTIMEOUT=60]
#         -P tests/cmake/expect_same_lines.cmake
# CMD and REFERENCE are CMake lists: pass each as one quoted argument ("-DCMD=$<TARGET_FILE:prog>;arg").
function(matching_lines text out_var)
  string(REPLACE "\n" ";" all "${text}")
  set(lines "")
  foreach(line IN LISTS all)
    if(line MATCHES "^${LINES}$")
      list(APPEND lines "${line}")
    endif()
  endforeach()
  set(${out_var} "${lines}" PARENT_SCOPE)
endfunction()

# Runs CMD through run_command.cmake (rc, out, err) and fails unless it exits 0.
macro(run_expecting_success)
  include(${CMAKE_CURRENT_LIST_DIR}/run_command.cmake)
  if(NOT rc STREQUAL "0")
    message(FATAL_ERROR "the command failed (${rc}): ${CMD}\nstdout: ${out}\nstderr: ${err}")
  endif()
endmacro()

set(program "${CMD}")
set(CMD "${REFERENCE}")
run_expecting_success()
matching_lines("${out}" lines_REFERENCE)
set(CMD "${program}")
run_expecting_success()
matching_lines("${out}" lines_CMD)

list(LENGTH lines_CMD count)
if(NOT count EQUAL COUNT)
  message(FATAL_ERROR "expected ${COUNT} lines matching '${LINES}', got ${count}: ${CMD}\n${out}")
endif()
if(NOT lines_CMD STREQUAL lines_REFERENCE)
  string(REPLACE ";" "\n" a "${lines_CMD}")
  string(REPLACE ";" "\n" b "${lines_REFERENCE}")
  message(FATAL_ERROR "${CMD} printed\n${a}\nwhere ${REFERENCE} printed\n${b}")
endif()
string(REPLACE ";" "\n" shown "${lines_CMD}")
message(STATUS "the same ${count} lines as ${REFERENCE}:\n${shown}")

# Configures the project with a bad cache value and fails (FATAL_ERROR) unless the configure step
# exits non-zero with the sentence EXPECT (a regex) on stderr.
#   cmake -DSOURCE_DIR=<tree> -DWORK_DIR=<empty dir> -DARGS="-DNAME=value;..." -DEXPECT=regex -P expect_configure_failure.cmake
file(REMOVE_RECURSE ${WORK_DIR})
set(CMD ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR} ${ARGS})
set(TIMEOUT 120)
include(${CMAKE_CURRENT_LIST_DIR}/run_command.cmake)
file(REMOVE_RECURSE ${WORK_DIR})
if(rc STREQUAL "0")
  message(FATAL_ERROR "configuring with ${ARGS} succeeded; it must fail\n${out}")
endif()
string(REGEX REPLACE "[ \n]+" " " flat "${err}")
if(NOT flat MATCHES "${EXPECT}")
  message(FATAL_ERROR "configuring with ${ARGS} failed without the expected sentence '${EXPECT}'\n${err}")
endif()
message("configuring with ${ARGS} failed: ${EXPECT}")

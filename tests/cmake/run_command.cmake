# Shared by expect_clean_failure.cmake and expect_success.cmake: checks -DCMD, defaults TIMEOUT
# to 60 s, runs CMD and leaves its exit status in rc, its stdout in out and its stderr in err.
if(NOT DEFINED CMD OR CMD STREQUAL "")
  get_filename_component(script "${CMAKE_SCRIPT_MODE_FILE}" NAME)
  message(FATAL_ERROR "${script}: -DCMD=\"prog;arg;...\" is required")
endif()
if(NOT DEFINED TIMEOUT)
  set(TIMEOUT 60)
endif()
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT ${TIMEOUT})

# Installs the built project into a fresh prefix, builds the consumer project (and the ping_pong
# sample) against it, runs them.
# Variables: BUILD_DIR, SOURCE_DIR, WORK_DIR.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGV}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/consumer -B ${WORK_DIR}/consumer-build
    -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release
    -DSTRATA_SAMPLES_DIR=${SOURCE_DIR}/samples)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer-build -j2)
run(${WORK_DIR}/consumer-build/consumer)
# The sample built against the install serves /metrics (port 0: any free one) and finishes.
execute_process(COMMAND ${WORK_DIR}/consumer-build/ping_pong --round-trips 1000 --metrics-port 0
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
if(NOT rc EQUAL 0 OR NOT out MATCHES "metrics: http://127\\.0\\.0\\.1:[0-9]+/metrics")
  message(FATAL_ERROR "ping_pong built against the install failed (${rc}):\n${out}\n${err}")
endif()
message(STATUS "${out}")

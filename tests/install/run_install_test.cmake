# Installs the built project into a fresh prefix, builds the consumer project (and the ping_pong
# and lstm_lm samples) against it, runs them.
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
# Configures, builds and runs the consumer project in WORK_DIR/<dir> with the extra arguments;
# ping_pong built against the install serves /metrics (port 0: any free one) and finishes; lstm_lm,
# built where the consumer links strata::pipeline, trains two steps on a small generated corpus.
function(consume dir)
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/consumer -B ${WORK_DIR}/${dir}
      -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release -DSTRATA_SAMPLES_DIR=${SOURCE_DIR}/samples ${ARGN})
  run(${CMAKE_COMMAND} --build ${WORK_DIR}/${dir} -j2)
  run(${WORK_DIR}/${dir}/consumer)
  execute_process(COMMAND ${WORK_DIR}/${dir}/ping_pong --round-trips 1000 --metrics-port 0
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "metrics: http://127\\.0\\.0\\.1:[0-9]+/metrics")
    message(FATAL_ERROR "ping_pong built against the install (${dir}) failed (${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "${dir}: ${out}")
  if(EXISTS ${WORK_DIR}/${dir}/lstm_lm)
    execute_process(COMMAND ${WORK_DIR}/${dir}/lstm_lm train --corpus ${WORK_DIR}/corpus.txt --devices cpu:2 --layers 2
                            --hidden 16 --embed 8 --batch 4 --seq 8 --steps 2 --val-tokens 200
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
    if(NOT rc EQUAL 0 OR NOT err MATCHES "lstm_lm: 2 steps in")
      message(FATAL_ERROR "lstm_lm built against the install (${dir}) failed (${rc}):\n${out}\n${err}")
    endif()
    message(STATUS "${dir}: lstm_lm trained two steps")
  endif()
endfunction()
set(corpus "")
foreach(i RANGE 1 200)
  math(EXPR a "(${i} * 7) % 13")
  string(APPEND corpus "line ${i}: the quick brown fox ${a} jumps over the lazy dog.\n")
endforeach()
file(WRITE ${WORK_DIR}/corpus.txt "${corpus}")
consume(consumer-build)
# The same project on a machine without the CUDA toolkit (CMake told not to find it): an install
# from a CUDA build still configures, builds and runs CPU-only actor code.
consume(consumer-no-cuda -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=TRUE)

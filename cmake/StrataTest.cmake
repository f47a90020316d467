# strata_add_test(<target> <source>... [LIBS <lib>...] [INCLUDES <dir>...] [DEFINITIONS <def>...]
#                 [TEST <name> [ARGS <arg>...] [TIMEOUT <s>] [LABELS <label>...] [SKIP_RETURN_CODE <code>]])
# One Boost.Test program of the tests: executable <target> from the sources, strata's flags
# (strata_target_settings), Boost.Test linked (BOOST_TEST_DYN_LINK where it is a shared library),
# `LIBS` linked privately, tests/ on the include path (support/) with `INCLUDES`, and the
# compile definitions `DEFINITIONS`. With `TEST`, ctest <name> runs it as
# `<target> --report_level=short <ARGS>` with the properties given; without, the caller registers
# its runs (under mpirun, say). A source named *main.cpp (the one that defines BOOST_TEST_MODULE
# or main) stays out of unity batches: BOOST_TEST_MODULE must come before the first
# boost/test/unit_test.hpp of its translation unit, whatever order the batches take. A program of
# one test file is no unity build. In a unity build, each test file keeps its own code (helpers,
# fixtures, test cases) in a namespace named after the file (`namespace group_test {`), so that
# files batched together never clash, and shared helpers live in tests/support.
include_guard(GLOBAL)
function(strata_add_test target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "TEST;TIMEOUT;SKIP_RETURN_CODE"
                        "LIBS;INCLUDES;DEFINITIONS;ARGS;LABELS")
  set(sources ${arg_UNPARSED_ARGUMENTS})
  if(NOT sources)
    message(FATAL_ERROR "strata_add_test(${target}): no sources")
  endif()
  add_executable(${target} ${sources})
  set(batched 0)
  foreach(source IN LISTS sources)
    if(source MATCHES "main\\.cpp$")
      set_source_files_properties(${source} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    else()
      math(EXPR batched "${batched} + 1")
    endif()
  endforeach()
  if(batched LESS 2)  # nothing to batch; a file alone keeps its own translation unit
    set_target_properties(${target} PROPERTIES UNITY_BUILD OFF)
  endif()
  strata_target_settings(${target})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests ${arg_INCLUDES})
  target_link_libraries(${target} PRIVATE ${arg_LIBS} Boost::unit_test_framework)
  get_target_property(boost_type Boost::unit_test_framework TYPE)
  if(boost_type STREQUAL "SHARED_LIBRARY" OR BUILD_SHARED_LIBS OR NOT Boost_USE_STATIC_LIBS)
    target_compile_definitions(${target} PRIVATE BOOST_TEST_DYN_LINK)
  endif()
  if(arg_DEFINITIONS)
    target_compile_definitions(${target} PRIVATE ${arg_DEFINITIONS})
  endif()
  if(NOT arg_TEST)
    return()
  endif()
  add_test(NAME ${arg_TEST} COMMAND ${target} --report_level=short ${arg_ARGS})
  foreach(property TIMEOUT SKIP_RETURN_CODE)
    if(DEFINED arg_${property})
      set_tests_properties(${arg_TEST} PROPERTIES ${property} ${arg_${property}})
    endif()
  endforeach()
  if(arg_LABELS)
    set_tests_properties(${arg_TEST} PROPERTIES LABELS "${arg_LABELS}")
  endif()
endfunction()

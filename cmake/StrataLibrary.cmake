# strata_add_library(<name> SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...])
# One library of strata: target strata_<name>, alias and export name strata::<name>, public
# headers under <folder>/include/strata/<name>/, private ones beside the sources in src/.
# Installed and exported into strata-targets like every other library.
include_guard(GLOBAL)
function(strata_add_library name)
  cmake_parse_arguments(arg "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  set(target strata_${name})
  add_library(${target} ${arg_SOURCES})
  add_library(strata::${name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name} OUTPUT_NAME ${target}
    POSITION_INDEPENDENT_CODE ON)
  strata_target_settings(${target})
  target_include_directories(${target}
    PUBLIC $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_link_libraries(${target} PUBLIC ${arg_PUBLIC_DEPS} PRIVATE ${arg_PRIVATE_DEPS})
  install(TARGETS ${target} EXPORT strata-targets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(DIRECTORY include/strata DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endfunction()

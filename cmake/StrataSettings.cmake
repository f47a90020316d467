# One place for the flags every strata target gets (C++ and CUDA alike).
include_guard(GLOBAL)

set(STRATA_CXX_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
    -Wold-style-cast -Wcast-align -Wunused -Woverloaded-virtual
    -Wno-missing-field-initializers  # C++20 designated initializers leave members at their defaults on purpose
    -Wno-restrict)                   # GCC 12 misfires on std::string concatenation at -O3 (GCC bug 105329)

## strata_target_settings(<target>)
# C++20, the shared warning set (errors when STRATA_WERROR is ON), the same host
# flags for CUDA sources through -Xcompiler.
function(strata_target_settings target)
  target_compile_features(${target} PUBLIC cxx_std_20)
  set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF)
  set(host_flags ${STRATA_CXX_WARNINGS})
  if(STRATA_WERROR)
    list(APPEND host_flags -Werror)
  endif()
  # In a unity batch every .cpp is an included file, so GCC takes a class that holds a type of its
  # file's anonymous namespace for one defined in a header (-Wsubobject-linkage). The warning
  # stays on where files compile alone (STRATA_UNITY_BUILD=OFF, CI's build without MPI).
  list(APPEND host_flags $<$<BOOL:$<TARGET_PROPERTY:UNITY_BUILD>>:-Wno-subobject-linkage>)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${host_flags}>)
  if(STRATA_CUDA)
    string(REPLACE ";" "," cuda_host_flags "-Wall,-Wextra")
    set(cuda_flags -Xcompiler=${cuda_host_flags} --expt-relaxed-constexpr)
    if(STRATA_WERROR)
      list(APPEND cuda_flags -Werror=all-warnings)
    endif()
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${cuda_flags}>)
  endif()
endfunction()

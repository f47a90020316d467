# The device layer's sources, included by runtime/CMakeLists.txt (paths relative to runtime/).
# C++ sources for every build; CUDA sources only when STRATA_CUDA is ON (the runtime target then
# defines STRATA_HAS_CUDA=1 and links CUDA::cudart).
set(STRATA_DEVICE_SOURCES
  src/device/device.cpp
  src/device/device_manager.cpp
  src/device/event.cpp
  src/device/spec.cpp
  src/device/stream.cpp
  src/device/tensor.cpp
  src/device/cpu_backend.cpp
  src/device/sim_backend.cpp
)
set(STRATA_DEVICE_CUDA_SOURCES
  src/device/cuda_backend.cpp
  src/device/cuda_completions.cpp
  src/device/cuda_gpu.cpp
  src/device/cuda_reporter.cpp
  src/device/cuda_stream.cpp
  src/device/cuda_support.cpp
)
# The device layer stays out of the unity batches, one object per file: an installed package
# from a CUDA build links programs that use no GPU without a CUDA toolkit (strataConfig.cmake)
# because the linker takes from the static library only the objects a program needs. Batched with
# the actor core, the device files that refer to the CUDA backend (event.cpp, device_manager.cpp,
# ...) would pull the CUDA runtime's symbols into every program.
set_source_files_properties(${STRATA_DEVICE_SOURCES} ${STRATA_DEVICE_CUDA_SOURCES}
                            PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
set(STRATA_DEVICE_LINK_LIBRARIES "")
if(STRATA_CUDA)
  list(APPEND STRATA_DEVICE_LINK_LIBRARIES CUDA::cublas)
endif()

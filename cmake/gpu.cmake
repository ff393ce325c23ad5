# The GPU backend (native/gpu): one set of HIP sources, built by hipcc for AMD
# (MIOPEN_BN_GPU=HIP) or as CUDA by nvcc for NVIDIA (MIOPEN_BN_GPU=CUDA).
# CMake's HIP language is not used: Debian's ROCm lacks hip-lang, so on AMD
# each .hip file is compiled by a custom command and linked as an object.

file(GLOB MIOPEN_BN_GPU_KERNEL_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/native/gpu/*.hip)
file(GLOB MIOPEN_BN_GPU_HOST_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/native/gpu/*.cpp)
file(GLOB MIOPEN_BN_GPU_HEADERS CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/native/gpu/*.h ${PROJECT_SOURCE_DIR}/native/gpu/*.hpp
  ${PROJECT_SOURCE_DIR}/native/common/*.hpp ${PROJECT_SOURCE_DIR}/include/miopen_bn.h)

target_sources(miopen_bn PRIVATE ${MIOPEN_BN_GPU_HOST_SOURCES})
target_compile_definitions(miopen_bn PRIVATE MIOPEN_BN_HAS_GPU)

if(MIOPEN_BN_GPU STREQUAL "CUDA")
  if(MIOPEN_BN_GPU_ARCHS)
    set(MIOPEN_BN_CUDA_ARCHS ${MIOPEN_BN_GPU_ARCHS})
  else()
    set(MIOPEN_BN_CUDA_ARCHS 90)
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES ${MIOPEN_BN_CUDA_ARCHS})
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  set_source_files_properties(${MIOPEN_BN_GPU_KERNEL_SOURCES} PROPERTIES LANGUAGE CUDA)
  target_sources(miopen_bn PRIVATE ${MIOPEN_BN_GPU_KERNEL_SOURCES})
  set_target_properties(miopen_bn PROPERTIES
    CUDA_ARCHITECTURES "${MIOPEN_BN_CUDA_ARCHS}"
    CUDA_STANDARD 17
    CUDA_STANDARD_REQUIRED ON
    CUDA_VISIBILITY_PRESET hidden
    # The shared runtime: one runtime state per process, the one PyTorch and
    # CuPy use too (CMake's default would add the static runtime as well).
    CUDA_RUNTIME_LIBRARY Shared)
  target_link_libraries(miopen_bn PRIVATE CUDA::cudart)
  set(MIOPEN_BN_GPU_RUNTIME CUDA::cudart)
  set(MIOPEN_BN_GPU_HOST_DEFINITIONS MBN_HOST_USES_CUDA)
  set(MIOPEN_BN_GPU_HOST_INCLUDES "")
elseif(MIOPEN_BN_GPU STREQUAL "HIP")
  if(MIOPEN_BN_GPU_ARCHS)
    set(MIOPEN_BN_HIP_ARCHS ${MIOPEN_BN_GPU_ARCHS})
  else()
    set(MIOPEN_BN_HIP_ARCHS gfx908 gfx90a gfx940 gfx1030)
  endif()
  find_program(MIOPEN_BN_HIPCC hipcc HINTS $ENV{ROCM_PATH}/bin /opt/rocm/bin REQUIRED)
  find_library(MIOPEN_BN_AMDHIP64 amdhip64 HINTS $ENV{ROCM_PATH}/lib /opt/rocm/lib REQUIRED)
  find_path(MIOPEN_BN_HIP_INCLUDE hip/hip_runtime_api.h HINTS $ENV{ROCM_PATH}/include /opt/rocm/include REQUIRED)

  set(MIOPEN_BN_HIPCC_COMMON_FLAGS -x hip -std=c++17 -fPIC -O3 -DMIOPEN_BN_HAS_GPU
    -I${PROJECT_SOURCE_DIR}/include -I${PROJECT_SOURCE_DIR}/native)
  set(MIOPEN_BN_HIPCC_FLAGS ${MIOPEN_BN_HIPCC_COMMON_FLAGS})
  foreach(arch IN LISTS MIOPEN_BN_HIP_ARCHS)
    list(APPEND MIOPEN_BN_HIPCC_FLAGS --offload-arch=${arch})
  endforeach()

  # A build step running hipcc on `source` with the arguments after
  # `comment`; it makes `output` (an object, or the stamp it touches after a
  # check that writes nothing).
  function(miopen_bn_hipcc_step output source comment)
    add_custom_command(
      OUTPUT ${output}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/miopen_bn_hip
      COMMAND ${CMAKE_COMMAND} -E env HIP_PLATFORM=amd ${MIOPEN_BN_HIPCC} ${ARGN}
      COMMAND ${CMAKE_COMMAND} -E touch ${output}
      DEPENDS ${source} ${MIOPEN_BN_GPU_HEADERS}
      COMMENT "${comment}"
      VERBATIM)
  endfunction()

  # Architectures the sources are checked for but not built: hipcc runs the
  # front end only (-fsyntax-only, each device pass included), which catches
  # a kernel that does not compile for that architecture's wave size at a
  # small part of the cost of building it.  CI uses it for its second wave
  # size.
  set(MIOPEN_BN_HIP_CHECK_ARCHS "" CACHE STRING
      "AMD architectures to check the HIP sources for with -fsyntax-only (not built)")
  set(check_flags ${MIOPEN_BN_HIPCC_COMMON_FLAGS} -fsyntax-only)
  foreach(arch IN LISTS MIOPEN_BN_HIP_CHECK_ARCHS)
    list(APPEND check_flags --offload-arch=${arch})
  endforeach()

  set(MIOPEN_BN_HIP_OBJECTS "")
  set(MIOPEN_BN_HIP_CHECK_STAMPS "")
  foreach(source IN LISTS MIOPEN_BN_GPU_KERNEL_SOURCES)
    get_filename_component(stem ${source} NAME_WE)
    set(object ${CMAKE_CURRENT_BINARY_DIR}/miopen_bn_hip/${stem}.o)
    miopen_bn_hipcc_step(${object} ${source} "hipcc ${stem}.hip" ${MIOPEN_BN_HIPCC_FLAGS} -c ${source} -o ${object})
    list(APPEND MIOPEN_BN_HIP_OBJECTS ${object})
    if(MIOPEN_BN_HIP_CHECK_ARCHS)
      set(stamp ${CMAKE_CURRENT_BINARY_DIR}/miopen_bn_hip/${stem}.checked)
      miopen_bn_hipcc_step(${stamp} ${source} "hipcc -fsyntax-only ${stem}.hip (${MIOPEN_BN_HIP_CHECK_ARCHS})"
                           ${check_flags} ${source})
      list(APPEND MIOPEN_BN_HIP_CHECK_STAMPS ${stamp})
    endif()
  endforeach()
  if(MIOPEN_BN_HIP_CHECK_STAMPS)
    add_custom_target(miopen_bn_hip_check ALL DEPENDS ${MIOPEN_BN_HIP_CHECK_STAMPS})
  endif()
  set_source_files_properties(${MIOPEN_BN_HIP_OBJECTS} PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)
  target_sources(miopen_bn PRIVATE ${MIOPEN_BN_HIP_OBJECTS})
  target_link_libraries(miopen_bn PRIVATE ${MIOPEN_BN_AMDHIP64})
  set(MIOPEN_BN_GPU_RUNTIME ${MIOPEN_BN_AMDHIP64})
  set(MIOPEN_BN_GPU_HOST_DEFINITIONS __HIP_PLATFORM_AMD__=1)
  set(MIOPEN_BN_GPU_HOST_INCLUDES ${MIOPEN_BN_HIP_INCLUDE})
else()
  message(FATAL_ERROR "MIOPEN_BN_GPU must be OFF, HIP or CUDA (got '${MIOPEN_BN_GPU}')")
endif()

# The GPU-versus-CPU check program (tests/c/gpu_vs_cpu.cpp): needs a device
# to run, so it is built here but not registered with CTest.
if(MIOPEN_BN_BUILD_TESTS AND EXISTS ${PROJECT_SOURCE_DIR}/tests/c/gpu_vs_cpu.cpp)
  add_executable(miopen_bn_gpu_vs_cpu ${PROJECT_SOURCE_DIR}/tests/c/gpu_vs_cpu.cpp)
  target_include_directories(miopen_bn_gpu_vs_cpu PRIVATE ${PROJECT_SOURCE_DIR}/native ${MIOPEN_BN_GPU_HOST_INCLUDES})
  target_compile_definitions(miopen_bn_gpu_vs_cpu PRIVATE ${MIOPEN_BN_GPU_HOST_DEFINITIONS})
  target_link_libraries(miopen_bn_gpu_vs_cpu PRIVATE miopen_bn miopen_bn_tolerances ${MIOPEN_BN_GPU_RUNTIME} Threads::Threads)
endif()

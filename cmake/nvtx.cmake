# NVTX3 is header-only (the CUDA toolkit ships it under include/nvtx3): when found, trace ranges,
# markers and thread names are also forwarded to NVTX so Nsight Systems sees them. Without it the
# trace recorder still writes Chrome trace JSON; -DRIDGE_NVTX=OFF builds the same way on purpose.
option(RIDGE_NVTX "Forward trace ranges to NVTX3 when its headers are found" ON)
if(RIDGE_NVTX AND TARGET ridge_bench)
  find_path(RIDGE_NVTX3_INCLUDE NAMES nvtx3/nvToolsExt.h
            HINTS $ENV{CUDA_HOME}/include $ENV{CUDA_PATH}/include
            PATHS /usr/local/cuda/include /opt/cuda/include /usr/include)
  if(RIDGE_NVTX3_INCLUDE)
    message(STATUS "ridge: NVTX3 headers in ${RIDGE_NVTX3_INCLUDE}: trace ranges go to NVTX too")
    # SYSTEM: the vendor header is not held to ridge's warning flags.
    target_include_directories(ridge_bench SYSTEM PRIVATE ${RIDGE_NVTX3_INCLUDE})
    target_compile_definitions(ridge_bench PRIVATE RIDGE_HAVE_NVTX=1)
    # NVTX3 loads the profiler's injection library with dlopen.
    target_link_libraries(ridge_bench PRIVATE ${CMAKE_DL_LIBS})
  else()
    message(STATUS "ridge: NVTX3 headers not found: trace ranges are written as Chrome trace JSON only")
  endif()
endif()

# Embeds the sources the GEMM JIT compiles at run time (src/gemm/jit_decode.cpp) into ridge_gemm, with
# the ISA flags their ahead-of-time twins are built with, so an installed binary (or the Python package)
# generates its units with no source tree beside it, and a JIT kernel is built from the very templates
# and flags of the kernel it replaces. Regenerated whenever one of the files changes.
if(TARGET ridge_gemm)
  set(ridge_jit_files gemm/abi.hpp simd/scalar.inc gemm/dot_f32_avx512.inc gemm/small_m_avx512.inc
                      gemm/small_m_avx2.inc)
  set(ridge_jit_deps "")
  foreach(f IN LISTS ridge_jit_files)
    list(APPEND ridge_jit_deps ${PROJECT_SOURCE_DIR}/src/${f})
  endforeach()
  set(ridge_jit_cpp ${CMAKE_CURRENT_BINARY_DIR}/generated/gemm_jit_sources.cpp)
  string(REPLACE ";" " " ridge_jit_avx512_flags "${RIDGE_FLAGS_avx512}")
  string(REPLACE ";" " " ridge_jit_avx2_flags "${RIDGE_FLAGS_avx2}")
  add_custom_command(
    OUTPUT ${ridge_jit_cpp}
    COMMAND ${CMAKE_COMMAND} -DOUT=${ridge_jit_cpp} -DSRC_DIR=${PROJECT_SOURCE_DIR}/src
            "-DFILES=${ridge_jit_files}" "-DFLAGS_avx512=${ridge_jit_avx512_flags}"
            "-DFLAGS_avx2=${ridge_jit_avx2_flags}"
            -P ${PROJECT_SOURCE_DIR}/cmake/gemm_jit_embed.cmake.in
    DEPENDS ${ridge_jit_deps} ${PROJECT_SOURCE_DIR}/cmake/gemm_jit_embed.cmake.in
            ${PROJECT_SOURCE_DIR}/cmake/gemm_jit.cmake
    COMMENT "Embedding the GEMM JIT's sources"
    VERBATIM)
  target_sources(ridge_gemm PRIVATE ${ridge_jit_cpp})
endif()

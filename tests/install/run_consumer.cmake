# Installs the build at BUILD_DIR into PREFIX (a scratch directory, wiped first) and configures,
# builds and runs the consumer project against it: what a user's find_package(ridge) would see.
file(REMOVE_RECURSE ${PREFIX} ${CONSUMER_BIN})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX} --component dev
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()
foreach(f include/ridge/gemm.hpp lib/cmake/ridge/ridgeConfig.cmake)
  if(NOT EXISTS ${PREFIX}/${f})
    message(FATAL_ERROR "install tree lacks ${f}")
  endif()
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${CONSUMER_SRC} -B ${CONSUMER_BIN} -G ${GENERATOR}
                        -DCMAKE_PREFIX_PATH=${PREFIX} -DCMAKE_BUILD_TYPE=Release
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the consumer against ${PREFIX} failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${CONSUMER_BIN} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the consumer failed (${rc})")
endif()
execute_process(COMMAND ${CONSUMER_BIN}/consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out)
message(STATUS "consumer printed: ${out}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "consumer ok")
  message(FATAL_ERROR "the consumer failed (${rc}): ${out}")
endif()

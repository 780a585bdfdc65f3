# `cmake --install` puts the public headers, the module libraries and a CMake package in a prefix,
# so another project can do find_package(ridge CONFIG REQUIRED) + target_link_libraries(app ridge::ridge).
# Everything here is in the "dev" component; the Python wheel installs only the "python" component.
include(CMakePackageConfigHelpers)

# ridge::ridge: every module library at once (the CLI executable already owns the name `ridge`).
add_library(ridge_all INTERFACE)
target_link_libraries(ridge_all INTERFACE ${RIDGE_LIBS})
set_target_properties(ridge_all PROPERTIES EXPORT_NAME ridge)
foreach(lib IN LISTS RIDGE_LIBS)
  string(REPLACE "ridge_" "" short ${lib})
  set_target_properties(${lib} PROPERTIES EXPORT_NAME ${short})  # ridge::core, ridge::gemm, ...
endforeach()

set(RIDGE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ridge)
install(TARGETS ${RIDGE_LIBS} ridge_all EXPORT ridgeTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ridge DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)
install(EXPORT ridgeTargets NAMESPACE ridge:: DESTINATION ${RIDGE_CMAKE_DIR} COMPONENT dev)
if(TARGET ridge_distributed)
  set(RIDGE_CONFIG_NEEDS_MPI TRUE)
else()
  set(RIDGE_CONFIG_NEEDS_MPI FALSE)
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/ridgeConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/cmake/ridgeConfig.cmake INSTALL_DESTINATION ${RIDGE_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/ridgeConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/cmake/ridgeConfig.cmake ${CMAKE_BINARY_DIR}/cmake/ridgeConfigVersion.cmake
        DESTINATION ${RIDGE_CMAKE_DIR} COMPONENT dev)
if(TARGET ridge AND RIDGE_BUILD_CLI)
  install(TARGETS ridge RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT dev)
endif()

# A test that installs this build into a scratch prefix and builds tests/install/consumer against it
# (not in the sanitizer build: its libraries need the sanitizer runtime, which a consumer would not link).
if(RIDGE_BUILD_TESTS AND RIDGE_BUILD_CLI AND NOT RIDGE_SANITIZE)
  set(ridge_pkg_prefix ${CMAKE_BINARY_DIR}/install-test/prefix)
  add_test(NAME cmake_package_consumer
           COMMAND ${CMAKE_COMMAND} -DPREFIX=${ridge_pkg_prefix} -DBUILD_DIR=${CMAKE_BINARY_DIR}
                   -DCONSUMER_SRC=${PROJECT_SOURCE_DIR}/tests/install/consumer
                   -DCONSUMER_BIN=${CMAKE_BINARY_DIR}/install-test/consumer -DGENERATOR=${CMAKE_GENERATOR}
                   -P ${PROJECT_SOURCE_DIR}/tests/install/run_consumer.cmake)
  set_tests_properties(cmake_package_consumer PROPERTIES TIMEOUT 600)
endif()

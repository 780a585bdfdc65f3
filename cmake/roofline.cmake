# Embeds hardware/*.json into ridge_roofline so `ridge hw list` works from an installed binary with
# no source tree beside it. Regenerated whenever a chip file changes.
if(TARGET ridge_roofline)
  file(GLOB ridge_chip_files CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/hardware/*.json)
  set(ridge_chips_cpp ${CMAKE_CURRENT_BINARY_DIR}/generated/roofline_embedded_chips.cpp)
  add_custom_command(
    OUTPUT ${ridge_chips_cpp}
    COMMAND ${CMAKE_COMMAND} -DOUT=${ridge_chips_cpp} -DHW_DIR=${PROJECT_SOURCE_DIR}/hardware
            -P ${PROJECT_SOURCE_DIR}/cmake/roofline_embed.cmake.in
    DEPENDS ${ridge_chip_files} ${PROJECT_SOURCE_DIR}/cmake/roofline_embed.cmake.in
    COMMENT "Embedding hardware/*.json")
  target_sources(ridge_roofline PRIVATE ${ridge_chips_cpp})
endif()

# PCRE2 (8-bit, with its JIT) runs GPT-2's pre-tokenizer regex for the BPE tokenizer
# (src/model/tokenizer.cpp): a real engine with Unicode properties, not a hand-written approximation.
# Required: scripts/setup installs libpcre2-dev. Linked privately; the installed package's config finds
# it again for consumers of the static model library (cmake/install/ridgeConfig.cmake.in).
if(TARGET ridge_model)
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8>=10.34)
  target_link_libraries(ridge_model PRIVATE PkgConfig::PCRE2)
  message(STATUS "ridge model: PCRE2 ${PCRE2_VERSION} for the BPE pre-tokenizer")
endif()

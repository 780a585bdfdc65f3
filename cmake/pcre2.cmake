# PCRE2 (8-bit, with its JIT) runs GPT-2's pre-tokenizer regex for the BPE tokenizer
# (src/text/tokenizer.cpp): a real engine with Unicode properties, not a hand-written approximation.
# Required: scripts/setup installs libpcre2-dev. Linked privately; the installed package's config finds
# it again for consumers of the static text library (cmake/install/ridgeConfig.cmake.in).
if(TARGET ridge_text)
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8>=10.34)
  target_link_libraries(ridge_text PRIVATE PkgConfig::PCRE2)
  message(STATUS "ridge text: PCRE2 ${PCRE2_VERSION} for the BPE pre-tokenizer")
endif()

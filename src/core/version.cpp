#include "ridge/core/version.hpp"

#ifndef RIDGE_VERSION_STRING
#error "RIDGE_VERSION_STRING must be the project's VERSION (CMakeLists.txt defines it for this file)"
#endif

namespace ridge {

const char* version() {
  return RIDGE_VERSION_STRING;
}

}  // namespace ridge

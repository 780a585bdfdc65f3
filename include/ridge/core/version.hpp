// ridge's version: the VERSION of project() in CMakeLists.txt, the one place it is written. `ridge
// --version`, the Python package's __version__ and the JIT cache's keys all read it from here.
#pragma once

namespace ridge {

// "major.minor.patch", e.g. "0.1.0".
const char* version();

}  // namespace ridge

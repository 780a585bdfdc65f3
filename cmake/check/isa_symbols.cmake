# Run as a test (cmake -P): the per-ISA convention (docs/core.md) checked on the objects, not kept by
# comments. A file compiled with ISA flags (name ending in _avx2.cpp, _avx512*.cpp, _amx.cpp) must define no
# weak or unique symbol: each one is an inline function or template instantiation the linker may
# merge with a copy from another unit, so a plain caller could run code built for AVX-512.
#   -DNM=<nm> -DOBJECTS=<a;b;...>
if(NOT NM OR NOT OBJECTS)
  message(FATAL_ERROR "isa_symbols.cmake: pass -DNM=<nm> and -DOBJECTS=<object files>")
endif()
set(checked 0)
set(bad "")
foreach(obj IN LISTS OBJECTS)
  if(NOT obj MATCHES "_(avx2|avx512[a-z0-9]*|amx)\\.cpp\\.o(bj)?$")
    continue()
  endif()
  math(EXPR checked "${checked} + 1")
  execute_process(COMMAND ${NM} --defined-only -C ${obj} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "isa_symbols.cmake: ${NM} failed on ${obj}")
  endif()
  string(REPLACE "\n" ";" lines "${out}")
  foreach(line IN LISTS lines)
    # "<address> <type> <name>"; W/w/V/v weak, u unique (GNU). The EH personality reference every
    # C++ object carries is data, not code.
    if(line MATCHES "^[0-9a-fA-F]+ [WwVvu] (.*)$")
      set(name "${CMAKE_MATCH_1}")
      if(NOT name MATCHES "^DW\\.ref\\.")
        list(APPEND bad "${obj}: ${name}")
      endif()
    endif()
  endforeach()
endforeach()
if(checked EQUAL 0)
  message(FATAL_ERROR "isa_symbols.cmake: no per-ISA object among the ${OBJECTS}")
endif()
if(bad)
  list(JOIN bad "\n  " text)
  message(FATAL_ERROR "per-ISA objects define mergeable (weak) symbols; include the helper inside the "
                      "file's anonymous namespace (src/simd/*.inc) instead of sharing it:\n  ${text}")
endif()
message(STATUS "isa_symbols: ${checked} per-ISA objects define no weak symbol")

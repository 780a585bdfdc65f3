# Run as a test (cmake -P): the per-ISA convention (docs/core.md) checked on the objects, not kept by
# comments. A file compiled with ISA flags (name ending in _avx2.cpp, _avx512*.cpp, _amx.cpp) must
#  - define no weak or unique symbol: each one is an inline function or template instantiation the
#    linker may merge with a copy from another unit, so a plain caller could run code built for AVX-512;
#  - run no code before main: no dynamic initialiser (an .init_array or .ctors section, a
#    _GLOBAL__sub_I_ function). The loader runs those on every machine, before ridge has looked at the
#    CPU, so one compiled with AVX-512 flags kills the process with SIGILL on a CPU without it (it did:
#    a namespace-scope `const TileConfig k = f();` in three AMX objects, stored with a zmm register).
#   -DNM=<nm> -DOBJDUMP=<objdump> -DOBJECTS=<a;b;...>
if(NOT NM OR NOT OBJDUMP OR NOT OBJECTS)
  message(FATAL_ERROR "isa_symbols.cmake: pass -DNM=<nm> -DOBJDUMP=<objdump> and -DOBJECTS=<object files>")
endif()
set(checked 0)
set(weak "")
set(init "")
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
        list(APPEND weak "${obj}: weak symbol ${name}")
      endif()
    elseif(line MATCHES "^[0-9a-fA-F]+ [tT] (_GLOBAL__sub_I_.*)$")
      list(APPEND init "${obj}: initialiser function ${CMAKE_MATCH_1}")
    endif()
  endforeach()
  execute_process(COMMAND ${OBJDUMP} -h ${obj} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "isa_symbols.cmake: ${OBJDUMP} failed on ${obj}")
  endif()
  # "  <idx> <name> <size> ...": a section of start-up functions with anything in it.
  string(REGEX MATCHALL "\n *[0-9]+ +\\.(init_array|ctors|preinit_array)[.0-9]* +[0-9a-fA-F]+" sections "${out}")
  foreach(s IN LISTS sections)
    # (Two steps: a second MATCHES in the same condition would reset CMAKE_MATCH_1.)
    if(s MATCHES "(\\.[a-z_]+[.0-9]*) +([0-9a-fA-F]+)$")
      set(section "${CMAKE_MATCH_1}")
      if(NOT CMAKE_MATCH_2 MATCHES "^0+$")
        list(APPEND init "${obj}: initialiser section ${section}")
      endif()
    endif()
  endforeach()
endforeach()
if(checked EQUAL 0)
  message(FATAL_ERROR "isa_symbols.cmake: no per-ISA object among the ${OBJECTS}")
endif()
set(text "")
if(init)
  list(REMOVE_DUPLICATES init)
  list(JOIN init "\n  " lines)
  string(APPEND text "per-ISA objects run code before main (a dynamic initialiser runs on every CPU, before "
                     "the ISA is chosen); make the value constexpr or build it in a function that runs once "
                     "the path is chosen:\n  ${lines}\n")
endif()
if(weak)
  list(JOIN weak "\n  " lines)
  string(APPEND text "per-ISA objects define mergeable (weak) symbols; include the helper inside the file's "
                     "anonymous namespace (src/simd/*.inc) instead of sharing it:\n  ${lines}\n")
endif()
if(text)
  message(FATAL_ERROR "${text}")
endif()
message(STATUS "isa_symbols: ${checked} per-ISA objects define no weak symbol and run no code before main")

// The per-ISA convention, one for every module with vector code (docs/core.md, "The per-ISA convention"):
//  - one file per path, `<name>_<isa>.cpp`, compiled with that path's flags; everything in it sits in an
//    anonymous namespace except one plain function that returns the module's table (a struct of plain
//    function pointers and figures), e.g. `format_isa::Kernels format_isa::kernels_avx512()`;
//  - code several paths share is written once in an `.inc` included INSIDE each path file's anonymous
//    namespace (src/simd/<isa>.inc, src/probe/kernels_body.inc, src/attention/flash_body.inc,
//    src/gemm/*.inc), so each path compiles a private copy and the linker can never keep a wide-ISA
//    copy of an inline function for a caller on a narrower machine;
//  - the module lists what each path provides in one `Paths` value and takes its table with
//    `pick_path(paths, cpu::active_isa())`: the widest provided path at or below the active one.
#pragma once

#include "ridge/core/cpu.hpp"

namespace ridge::isa {

template <class Table>
struct Paths {
  Table (*scalar)() = nullptr;
  Table (*avx2)() = nullptr;
  Table (*avx512)() = nullptr;
  Table (*avx512bf16)() = nullptr;
  Table (*amx)() = nullptr;
};

// The table of the widest path in `paths` at or below `isa`; a default Table when none is (a module
// without a scalar table falls back to its own scalar loop).
template <class Table>
Table pick_path(const Paths<Table>& paths, cpu::Isa isa) {
  Table (*const order[])() = {paths.amx, paths.avx512bf16, paths.avx512, paths.avx2, paths.scalar};
  const cpu::Isa level[] = {cpu::Isa::amx, cpu::Isa::avx512bf16, cpu::Isa::avx512, cpu::Isa::avx2,
                            cpu::Isa::scalar};
  for (int i = 0; i < cpu::kIsaCount; ++i)
    if (order[i] && level[i] <= isa) return order[i]();
  return Table{};
}

// pick_path for every level, resolved once: for modules whose dispatch sits on a hot path (a bulk
// conversion of a few elements, a fused layer per row block), the lookup is then an index.
// Only the levels this machine runs are resolved: a path's table function is compiled with that
// path's flags, so merely calling kernels_avx512() to read its pointers may execute AVX-512
// instructions (GCC builds the returned struct in zmm registers), an illegal instruction on an AVX2
// machine. Levels above the machine's keep an empty table; active_isa() never names them.
template <class Table>
class PathTables {
 public:
  explicit PathTables(const Paths<Table>& paths) {
    for (int i = 0; i < cpu::kIsaCount; ++i)
      if (cpu::supported(static_cast<cpu::Isa>(i))) at_[i] = pick_path(paths, static_cast<cpu::Isa>(i));
  }
  const Table& operator()(cpu::Isa isa) const { return at_[static_cast<int>(isa)]; }

 private:
  Table at_[cpu::kIsaCount];
};

}  // namespace ridge::isa

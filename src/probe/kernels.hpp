// Internal: the probe's per-ISA kernels. Each ISA file keeps its code in an anonymous namespace
// and exposes only the plain functions declared here, so no inline or template code compiled
// with wide-ISA flags can be merged by the linker into code that runs on any x86-64 machine.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ridge::probe::detail {

// A peak kernel runs `iters` iterations of `chains` independent accumulator chains, each
// iteration issuing one vector instruction per chain, and returns a value derived from every
// accumulator so the compiler cannot drop the work. Accepted chain counts: 8, 12, 16, 24 (the vector
// kernels); the AMX kernels run a fixed four tiles.
using PeakFn = double (*)(int chains, int64_t iters);

double peak_fp32_avx512(int chains, int64_t iters);      // vfmadd231ps zmm: 32 FLOP
double peak_fp64_avx512(int chains, int64_t iters);      // vfmadd231pd zmm: 16 FLOP
double peak_bf16_avx512bf16(int chains, int64_t iters);  // vdpbf16ps zmm: 64 FLOP
double peak_int8_avx512vnni(int chains, int64_t iters);  // vpdpbusd zmm: 128 OP
// AMX (probe_amx.cpp): `chains` is ignored, the kernels always run four accumulator tiles.
double peak_bf16_amx(int tiles, int64_t iters);  // tdpbf16ps: 16 x 16 x 32 x 2 = 16384 FLOP
double peak_int8_amx(int tiles, int64_t iters);  // tdpbssd: 16 x 16 x 64 x 2 = 32768 OP
// The same kernels on the tile emulator (probe_amxemu.cpp), for tests: any machine, never timed.
double peak_bf16_amxemu(int tiles, int64_t iters);
double peak_int8_amxemu(int tiles, int64_t iters);
double peak_fp32_avx2(int chains, int64_t iters);    // vfmadd231ps ymm: 16 FLOP
double peak_fp64_avx2(int chains, int64_t iters);    // vfmadd231pd ymm: 8 FLOP
double peak_fp32_scalar(int chains, int64_t iters);  // separate mul and add, 2 FLOP per chain
double peak_fp64_scalar(int chains, int64_t iters);

// Bandwidth kernels walk `bytes` (a multiple of 256, 64-byte aligned) `passes` times.
// read: loads only, folded into several independent accumulators; returns the fold.
// update: loads, adds and stores back in place, so every byte is read once and written once.
double read_avx512(const void* p, size_t bytes, int64_t passes);
void update_avx512(void* p, size_t bytes, int64_t passes);
double read_avx2(const void* p, size_t bytes, int64_t passes);
void update_avx2(void* p, size_t bytes, int64_t passes);
double read_scalar(const void* p, size_t bytes, int64_t passes);
void update_scalar(void* p, size_t bytes, int64_t passes);

}  // namespace ridge::probe::detail

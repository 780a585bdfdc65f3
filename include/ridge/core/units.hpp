// Parsing and printing quantities with units, shared by the CLI and every report.
#pragma once

#include <cstdint>
#include <string>

namespace ridge::units {

// "4096", "1e9", "64KiB", "1.5GiB", "2GB", "512MB" -> bytes. Binary (KiB, MiB, GiB, TiB) and
// decimal (KB, MB, GB, TB) suffixes, case-insensitive. `what` names the argument in the error.
// Rejects negatives, zero unless allow_zero, non-numbers, and anything above 2^60.
int64_t parse_bytes(const std::string& text, const std::string& what, bool allow_zero = false);
// A positive integer count such as a shape dimension: "4096", "4k", "1e6" (at most 2^40).
int64_t parse_count(const std::string& text, const std::string& what);

std::string format_bytes(double bytes);        // "1.50 GiB"
std::string format_seconds(double seconds);    // "12.3 ms", "4.56 us"
std::string format_flops(double flops_per_s);  // "989 TFLOP/s"
std::string format_rate(double bytes_per_s);   // "3.35 TB/s" (decimal, as vendors quote bandwidth)
std::string format_count(double n);            // "1.07e+09" style with SI prefix: "1.07 G"

}  // namespace ridge::units

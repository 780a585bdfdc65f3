// Parsing and printing quantities with units, shared by the CLI and every report.
#pragma once

#include <cstdint>
#include <string>

namespace ridge::units {

// "4096", "1e9", "64KiB", "64 KiB", "1.5GiB", "2GB", "512MB" -> bytes. Binary (KiB ... EiB; K, M, G, T,
// P alone are binary too) and decimal (KB ... EB) suffixes, case-insensitive. `what` names the
// argument in the error. Rejects negatives, zero unless allow_zero, non-numbers, and anything above 2^60.
int64_t parse_bytes(const std::string& text, const std::string& what, bool allow_zero = false);
// A positive integer count such as a shape dimension: "4096", "4k", "1M", "2G" (binary: k = 2^10,
// M = 2^20, G = 2^30, case-insensitive), "1e6"; at most 2^40 after the multiplier.
int64_t parse_count(const std::string& text, const std::string& what);

// Three significant digits and a unit, never an exponent; rounding that reaches the next unit
// moves to it (999.7 GFLOP/s prints as "1.00 TFLOP/s").
std::string format_bytes(double bytes);        // "1.50 GiB", "32 KiB", "512 B" (binary prefixes)
std::string format_seconds(double seconds);    // "12.3 ms", "4.56 us", "0 s"
std::string format_flops(double flops_per_s);  // "989 TFLOP/s"
std::string format_rate(double bytes_per_s);   // "3.35 TB/s" (decimal, as vendors quote bandwidth)
std::string format_count(double n);            // "1.07 G", "12"

}  // namespace ridge::units

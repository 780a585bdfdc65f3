// Printing quantities with units, shared by the CLI and every report. (Reading them, byte sizes and
// counts with suffixes included, is ridge/core/numbers.hpp's.)
#pragma once

#include <cstdint>
#include <string>

namespace ridge::units {

// Three significant digits and a unit, never an exponent; rounding that reaches the next unit
// moves to it (999.7 GFLOP/s prints as "1.00 TFLOP/s").
std::string format_bytes(double bytes);        // "1.50 GiB", "32 KiB", "512 B" (binary prefixes)
std::string format_seconds(double seconds);    // "12.3 ms", "4.56 us", "0 s"
std::string format_flops(double flops_per_s);  // "989 TFLOP/s"
std::string format_rate(double bytes_per_s);   // "3.35 TB/s" (decimal, as vendors quote bandwidth)
std::string format_count(double n);            // "1.07 G", "12"

}  // namespace ridge::units

// Thread-count control for every OpenMP-parallel kernel in ridge.
#pragma once

namespace ridge {

// Threads ridge kernels use; defaults to OMP_NUM_THREADS or the number of online CPUs (at most
// env::kMaxThreads).
int get_num_threads();
// Sets the count for all later kernel calls; n must be in 1 .. env::kMaxThreads (ridge::Error otherwise).
void set_num_threads(int n);
// A call's `threads` argument: 0 means get_num_threads(), a count >= 1 is taken as it is; a negative count
// is refused (ridge::Error naming the argument `threads`).
int resolve_threads(int threads);

}  // namespace ridge

// Thread-count control for every OpenMP-parallel kernel in ridge.
#pragma once

namespace ridge {

// Threads ridge kernels use; defaults to OMP_NUM_THREADS or the number of online CPUs.
int get_num_threads();
// Sets the count for all later kernel calls; n must be >= 1 (ridge::Error otherwise).
void set_num_threads(int n);

}  // namespace ridge

// Planted for the self-test of cmake/check/isa_symbols.cmake: a per-ISA object with a dynamic
// initialiser (the value is not a constant, so the loader runs code of this object before main).
// Never linked into anything; the check must refuse it.
int planted_value();
int planted_init = planted_value();

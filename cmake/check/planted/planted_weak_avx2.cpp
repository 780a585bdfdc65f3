// Planted for the self-test of cmake/check/isa_symbols.cmake: a per-ISA object that defines a weak
// symbol (an inline function outside an anonymous namespace, whose address is taken, so its
// out-of-line copy is emitted). Never linked into anything; the check must refuse it.
inline int planted_triple(int x) {
  return 3 * x;
}
int (*planted_weak)(int) = &planted_triple;

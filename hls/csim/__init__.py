"""C simulation: the generated HLS C++ compiled with g++ into a shared library (compile), run from numpy
(kernel) and checked bit-exact against the golden model (check)."""

"""C simulation: the generated HLS C++ compiled with g++ into a shared library and run bit-exact."""

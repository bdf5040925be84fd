// The doctest runner. GPU tests live in the test suite "gpu" and skip with a
// visible line when no GPU is present.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

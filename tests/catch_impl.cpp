// Catch2's implementation, compiled once for every test (CATCH_CONFIG_RUNNER: no main). Tests
// with their own main (EAL start, a captures directory) call run_catch; the rest link catch_main.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_run.hpp"

int run_catch(int argc, char** argv) { return Catch::Session().run(argc, argv); }

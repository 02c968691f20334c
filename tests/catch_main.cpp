// The main of the tests that need nothing set up before Catch2 runs.
#include "catch_run.hpp"

int main(int argc, char** argv) { return run_catch(argc, argv); }

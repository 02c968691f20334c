#pragma once
// Runs the Catch2 session (tests/catch_impl.cpp) from a test's own main.
int run_catch(int argc, char** argv);

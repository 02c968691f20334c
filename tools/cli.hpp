// Small helpers shared by the hcaemu subcommands: strict argument parsing, usage errors.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace hcaemu::tools {

constexpr int kExitOk = 0;
constexpr int kExitFail = 1;   // the job ran and found a problem
constexpr int kExitUsage = 2;  // bad arguments, unreadable input

// Whole-string unsigned parse (decimal or 0x hex) within [lo, hi]; nullopt on anything else.
std::optional<uint64_t> parse_uint(const std::string& s, uint64_t lo, uint64_t hi);

// Prints "hcaemu SUB: MSG" and a pointer to --help on stderr; returns kExitUsage.
int usage_error(const char* sub, const std::string& msg);

int cmd_dissect(int argc, char** argv);
int cmd_demo(int argc, char** argv);
int cmd_sim(int argc, char** argv);
int cmd_pingpong(int argc, char** argv);
int cmd_perf(int argc, char** argv);
int cmd_res(int argc, char** argv);
int cmd_stat(int argc, char** argv);
int cmd_exec(int argc, char** argv);
int cmd_ladder(int argc, char** argv);

}  // namespace hcaemu::tools

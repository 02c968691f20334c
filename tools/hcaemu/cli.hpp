// Small helpers shared by the hcaemu subcommands: strict argument parsing, usage errors.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace hcaemu::api {
class Context;
}

namespace hcaemu::tools {

constexpr int kExitOk = 0;
constexpr int kExitFail = 1;   // the job ran and found a problem
constexpr int kExitUsage = 2;  // bad arguments, unreadable input

// Whole-string unsigned parse (decimal or 0x hex) within [lo, hi]; nullopt on anything else.
std::optional<uint64_t> parse_uint(const std::string& s, uint64_t lo, uint64_t hi);

// Prints "hcaemu SUB: MSG" and a pointer to --help on stderr; returns kExitUsage.
int usage_error(const char* sub, const std::string& msg);

// --device SPEC for the tools that can use hcaemud (pingpong, perf, res, stat, exec): takes
// "--device SPEC" or "--device=SPEC" as take_attach_option does (1 taken, 0 not it, -1 with err:
// no value).
extern const char* const kDeviceHelp;
int take_device_option(int argc, char** argv, int& i, std::string& device, std::string& err);
// What is wrong with `device` and the attach options, or "": an unknown spec; "unix:PATH" with an
// attach option (a daemon owns its port), the first one given named in `first_attach`.
std::string device_conflict(const std::string& device, const std::string& first_attach);

int cmd_dissect(int argc, char** argv);
int cmd_demo(int argc, char** argv);
int cmd_sim(int argc, char** argv);
int cmd_pingpong(int argc, char** argv);
int cmd_perf(int argc, char** argv);
int cmd_res(int argc, char** argv);
int cmd_stat(int argc, char** argv);
int cmd_exec(int argc, char** argv);
int cmd_inject(int argc, char** argv);
int cmd_conform(int argc, char** argv);
// --stats of pingpong and perf: each injection rule, "inject #ID hits N matched M RULE" (stderr).
void print_inject_stats(api::Context& ctx);
int cmd_ladder(int argc, char** argv);

}  // namespace hcaemu::tools

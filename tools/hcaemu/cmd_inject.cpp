// hcaemu inject add RULE | list | del ID: event injection rules of a running hcaemud
// (docs/inject.md), through the daemon's `inject` op. A thin front end: the rule is checked here
// first (the same parser the daemon runs) so that a typo gets its message.
#include <cstdio>
#include <string>
#include <vector>

#include "dpdk_port/inject.hpp"
#include "tools/attach/attach.hpp"
#include "tools/hcaemu/cli.hpp"
#include "tools/libhcaemu/api.hpp"

namespace hcaemu::tools {

namespace {

constexpr const char* kHelp =
    "usage: hcaemu inject add RULE | list | del ID [--device unix:PATH]\n"
    "\n"
    "Event injection rules on a running hcaemud's port (docs/inject.md):\n"
    "  add RULE            adds a rule (one argument: quote it), prints its id\n"
    "  list                one line per rule: id, hits, frames matched, the rule\n"
    "  del ID              removes rule ID\n"
    "  --device unix:PATH  the daemon's socket (default /run/hcaemu.sock)\n"
    "  -h, --help          this text\n"
    "\n"
    "RULE: ACTION dir=tx|rx [qp=N] [op=OP] [psn=N] [round=N] [nth=N] [prob=P seed=N] [count=N|all]\n"
    "      [PARAMS], e.g. \"drop dir=tx op=WRITE_MIDDLE psn=5\", \"ecn dir=rx prob=0.1 seed=7 count=all\"\n";

}  // namespace

void print_inject_stats(api::Context& ctx) {
    std::vector<api::Context::InjectEntry> list;
    if (ctx.inject_list(list) != Status::ok) return;
    for (const auto& e : list)
        std::fprintf(stderr, "inject #%u hits %llu matched %llu %s\n", e.id, static_cast<unsigned long long>(e.hits),
                     static_cast<unsigned long long>(e.matched), e.text.c_str());
}

int cmd_inject(int argc, char** argv) {
    std::string device = "unix:/run/hcaemu.sock", err;
    std::vector<std::string> words;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            std::fputs(kHelp, stdout);
            return kExitOk;
        }
        const int t = take_device_option(argc, argv, i, device, err);
        if (t < 0) return usage_error("inject", err);
        if (t > 0) continue;
        if (a.size() > 1 && a[0] == '-' && words.empty()) return usage_error("inject", "unknown option '" + a + "'");
        words.push_back(a);
    }
    if (words.empty()) return usage_error("inject", "what to do? inject add RULE | list | del ID");
    const std::string& cmd = words[0];
    uint32_t id = 0;
    if (cmd == "add") {
        if (words.size() != 2) return usage_error("inject", "add takes one RULE (quote it)");
        port::InjectRule r;
        std::string msg;
        if (const port::InjectError e = port::parse_inject_rule(words[1], r, msg); e != port::InjectError::ok)
            return usage_error("inject", "'" + words[1] + "': " + msg + " (" + port::name(e) + ")");
    } else if (cmd == "del") {
        const auto v = words.size() == 2 ? parse_uint(words[1], 1, UINT32_MAX) : std::nullopt;
        if (!v) return usage_error("inject", "del takes one rule id (see inject list)");
        id = uint32_t(*v);
    } else if (cmd == "list") {
        if (words.size() != 1) return usage_error("inject", "list takes no argument");
    } else {
        return usage_error("inject", "unknown command '" + cmd + "' (add, list, del)");
    }
    if (device.rfind("unix:", 0) != 0 || device.size() == 5)
        return usage_error("inject", "--device: '" + device + "' is not unix:PATH (the socket of a running hcaemud)");
    auto ctx = api::open_device(device, AttachOptions{}, err);
    if (!ctx) {
        std::fprintf(stderr, "hcaemu inject: %s\n", err.c_str());
        return kExitFail;
    }
    Status s = Status::ok;
    if (cmd == "add") {
        s = ctx->inject_add(words[1], id);
        if (s == Status::ok) std::printf("%u\n", id);
    } else if (cmd == "del") {
        s = ctx->inject_del(id);
        if (s == Status::bad_handle) {
            std::fprintf(stderr, "hcaemu inject: no rule %u\n", id);
            return kExitFail;
        }
    } else {
        std::vector<api::Context::InjectEntry> list;
        s = ctx->inject_list(list);
        if (s == Status::ok)
            for (const auto& e : list)
                std::printf("%u hits %llu matched %llu %s\n", e.id, static_cast<unsigned long long>(e.hits),
                            static_cast<unsigned long long>(e.matched), e.text.c_str());
    }
    if (s != Status::ok) {
        std::fprintf(stderr, "hcaemu inject: the daemon refused '%s': %s\n", cmd.c_str(), name(s));
        return kExitFail;
    }
    return kExitOk;
}

}  // namespace hcaemu::tools

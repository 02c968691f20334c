// hcaemu perf: perftest's tests on an HCA attached to a wire (see tools/perf.hpp).
#include <cstdio>
#include <cstring>
#include <string>

#include "tools/attach.hpp"
#include "tools/cli.hpp"
#include "tools/oob_tcp.hpp"
#include "tools/perf.hpp"

namespace hcaemu::tools {

int cmd_perf(int argc, char** argv) {
    if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
        std::fputs(perf::kPerfHelp, argc < 2 ? stderr : stdout);
        std::fputs(kAttachHelp, argc < 2 ? stderr : stdout);
        return argc < 2 ? kExitUsage : kExitOk;
    }
    perf::Options o;
    AttachOptions ao;
    std::string err;
    const auto attach_opt = [&ao](int ac, char** av, int& i, std::string& e) { return take_attach_option(ac, av, i, ao, e); };
    if (!perf::parse_options(argc - 1, argv + 1, o, attach_opt, err)) {
        if (err == "help") {
            std::fputs(perf::kPerfHelp, stdout);
            std::fputs(kAttachHelp, stdout);
            return kExitOk;
        }
        return usage_error("perf", err);
    }
    if (ao.ip.empty()) return usage_error("perf", "--ip ADDR/LEN is required (this HCA's address)");

    auto a = Attached::open(ao, err);
    if (!a) {
        std::fprintf(stderr, "hcaemu perf: %s\n", err.c_str());
        return kExitFail;
    }
    std::unique_ptr<OobConn> conn;
    if (o.server.empty()) {
        std::fputs("\n************************************\n* Waiting for client to connect... *\n"
                   "************************************\n",
                   stdout);
        std::fflush(stdout);
        conn = OobConn::accept(o.tcp_port, o.oob_timeout_ms, err);
    } else {
        conn = OobConn::connect(o.server, o.tcp_port, o.oob_timeout_ms, err);
    }
    if (!conn) {
        std::fprintf(stderr, "hcaemu perf: %s\n", err.c_str());
        return kExitFail;
    }
    perf::Env env;
    env.dev = &a->dev();
    env.poll = [&a] { return a->poll(); };
    env.gid = a->gid();
    env.gid_index = a->gid_index();
    env.resolve = [&a, &o](const Gid& peer, std::string& e) { return a->resolve(peer, o.oob_timeout_ms, e); };
    const int rc = perf::run(o, env, *conn, err);
    if (rc) std::fprintf(stderr, "hcaemu perf: %s\n", err.c_str());
    return rc;
}

}  // namespace hcaemu::tools

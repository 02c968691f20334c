// hcaemu perf: perftest's tests on an hcaemu HCA, in this process attached to a wire or in hcaemud
// (--device unix:PATH) (see tools/hcaemu/perf.hpp).
#include <cstdio>
#include <cstring>
#include <string>

#include "tools/attach/attach.hpp"
#include "tools/hcaemu/cli.hpp"
#include "tools/libhcaemu/api.hpp"
#include "tools/hcaemu/cm_link.hpp"
#include "tools/hcaemu/oob_tcp.hpp"
#include "tools/hcaemu/perf.hpp"
#include "tools/hcaemu/stop.hpp"

namespace hcaemu::tools {

namespace {

// --stats: every counter that is not zero, "group.name value" a line, on stderr.
void print_stats(api::Context& ctx, const perf::Env& env) {
    api::Stats st;
    if (ctx.read_stats(st) != Status::ok) return;
    const auto group = [](const char* g, const std::vector<std::pair<std::string, uint64_t>>& v) {
        for (const auto& [n, x] : v)
            if (x) std::fprintf(stderr, "%s.%-28s %llu\n", g, n.c_str(), static_cast<unsigned long long>(x));
    };
    group("device", st.device);
    group("net", st.net);
    group("link", st.link);
    group("daemon", st.daemon);
    const auto perf_line = [](const char* n, uint64_t x) {
        std::fprintf(stderr, "perf.%-28s %llu\n", n, static_cast<unsigned long long>(x));
    };
    perf_line("max_turn_gap_us", env.max_turn_gap_ns / 1000);
    const perf::Env::Load& l = env.load;
    if (l.busy_turns) {
        perf_line("load_span_us", (l.last_ns - l.first_ns) / 1000);
        perf_line("load_busy_us", l.busy_ns / 1000);
        perf_line("load_idle_us", l.idle_ns / 1000);
        perf_line("load_busy_turns", l.busy_turns);
        perf_line("load_idle_turns", l.idle_turns);
        perf_line("load_frames", l.frames);
    }
    // The busy turns of the same phase, step by step (in-process only)
    api::Context::TurnReport tr;
    if (ctx.read_turn_profile(tr) == Status::ok && tr.turns) {
        perf_line("turn_busy_turns", tr.turns);
        perf_line("turn_frames", tr.frames);
        for (const auto& s : tr.steps) {
            perf_line(("turn_" + s.name + "_turns").c_str(), s.turns);
            perf_line(("turn_" + s.name + "_p50_ns").c_str(), s.p50_ns);
            perf_line(("turn_" + s.name + "_p90_ns").c_str(), s.p90_ns);
            perf_line(("turn_" + s.name + "_mean_ns").c_str(), s.mean_ns);
        }
    }
    print_inject_stats(ctx);
}

void banner() {
    std::fputs("\n************************************\n* Waiting for client to connect... *\n"
               "************************************\n",
               stdout);
    std::fflush(stdout);
}

int run_test(const perf::Options& o, api::Context& ctx, OobStream& conn, CmLink* cm, const sockaddr_storage* at = nullptr) {
    perf::Env env;
    env.ctx = &ctx;
    env.resolve_timeout_ms = o.oob_timeout_ms;
    env.cm = cm;
    if (at) env.cm_addr = *at;
    std::string err;
    const int rc = perf::run(o, env, conn, err);
    if (rc && stop_requested()) return report_stop("perf");
    if (rc) std::fprintf(stderr, "hcaemu perf: %s\n", err.c_str());
    if (o.stats) print_stats(ctx, env);
    return rc;
}

// -R: perftest's -R with its -z (perftest_parameters.c turns it on): the exchange over an rdma_cm
// connection on the test's port (CmStream), then the test's QPs connected by rdma_cm on the same
// port (perf.cpp, cm_connect).
int perf_rdma_cm(const perf::Options& o, api::Context& ctx, const std::function<bool()>& turn) {
    api::Cm* cm = ctx.cm();
    if (!cm) {
        std::fprintf(stderr, "hcaemu perf: -R: this device has no connection manager (rdma_cm)\n");
        return kExitFail;
    }
    sockaddr_storage at{};
    (void)CmLink::address(o.server, o.tcp_port, at);  // checked by cmd_perf
    CmLink link(ctx, *cm, o.oob_timeout_ms, turn);
    CmStream conn(ctx, link);
    conn.set_idle(turn);
    std::string err;
    if (o.server.empty()) banner();
    const bool ok = o.server.empty() ? conn.accept(at, err) : conn.connect(at, err);
    if (!ok && stop_requested()) return report_stop("perf");
    if (!ok) {
        std::fprintf(stderr, "hcaemu perf: rdma_cm: %s\n", err.c_str());
        return kExitFail;
    }
    const int rc = run_test(o, ctx, conn, &link, &at);
    conn.set_idle(turn);
    conn.close();
    return rc;
}

}  // namespace

int cmd_perf(int argc, char** argv) {
    if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
        std::fputs(perf::kPerfHelp, argc < 2 ? stderr : stdout);
        std::fputs(kDeviceHelp, argc < 2 ? stderr : stdout);
        std::fputs(kAttachHelp, argc < 2 ? stderr : stdout);
        return argc < 2 ? kExitUsage : kExitOk;
    }
    perf::Options o;
    AttachOptions ao;
    std::string device, first_attach, err;
    const auto other = [&](int ac, char** av, int& i, std::string& e) {
        if (const int t = take_device_option(ac, av, i, device, e)) return t;
        const std::string a = av[i];
        const int t = take_attach_option(ac, av, i, ao, e);
        if (t > 0 && first_attach.empty()) first_attach = a.substr(0, a.find('='));
        return t;
    };
    if (!perf::parse_options(argc - 1, argv + 1, o, other, err)) {
        if (err == "help") {
            std::fputs(perf::kPerfHelp, stdout);
            std::fputs(kDeviceHelp, stdout);
            std::fputs(kAttachHelp, stdout);
            return kExitOk;
        }
        return usage_error("perf", err);
    }
    if (const std::string c = device_conflict(device, first_attach); !c.empty()) return usage_error("perf", c);
    if (sockaddr_storage at{}; o.rdma_cm && !CmLink::address(o.server, o.tcp_port, at))
        return usage_error("perf", "-R: SERVER must be the peer's RoCE address (IPv4 or IPv6), not '" + o.server + "'");
    const bool local = device.empty() || device == "local";
    if (local && ao.ip.empty()) return usage_error("perf", "--ip ADDR/LEN is required (this HCA's address)");

    // SIGINT/SIGTERM: every wait returns, the objects and the port close as on any exit.
    install_stop_handlers();
    auto ctx = api::open_device(device, ao, err);
    if (!ctx && stop_requested()) return report_stop("perf");
    if (!ctx) {
        std::fprintf(stderr, "hcaemu perf: %s\n", err.c_str());
        return kExitFail;
    }
    // The engine turns while the connection is made, so that the port answers ARP and neighbour
    // solicitations for its address meanwhile (a peer may resolve it before its tool connects).
    auto turn = [c = ctx.get()] { return c->poll() != 0; };
    if (o.rdma_cm) return perf_rdma_cm(o, *ctx, turn);
    std::unique_ptr<OobConn> conn;
    if (o.server.empty()) {
        banner();
        conn = OobConn::accept(o.tcp_port, o.oob_timeout_ms, err, turn);
    } else {
        conn = OobConn::connect(o.server, o.tcp_port, o.oob_timeout_ms, err, turn);
    }
    if (!conn && stop_requested()) return report_stop("perf");
    if (!conn) {
        std::fprintf(stderr, "hcaemu perf: %s\n", err.c_str());
        return kExitFail;
    }
    return run_test(o, *ctx, *conn, nullptr);
}

}  // namespace hcaemu::tools

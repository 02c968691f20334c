// hcaemu: the command-line front end. Each subcommand is a thin layer over the libraries.
#include <cstdio>
#include <cstring>
#include <string>

#include "tools/attach/attach.hpp"
#include "tools/hcaemu/cli.hpp"
#include "tools/hcaemu/stop.hpp"

namespace {

constexpr const char* kHelp =
    "usage: hcaemu SUBCOMMAND [OPTIONS]\n"
    "\n"
    "hcaemu is a software RoCE v2 HCA. Subcommands:\n"
    "  dissect FILE.pcap   decode every RoCE v2 frame of a capture: headers, fields, ICRC, and\n"
    "                      what each field means to the HCA (--brief, --json; --lang zh: 简体中文)\n"
    "  demo                two HCAs on the embedded DPDK link perform SEND, WRITE, READ and\n"
    "                      atomics, told step by step, verified and captured (--samples: one\n"
    "                      frame of every RoCE v2 opcode, dissected; --lang zh: 简体中文)\n"
    "  sim                 two HCAs over an in-memory wire in virtual time, with seeded faults:\n"
    "                      every packet and event traced, memory and completions verified\n"
    "  pingpong [HOST]     ibv_rc_pingpong's SEND ping-pong on an hcaemu HCA over DPDK, facing\n"
    "                      an unmodified ibv_rc_pingpong (same flags, same exchange, same output)\n"
    "  perf TEST [SERVER]  perftest's ib_<TEST> (write_bw, read_bw, send_bw, atomic_bw, write_lat,\n"
    "                      read_lat, send_lat, atomic_lat) over DPDK, facing hcaemu or perftest\n"
    "  res show KIND       the objects (pd, mr, cq, qp, srq) of a running hcaemud, every client's,\n"
    "                      one line each (--json, --device unix:PATH)\n"
    "  stat                every counter of a running hcaemud: device, net, link, daemon\n"
    "                      (--json, --device unix:PATH)\n"
    "  ladder FILE.pcap    a capture as a ladder (sequence) diagram, SVG or HTML: lanes per QP,\n"
    "                      arrows per packet, retransmissions, NAKs and drops marked\n"
    "  exec -- PROGRAM     runs an unmodified verbs program (perftest, ibv_rc_pingpong) on hcaemu\n"
    "  inject add|list|del event injection rules of a running hcaemud (--device unix:PATH)\n"
    "  conform FILE.pcap   checks every RoCE v2 packet of a capture against the spec's rules, per\n"
    "                      QP and across packets: each violation with its frame, PSN and rule\n"
    "\n"
    "`hcaemu SUBCOMMAND --help` explains a subcommand's options.\n"
    "Exit status: 0 success, 1 the job found a problem, 2 bad arguments or unreadable input;\n"
    "128+signal after SIGINT (130) or SIGTERM (143), which pingpong, perf and sim take as a clean stop.\n";

}  // namespace

int main(int argc, char** argv) {
    // The libraries' waits (resolving a peer's address) end at SIGINT/SIGTERM, once a subcommand
    // installed its handlers (stop.hpp).
    hcaemu::tools::set_interrupt_check(&hcaemu::tools::stop_requested);
    if (argc < 2) {
        std::fputs(kHelp, stderr);
        return hcaemu::tools::kExitUsage;
    }
    const std::string sub = argv[1];
    if (sub == "-h" || sub == "--help" || sub == "help") {
        std::fputs(kHelp, stdout);
        return hcaemu::tools::kExitOk;
    }
    if (sub == "dissect") return hcaemu::tools::cmd_dissect(argc - 1, argv + 1);
    if (sub == "demo") return hcaemu::tools::cmd_demo(argc - 1, argv + 1);
    if (sub == "sim") return hcaemu::tools::cmd_sim(argc - 1, argv + 1);
    if (sub == "pingpong") return hcaemu::tools::cmd_pingpong(argc - 1, argv + 1);
    if (sub == "perf") return hcaemu::tools::cmd_perf(argc - 1, argv + 1);
    if (sub == "res") return hcaemu::tools::cmd_res(argc - 1, argv + 1);
    if (sub == "stat") return hcaemu::tools::cmd_stat(argc - 1, argv + 1);
    if (sub == "ladder") return hcaemu::tools::cmd_ladder(argc - 1, argv + 1);
    if (sub == "exec") return hcaemu::tools::cmd_exec(argc - 1, argv + 1);
    if (sub == "inject") return hcaemu::tools::cmd_inject(argc - 1, argv + 1);
    if (sub == "conform") return hcaemu::tools::cmd_conform(argc - 1, argv + 1);
    std::fprintf(stderr, "hcaemu: unknown subcommand '%s'\n\n%s", sub.c_str(), kHelp);
    return hcaemu::tools::kExitUsage;
}

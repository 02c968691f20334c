// perftest's command line, as far as `hcaemu perf` implements it; the flags it does not implement
// are refused by name rather than ignored.
#include <algorithm>
#include <cstring>

#include "tools/hcaemu/cli.hpp"
#include "tools/hcaemu/perf.hpp"

namespace hcaemu::tools::perf {

const char* const kPerfHelp =
    "usage: hcaemu perf TEST [OPTIONS] [SERVER]\n"
    "\n"
    "perftest's ib_<TEST> on this HCA: TEST is write_bw, read_bw, send_bw, atomic_bw, write_lat,\n"
    "read_lat, send_lat or atomic_lat. Without SERVER it is the server and waits for a client on TCP\n"
    "port 18515; with it, the client. Either side may be Debian's ib_* tool (perftest 4.5-0.17,\n"
    "version 6.06): the out-of-band exchange, the RoCE traffic and the printed tables are perftest's.\n"
    "\n"
    "perftest's options:\n"
    "  -p, --port N          TCP port of the out-of-band exchange (default 18515)\n"
    "  -d, --ib-dev NAME     device name to print (default hcaemu0)\n"
    "  -i, --ib-port N       port number (only 1)\n"
    "  -x, --gid-index N     GID index (default: the index of --ip's address)\n"
    "  -s, --size N          message size (default 65536 for BW, 2 for latency, 8 for atomics)\n"
    "  -a, --all             every size from 2 B to 8 MiB (powers of two)\n"
    "  -n, --iters N         iterations (default 5000 for BW, 1000 for latency; at least 5)\n"
    "  -D, --duration SEC    run for SEC seconds instead of -n (as perftest: SEC/4 s of warm-up and of\n"
    "                        cool-down are not counted); not with -a\n"
    "  -q, --qp N            QPs (BW tests, 1..16384; default 1)\n"
    "  -m, --mtu N           256, 512, 1024, 2048 or 4096 (default: the port's active MTU)\n"
    "  -t, --tx-depth N      send queue depth (default 128 for BW, 1 for latency)\n"
    "  -r, --rx-depth N      receive queue depth (send tests; default 512)\n"
    "  -Q, --cq-mod N        one completion every N requests (BW; default 100)\n"
    "  -u, --qp-timeout N    the RC QP's Local ACK Timeout: 4.096 us * 2^N, 0 none (default 14);\n"
    "                        retry_cnt is 7, so a peer silent for 8 timeouts ends the run\n"
    "  -o, --outs N          outstanding reads and atomics (default and most: 128)\n"
    "  -A, --atomic_type T   FETCH_AND_ADD (default) or CMP_AND_SWAP\n"
    "  -c, --connection T    RC (default), UC (write and send tests) or UD (send tests; a message\n"
    "                        fits one MTU: without -s, and with -a, the size is lowered to it)\n"
    "  -F, --CPU-freq        accepted (no cycle counter is read: time is CLOCK_MONOTONIC)\n"
    "  -R, --rdma_cm         connect the QPs with rdma_cm (the IB CM on QP1), and make the exchange\n"
    "                        over rdma_cm too, as perftest's -R: SERVER is the peer's RoCE address,\n"
    "                        -p the rdma_cm port; RC only (docs/rdmacm.md)\n"
    "      --report_gbits    report Gb/s instead of MB/s (2^20 bytes)\n"
    "hcaemu's own:\n"
    "      --check           fill sources with a pattern and verify what arrived after the run\n"
    "                        (both sides hcaemu; prints 'data check: ok' or the first difference)\n"
    "      --dump PREFIX     write_bw, read_bw, send_bw (one QP, -n): at the end write PREFIX.bin (the\n"
    "                        buffer, then every WR as completed, or every message received) and\n"
    "                        PREFIX.json (QPNs, PSNs, addresses, MTU, the records), for\n"
    "                        tests/scripts/check_capture_data.py to compare with a capture\n"
    "      --oob-timeout SEC wait at most SEC for the peer: connect, accept, every message, and any\n"
    "                        stall of the RoCE traffic (default 60)\n"
    "      --stats           at the end, also after a failure, print the counters that are not zero\n"
    "                        on stderr, one \"group.name value\" a line: the HCA's (device.), the\n"
    "                        port's ARP/ND and filter (net.), the ethdev's (link.), and\n"
    "                        perf.max_turn_gap_us: the longest time the engine went unturned in a wait;\n"
    "                        then the engine's load in the test's last phase (perf.load_*) and, in\n"
    "                        process, its busy turns step by step (perf.turn_*: docs/tools/perf.md)\n";

namespace {

bool parse_verb(const std::string& t, Options& o) {
    static const struct {
        const char* name;
        Verb verb;
        Kind kind;
    } kTests[] = {{"write_bw", Verb::write, Kind::bw},   {"read_bw", Verb::read, Kind::bw},
                  {"send_bw", Verb::send, Kind::bw},     {"atomic_bw", Verb::atomic, Kind::bw},
                  {"write_lat", Verb::write, Kind::lat}, {"read_lat", Verb::read, Kind::lat},
                  {"send_lat", Verb::send, Kind::lat},   {"atomic_lat", Verb::atomic, Kind::lat}};
    for (const auto& t2 : kTests)
        if (t == t2.name) {
            o.verb = t2.verb;
            o.kind = t2.kind;
            return true;
        }
    return false;
}

// --dump keeps every message's bytes: counted BW runs of one QP, within kDumpMaxRecordBytes.
bool dump_allowed(const Options& o, std::string& err) {
    if (o.dump.empty()) return true;
    if (o.kind != Kind::bw || o.verb == Verb::atomic) {
        err = "--dump: write_bw, read_bw and send_bw only";
        return false;
    }
    if (o.num_qps > 1) {
        err = "--dump: one QP only (-q 1)";
        return false;
    }
    if (o.duration) {
        err = "--dump: counted runs only (-n), not -D";
        return false;
    }
    uint64_t bytes = 0;
    if (o.all_sizes)
        for (int i = 1; i < 24; ++i) bytes += (uint64_t(1) << i) * o.iters;
    else
        bytes = o.size * o.iters;
    if (bytes > kDumpMaxRecordBytes) {
        err = "--dump: the records would take " + std::to_string(bytes) + " bytes, more than 64 MiB (lower -n or -s)";
        return false;
    }
    return true;
}

}  // namespace

bool parse_options(int argc, char** argv, Options& o, const OtherOption& other, std::string& err) {
    if (argc < 1 || !parse_verb(argv[0], o)) {
        err = argc < 1 ? "which test? (write_bw, read_bw, send_bw, atomic_bw, write_lat, read_lat, send_lat, atomic_lat)"
                       : std::string("unknown test '") + argv[0] + "'";
        return false;
    }
    bool size_given = false, cq_mod_given = false;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        std::string val;
        bool has_val = false;
        // --name=value as getopt_long takes it
        if (a.rfind("--", 0) == 0 && a.find('=') != std::string::npos) {
            val = a.substr(a.find('=') + 1);
            a = a.substr(0, a.find('='));
            has_val = true;
        }
        auto value = [&](const char* what) -> bool {
            if (has_val) return true;
            if (i + 1 >= argc) {
                err = a + " needs " + what;
                return false;
            }
            val = argv[++i];
            return true;
        };
        auto num = [&](uint64_t lo, uint64_t hi, uint64_t& out) -> bool {
            if (!value("a number")) return false;
            const auto v = parse_uint(val, lo, hi);
            if (!v) {
                err = a + ": '" + val + "' is not a number in " + std::to_string(lo) + ".." + std::to_string(hi);
                return false;
            }
            out = *v;
            return true;
        };
        uint64_t v = 0;
        if (a == "-p" || a == "--port") {
            if (!num(1, 65535, v)) return false;
            o.tcp_port = uint16_t(v);
        } else if (a == "-d" || a == "--ib-dev") {
            if (!value("a name")) return false;
            o.dev_name = val;
        } else if (a == "-i" || a == "--ib-port") {
            if (!num(1, 255, v)) return false;
            if (v != 1) {
                err = "-i: the device has one port, 1";
                return false;
            }
        } else if (a == "-x" || a == "--gid-index") {
            if (!num(0, 255, v)) return false;
            o.gid_index = int(v);
        } else if (a == "-s" || a == "--size") {
            if (!num(1, 1u << 30, v)) return false;
            o.size = v;
            size_given = true;
            o.size_given = true;
        } else if (a == "-a" || a == "--all") {
            o.all_sizes = true;
        } else if (a == "-n" || a == "--iters") {
            if (!num(5, 100'000'000, v)) return false;
            o.iters = v;
        } else if (a == "-D" || a == "--duration") {
            if (!num(1, 86400, v)) return false;
            o.duration = uint32_t(v);
        } else if (a == "-q" || a == "--qp") {
            if (!num(1, kMaxQps, v)) return false;
            o.num_qps = uint32_t(v);
        } else if (a == "-m" || a == "--mtu") {
            if (!num(256, 4096, v)) return false;
            if (v != 256 && v != 512 && v != 1024 && v != 2048 && v != 4096) {
                err = "-m: the MTU is 256, 512, 1024, 2048 or 4096";
                return false;
            }
            o.mtu = uint32_t(v);
        } else if (a == "-t" || a == "--tx-depth") {
            if (!num(1, 8192, v)) return false;
            o.tx_depth = uint32_t(v);
        } else if (a == "-r" || a == "--rx-depth") {
            if (!num(1, 8192, v)) return false;
            o.rx_depth = uint32_t(v);
        } else if (a == "-Q" || a == "--cq-mod") {
            if (!num(1, 1024, v)) return false;
            o.cq_mod = uint32_t(v);
            cq_mod_given = true;
        } else if (a == "-u" || a == "--qp-timeout") {
            if (!num(0, 31, v)) return false;  // the 5-bit Local ACK Timeout (IBTA ch. 11)
            o.qp_timeout = uint8_t(v);
        } else if (a == "-o" || a == "--outs") {
            if (!num(1, 65535, v)) return false;
            o.out_reads = uint32_t(v);
        } else if (a == "-A" || a == "--atomic_type") {
            if (!value("a type")) return false;
            if (val == "FETCH_AND_ADD")
                o.atomic = AtomicOp::fetch_and_add;
            else if (val == "CMP_AND_SWAP")
                o.atomic = AtomicOp::cmp_and_swap;
            else {
                err = "-A: '" + val + "': choose FETCH_AND_ADD or CMP_AND_SWAP";
                return false;
            }
        } else if (a == "-c" || a == "--connection") {
            if (!value("a type")) return false;
            if (val == "RC")
                o.conn = QpType::rc;
            else if (val == "UC")
                o.conn = QpType::uc;
            else if (val == "UD") {
                // perftest_parameters.c's change_conn_type: UD only with SEND
                if (o.verb != Verb::send) {
                    err = "-c UD: UD connection only possible in SEND verb";
                    return false;
                }
                o.conn = QpType::ud;
            } else {
                err = "-c: '" + val + "': choose RC, UC or UD";
                return false;
            }
        } else if (a == "-F" || a == "--CPU-freq") {
            // nothing to do: no cycle counter, so no frequency warning either
        } else if (a == "--report_gbits") {
            o.gbits = true;
        } else if (a == "--check") {
            o.check = true;
        } else if (a == "--stats") {
            o.stats = true;
        } else if (a == "--dump") {
            if (!value("a file prefix")) return false;
            if (val.empty() || val[0] == '-') {
                err = "--dump needs a file prefix";
                return false;
            }
            o.dump = val;
        } else if (a == "--oob-timeout") {
            if (!num(1, 3600, v)) return false;
            o.oob_timeout_ms = v * 1000;
        } else if (a == "-R" || a == "--rdma_cm") {
            o.rdma_cm = true;
        } else if (a == "-z" || a == "--com_rdma_cm" || a == "-b" ||
                   a == "--bidirectional" || a == "-e" || a == "--events" || a == "-l" || a == "--post_list" ||
                   a == "-I" || a == "--inline_size" || a == "-g" || a == "--mcg" || a == "-O" ||
                   a == "--dualport" || a == "--use_srq" || a == "-S" || a == "--sl" || a == "-N" || a == "--noPeak" || a == "-C" || a == "--report-cycles" ||
                   a == "-H" || a == "--report-histogram" || a == "-U" || a == "--report-unsorted") {
            err = a + ": a perftest option hcaemu perf does not implement";
            return false;
        } else if (a == "-h" || a == "--help") {
            err = "help";
            return false;
        } else if (!a.empty() && a[0] == '-') {
            const int r = other ? other(argc, argv, i, err) : 0;
            if (r < 0) return false;
            if (r == 0) {
                err = "unknown option '" + a + "'";
                return false;
            }
        } else if (o.server.empty()) {
            o.server = a;
        } else {
            err = "one server address only ('" + o.server + "', then '" + a + "')";
            return false;
        }
    }

    // perftest's defaults and the dependencies between options (perftest_parameters.c)
    const bool bw = o.kind == Kind::bw;
    if (o.verb == Verb::atomic) {
        if (size_given && o.size != 8) {
            err = "-s: atomic tests move 8 bytes";
            return false;
        }
        if (o.all_sizes) {
            err = "-a: atomic tests have one size, 8 bytes";
            return false;
        }
        o.size = 8;
    } else if (!size_given) {
        o.size = bw ? 65536 : 2;
    }
    if (o.all_sizes && size_given) {
        err = "-a and -s together: -a runs every size";
        return false;
    }
    // perftest 6.06 (seen in the interop guest): -D with -a is refused with this sentence; -D with
    // -n runs for the duration and ignores -n.
    if (o.duration && o.all_sizes) {
        err = "-D and -a together: Duration mode currently doesn't support running on all sizes.";
        return false;
    }
    if (o.conn == QpType::uc && (o.verb == Verb::read || o.verb == Verb::atomic)) {
        err = "-c UC: RDMA READ and atomics need RC";
        return false;
    }
    if (o.rdma_cm && o.conn != QpType::rc) {
        err = "-R: rdma_cm connects RC QPs only here (-c RC)";
        return false;
    }
    if (!bw && o.num_qps != 1) {
        err = "-q: latency tests use one QP";
        return false;
    }
    if (!o.iters) o.iters = bw ? 5000 : 1000;
    if (!o.tx_depth) o.tx_depth = bw ? 128 : 1;
    if (!o.rx_depth) o.rx_depth = o.verb == Verb::send ? 512 : 1;
    if (!o.duration) {
        o.tx_depth = uint32_t(std::min<uint64_t>(o.tx_depth, o.iters));
        if (o.verb == Verb::send) o.rx_depth = uint32_t(std::min<uint64_t>(o.rx_depth, o.iters));
    }
    if (!cq_mod_given) o.cq_mod = 100;
    if (o.cq_mod > o.tx_depth) o.cq_mod = o.tx_depth;
    return dump_allowed(o, err);
}

}  // namespace hcaemu::tools::perf

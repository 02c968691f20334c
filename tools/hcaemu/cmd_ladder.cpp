// hcaemu ladder: a capture as a sequence diagram (SVG or HTML), drawn by tools/ladder.
#include <cstdio>
#include <string>
#include <vector>

#include "dpdk_port/pcap_file.hpp"
#include "tools/hcaemu/cli.hpp"
#include "tools/ladder/ladder.hpp"

namespace hcaemu::tools {

namespace {

constexpr const char* kHelp =
    "usage: hcaemu ladder [OPTIONS] FILE.pcap [-o OUT.svg | -o OUT.html]\n"
    "\n"
    "Draws the RoCE v2 frames of a capture as a ladder (sequence) diagram: one lane per endpoint\n"
    "(IP address and QP; the sending QP is learned from the other direction's DestQP), one arrow\n"
    "per packet with its opcode, PSN, payload length, MSN and AETH syndrome. ACKs, NAKs, READ\n"
    "responses and atomic ACKs name the requests they answer (\"acks PSN x..y\", a dotted line on\n"
    "the responder's lane); a PSN seen before in the same direction is a dashed \"retx\" arrow (\"dup\"\n"
    "when the frame is a byte-identical copy); NAKs are red, RNR NAKs orange; pauses of --gap-us\n"
    "or more are drawn compressed with their length. Other frames (ARP, TCP) are skipped and\n"
    "counted. The SVG is self-contained (no script, no font, nothing fetched): open it in a browser\n"
    "or put it in a document; .html wraps the same SVG in a page.\n"
    "\n"
    "options:\n"
    "  -o FILE          the diagram: FILE.svg or FILE.html (default: the capture's name with .svg)\n"
    "  --frames A-B     only frames A to B (1-based, inclusive, as `hcaemu dissect` numbers them;\n"
    "                   A- to the end); retransmissions and answers still count the whole capture\n"
    "  --qp N           only arrows from or to QP N (either end; decimal or 0x hex)\n"
    "  --summary        one row per message: a message's First..Last packets become one arrow\n"
    "                   (\"RDMA WRITE PSN 0x000100..0x000102 3 pkts len 3000\"); ACKs, NAKs, lost\n"
    "                   and retransmitted packets stay rows of their own\n"
    "  --gap-us N       draw pauses of N microseconds or more as a compressed gap (default 1000)\n"
    "  -h, --help       this text\n"
    "\n"
    "`hcaemu sim --pcap F --ladder OUT` and `hcaemu demo --ladder OUT` draw their own capture, with\n"
    "the frames the wire dropped as arrows that end in a cross; so does this command for the frames\n"
    "an injection rule dropped or replaced (noted in FILE.pcap.notes beside it, docs/inject.md).\n"
    "exit status: 0 written, 1 nothing to draw (no RoCE v2 frame, or none left after the filters,\n"
    "or too many arrows), 2 bad arguments or an unreadable, non-pcap or truncated file.\n";

bool parse_frames(const std::string& v, ladder::Options& o) {
    const size_t dash = v.find('-');
    if (dash == std::string::npos) {
        auto a = parse_uint(v, 1, UINT64_MAX);
        if (!a) return false;
        o.first_frame = o.last_frame = *a;
        return true;
    }
    auto a = parse_uint(v.substr(0, dash), 1, UINT64_MAX);
    if (!a) return false;
    o.first_frame = *a;
    if (dash + 1 == v.size()) return true;
    auto b = parse_uint(v.substr(dash + 1), *a, UINT64_MAX);
    if (!b) return false;
    o.last_frame = *b;
    return true;
}

}  // namespace

int cmd_ladder(int argc, char** argv) {
    ladder::Options opt;
    std::string file, out;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            std::fputs(kHelp, stdout);
            return kExitOk;
        } else if (a == "--summary") {
            opt.summary = true;
        } else if (a == "-o" || a == "--frames" || a == "--qp" || a == "--gap-us") {
            if (i + 1 >= argc) return usage_error("ladder", a + " needs a value");
            const std::string v = argv[++i];
            if (a == "-o") {
                out = v;
            } else if (a == "--frames") {
                if (!parse_frames(v, opt)) return usage_error("ladder", "--frames takes A-B, A- or A (frame numbers from 1, A <= B): '" + v + "'");
            } else if (a == "--qp") {
                auto q = parse_uint(v, 0, 0xFFFFFF);
                if (!q) return usage_error("ladder", "--qp takes a QP number 0..0xffffff: '" + v + "'");
                opt.qp_filter = true;
                opt.qp = uint32_t(*q);
            } else {
                auto g = parse_uint(v, 1, 3'600'000'000ull);
                if (!g) return usage_error("ladder", "--gap-us takes microseconds, 1 to 3600000000: '" + v + "'");
                opt.gap_ns = *g * 1000;
            }
        } else if (!a.empty() && a[0] == '-') {
            return usage_error("ladder", "unknown option '" + a + "'");
        } else if (file.empty()) {
            file = a;
        } else {
            return usage_error("ladder", "one capture only; also got '" + a + "'");
        }
    }
    if (file.empty()) return usage_error("ladder", "no pcap file given");
    if (out.empty()) {
        const size_t dot = file.find_last_of('.'), slash = file.find_last_of('/');
        out = (dot != std::string::npos && (slash == std::string::npos || dot > slash) ? file.substr(0, dot) : file) + ".svg";
    }
    if (!ladder::output_ext_ok(out)) return usage_error("ladder", "-o: the output must end in .svg, .html or .htm: '" + out + "'");

    std::string err;
    ladder::Ladder model;
    // Frames an injection rule dropped or replaced by a forged one: their notes end "not sent" (tx)
    // or "not delivered" (rx).
    std::vector<ladder::Drop> drops;
    for (const auto& [frame, text] : port::read_notes(file))
        if (text.find(": not sent") != std::string::npos || text.find(": not delivered") != std::string::npos)
            drops.push_back({frame, ladder::DropReason::injected});
    const ladder::WriteResult r = ladder::write_ladder(file, drops, out, opt, err, &model);
    if (r != ladder::WriteResult::ok) {
        std::fprintf(stderr, "hcaemu ladder: %s\n", err.c_str());
        return r == ladder::WriteResult::nothing_to_draw ? kExitFail : kExitUsage;
    }
    const ladder::Stats& s = model.stats;
    std::printf("wrote %s: %zu arrows (%llu packets) between %zu lanes; %llu frames read, %llu RoCE v2, %llu other skipped",
                out.c_str(), model.arrows.size(), static_cast<unsigned long long>(s.shown), model.lanes.size(),
                static_cast<unsigned long long>(s.frames), static_cast<unsigned long long>(s.roce),
                static_cast<unsigned long long>(s.skipped));
    if (s.malformed) std::printf(", %llu cut before the BTH", static_cast<unsigned long long>(s.malformed));
    std::printf("\n");
    return kExitOk;
}

}  // namespace hcaemu::tools

// hcaemu demo: writes a capture of one frame of every RoCE v2 opcode (a made-up conversation
// between two ports) and dissects it. Later issues grow it into a run on the embedded link.
#include <cstdio>
#include <string>

#include "dpdk_port/pcap_file.hpp"
#include "packet/dissect.hpp"
#include "tools/cli.hpp"
#include "tools/samples.hpp"

namespace hcaemu::tools {

namespace {

constexpr const char* kHelp =
    "usage: hcaemu demo [--pcap FILE] [--brief | --json | --quiet]\n"
    "\n"
    "Builds one RoCE v2 frame of every opcode hcaemu knows (RC, UC, UD, CNP; IPv4, IPv6 and an\n"
    "802.1Q-tagged frame), as two ports 198.18.0.1 and 198.18.0.2 would exchange them, writes them\n"
    "to a pcap file, then reads that file back and dissects it, as `hcaemu dissect` does.\n"
    "\n"
    "options:\n"
    "  --pcap FILE   where to write the capture (default: hcaemu-demo.pcap)\n"
    "  --brief       one line per frame\n"
    "  --json        one JSON object per frame\n"
    "  --quiet       write the capture only\n"
    "  -h, --help    this text\n";

}  // namespace

int cmd_demo(int argc, char** argv) {
    std::string file = "hcaemu-demo.pcap";
    pkt::DissectOptions opt;
    bool quiet = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            std::fputs(kHelp, stdout);
            return kExitOk;
        } else if (a == "--pcap") {
            if (i + 1 >= argc) return usage_error("demo", "--pcap needs a file name");
            file = argv[++i];
        } else if (a == "--brief") {
            opt.format = pkt::DissectFormat::brief;
        } else if (a == "--json") {
            opt.format = pkt::DissectFormat::json;
        } else if (a == "--quiet") {
            quiet = true;
        } else {
            return usage_error("demo", "unknown argument '" + a + "'");
        }
    }

    const auto frames = sample_frames();
    {
        port::PcapWriter w(file);
        if (!w.ok()) {
            std::fprintf(stderr, "hcaemu demo: %s\n", w.error().c_str());
            return kExitUsage;
        }
        uint64_t ts = 1'700'000'000'000'000'000ull;
        for (const auto& f : frames) w.write(f.bytes, ts += 1000);
    }
    if (quiet) {
        std::printf("wrote %zu frames to %s\n", frames.size(), file.c_str());
        return kExitOk;
    }

    // Read back what was written, so that the demo shows the file, not the builder's memory.
    port::PcapReader rd(file);
    if (!rd.ok()) {
        std::fprintf(stderr, "hcaemu demo: %s\n", rd.error().c_str());
        return kExitFail;
    }
    pkt::DissectSummary sum;
    port::PcapFrame fr;
    std::string out;
    uint64_t idx = 0;
    uint64_t t0 = 0;
    while (rd.next(fr)) {
        if (idx == 0) t0 = fr.ts_ns;
        out.clear();
        if (opt.format == pkt::DissectFormat::full && idx < frames.size())
            out += "# " + frames[idx].what + "\n";
        ++idx;
        pkt::Packet p;
        const pkt::ParseError e = pkt::parse(fr.data, p);
        pkt::dissect(out, p, e, fr.data.size(), idx, double(fr.ts_ns - t0) * 1e-9, opt);
        sum.add(p, e);
        if (opt.format == pkt::DissectFormat::full) out += '\n';
        std::fwrite(out.data(), 1, out.size(), stdout);
    }
    out.clear();
    sum.print(out, opt.format);
    std::fwrite(out.data(), 1, out.size(), stdout);
    if (opt.format != pkt::DissectFormat::json)
        std::printf("\nwrote %zu frames to %s; read them back: %llu frames, %llu with a good ICRC\n",
                    frames.size(), file.c_str(), static_cast<unsigned long long>(sum.frames),
                    static_cast<unsigned long long>(sum.roce));
    return sum.frames == frames.size() && sum.roce == frames.size() ? kExitOk : kExitFail;
}

}  // namespace hcaemu::tools

// hcaemu dissect: decode a pcap's RoCE v2 frames with the packet layer.
#include <cstdio>
#include <map>
#include <string>

#include "dpdk_port/pcap_file.hpp"
#include "packet/dissect.hpp"
#include "tools/hcaemu/cli.hpp"

namespace hcaemu::tools {

namespace {

constexpr const char* kHelp =
    "usage: hcaemu dissect [OPTIONS] FILE.pcap\n"
    "\n"
    "Decodes every frame of an Ethernet pcap (or pcapng) file: Ethernet, IPv4/IPv6, UDP, BTH and\n"
    "the IBA extension headers with their fields as the spec names them, the ICRC check, and a\n"
    "note on what each header means to the HCA (which QP, which MR, which check). Frames that\n"
    "are not RoCE v2 (ARP, TCP, other UDP ports) are named as such and counted. Frames to QP1 (the\n"
    "GSI) carry MADs: the common header and the CM attributes (REQ, REP, RTU, REJ, MRA, DREQ, DREP,\n"
    "SIDR_REQ, SIDR_REP, ClassPortInfo) are decoded field by field, with the RDMA CM header.\n"
    "Ends with a summary: frames by opcode and by error. Frames an injection rule touched\n"
    "(FILE.pcap.notes beside the capture, docs/inject.md) carry an \"injected: ...\" line, and\n"
    "received frames the capture stamped late (its poll came late) a \"capture: ...\" line.\n"
    "\n"
    "options:\n"
    "  --brief             one line per frame, like tshark's summary\n"
    "  --json              one JSON object per frame, then one summary object\n"
    "  --no-notes          full format without the explanatory notes\n"
    "  --payload-bytes N   payload bytes shown in hex in the full format (default 32, max 65535)\n"
    "  --strict            exit 1 if any frame is not a valid RoCE v2 frame, or a MAD to QP1 is\n"
    "                      malformed (wrong Q_Key or length, unknown attribute, bad field, reserved\n"
    "                      bits set)\n"
    "  --lang L            the language of the notes and words: en (default) or zh (简体中文);\n"
    "                      field names, opcodes and numbers are the same in every language\n"
    "  -h, --help          this text\n"
    "\n"
    "exit status: 0 file read to its end, 1 with --strict: a frame failed to parse or a MAD check,\n"
    "2 bad arguments or a missing, unreadable or non-Ethernet file.\n";

// "injected: ..." on a frame: its own line (full), a suffix (brief), a member (json).
// json_member: the JSON member ("injected": the text; "stamp_late_ns": the number `late`).
void add_note(std::string& out, const std::string& note, pkt::DissectFormat f, const char* json_member = "injected",
              uint64_t late = 0) {
    const bool nl = !out.empty() && out.back() == '\n';
    if (nl) out.pop_back();
    if (f == pkt::DissectFormat::json) {
        const size_t close = out.rfind('}');
        if (close == std::string::npos) return;
        std::string esc = std::string(",\"") + json_member + "\":";
        if (late) {
            esc += std::to_string(late);
        } else {
            esc += '"';
            for (char c : note) {
                if (c == '"' || c == '\\') esc += '\\';
                esc += c;
            }
            esc += '"';
        }
        out.insert(close, esc);
    } else if (f == pkt::DissectFormat::brief) {
        out += "  [" + note + "]";
    } else {
        out += "\n  " + note;
    }
    if (nl) out += '\n';
}

}  // namespace

int cmd_dissect(int argc, char** argv) {
    pkt::DissectOptions opt;
    bool strict = false;
    std::string file;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            std::fputs(kHelp, stdout);
            return kExitOk;
        } else if (a == "--brief") {
            opt.format = pkt::DissectFormat::brief;
        } else if (a == "--json") {
            opt.format = pkt::DissectFormat::json;
        } else if (a == "--no-notes") {
            opt.notes = false;
        } else if (a == "--lang") {
            if (i + 1 >= argc) return usage_error("dissect", "--lang needs a language: " + pkt::lang_codes());
            const auto l = pkt::lang_from_code(argv[++i]);
            if (!l) return usage_error("dissect", std::string("--lang: unknown language '") + argv[i] + "': use one of " + pkt::lang_codes());
            opt.lang = *l;
        } else if (a == "--strict") {
            strict = true;
        } else if (a == "--payload-bytes") {
            if (i + 1 >= argc) return usage_error("dissect", "--payload-bytes needs a number");
            auto v = parse_uint(argv[++i], 0, 65535);
            if (!v) return usage_error("dissect", std::string("--payload-bytes: not a number in 0..65535: '") + argv[i] + "'");
            opt.payload_bytes = *v;
        } else if (!a.empty() && a[0] == '-') {
            return usage_error("dissect", "unknown option '" + a + "'");
        } else if (file.empty()) {
            file = a;
        } else {
            return usage_error("dissect", "one file only; also got '" + a + "'");
        }
    }
    if (file.empty()) return usage_error("dissect", "no pcap file given");

    port::PcapReader rd(file);
    if (!rd.ok()) {
        std::fprintf(stderr, "hcaemu dissect: %s\n", rd.error().c_str());
        return kExitUsage;
    }
    std::map<uint64_t, uint64_t> late;
    const std::map<uint64_t, std::string> notes = port::read_notes(file, &late);
    pkt::DissectSummary sum;
    port::PcapFrame fr;
    std::string out;
    uint64_t idx = 0;
    uint64_t t0 = 0;
    while (rd.next(fr)) {
        ++idx;
        if (idx == 1) t0 = fr.ts_ns;
        out.clear();
        const double t = double(fr.ts_ns - t0) * 1e-9;
        if (fr.orig_len > fr.data.size() && opt.format != pkt::DissectFormat::json)
            out += pkt::msg(pkt::Msg::dis_snap_cut, opt.lang,
                            {std::to_string(idx), std::to_string(fr.data.size()), std::to_string(fr.orig_len)}) + "\n";
        pkt::Packet p;
        const pkt::ParseError e = pkt::parse(fr.data, p);
        pkt::dissect(out, p, e, fr.data.size(), idx, t, opt);
        if (const auto it = notes.find(idx); it != notes.end()) add_note(out, it->second, opt.format);
        if (const auto it = late.find(idx); it != late.end())
            add_note(out, port::kLateNote + std::to_string(it->second) + " ns after it arrived (when polled)", opt.format,
                     "stamp_late_ns", it->second);
        sum.add(p, e);
        if (opt.format == pkt::DissectFormat::full) out += '\n';
        std::fwrite(out.data(), 1, out.size(), stdout);
    }
    if (!rd.error().empty()) {
        std::fprintf(stderr, "hcaemu dissect: %s: read error after %llu frames: %s\n", file.c_str(),
                     static_cast<unsigned long long>(idx), rd.error().c_str());
        return kExitUsage;
    }
    out.clear();
    sum.print(out, opt.format, opt.lang);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return strict && (sum.roce != sum.frames || sum.gmp_bad != 0) ? kExitFail : kExitOk;
}

}  // namespace hcaemu::tools

// hcaemu conform: the conformance monitor (dpdk_port/conform.hpp) over a capture.
#include <cstdio>
#include <string>
#include <vector>

#include "dpdk_port/conform.hpp"
#include "tools/hcaemu/cli.hpp"

namespace hcaemu::tools {

namespace {

constexpr const char* kHelp =
    "usage: hcaemu conform [OPTIONS] FILE.pcap\n"
    "\n"
    "Checks every RoCE v2 packet of a capture against the rules its sender must follow (IBTA\n"
    "vol. 1 and Annex A17), per QP and across packets: PSN order and windows, MSN, AETH\n"
    "syndromes, responses to requests never sent, READ response opcodes and lengths, atomic\n"
    "responses, where and when retransmissions restart (NAK, RNR NAK, timeout), retry counts,\n"
    "ICRC, PadCnt, lengths against the path MTU, TVer, P_Key, reserved bits, the UDP source\n"
    "port per QP, CNP pacing. Connections are learnt from the capture, both directions: it may\n"
    "be a capture of two other devices. Each violation: the frame, addresses, QP, PSN, the\n"
    "message, the rule's id and its place in the spec (docs/conform.md lists the rules).\n"
    "Frames the capture's injection notes (FILE.pcap.notes) say were not sent are skipped.\n"
    "\n"
    "options:\n"
    "  --json              one JSON object per violation, then one summary object\n"
    "  --lang L            the language of the messages: en (default) or zh (简体中文)\n"
    "  --retry-cnt N       the requesters' retry_cnt (0..7, default 7)\n"
    "  --cnp-interval-us N the minimum interval between CNPs to one QP (default 50)\n"
    "  --ignore RULE       do not report RULE (repeatable), e.g. a documented deviation\n"
    "  -h, --help          this text\n"
    "\n"
    "exit status: 0 no violation, 1 violations found, 2 bad arguments or a missing, unreadable\n"
    "or non-Ethernet file.\n";

}  // namespace

int cmd_conform(int argc, char** argv) {
    port::ConformConfig cfg;
    pkt::Lang lang = pkt::Lang::en;
    bool json = false;
    std::string file;
    std::array<bool, port::kConfRuleCount> ignored{};
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            std::fputs(kHelp, stdout);
            return kExitOk;
        } else if (a == "--json") {
            json = true;
        } else if (a == "--lang") {
            if (i + 1 >= argc) return usage_error("conform", "--lang needs a language: " + pkt::lang_codes());
            const auto l = pkt::lang_from_code(argv[++i]);
            if (!l) return usage_error("conform", std::string("--lang: unknown language '") + argv[i] + "': use one of " + pkt::lang_codes());
            lang = *l;
        } else if (a == "--retry-cnt") {
            if (i + 1 >= argc) return usage_error("conform", "--retry-cnt needs a number");
            const auto v = parse_uint(argv[++i], 0, 7);
            if (!v) return usage_error("conform", std::string("--retry-cnt: not a number in 0..7: '") + argv[i] + "'");
            cfg.retry_cnt = uint8_t(*v);
        } else if (a == "--cnp-interval-us") {
            if (i + 1 >= argc) return usage_error("conform", "--cnp-interval-us needs a number");
            const auto v = parse_uint(argv[++i], 0, 1'000'000);
            if (!v) return usage_error("conform", std::string("--cnp-interval-us: not a number in 0..1000000: '") + argv[i] + "'");
            cfg.cnp_interval_ns = *v * 1000;
        } else if (a == "--ignore") {
            if (i + 1 >= argc) return usage_error("conform", "--ignore needs a rule id");
            port::ConfRule r;
            if (!port::rule_from_id(argv[++i], r))
                return usage_error("conform", std::string("--ignore: no rule '") + argv[i] + "' (docs/conform.md)");
            ignored[size_t(r)] = true;
        } else if (!a.empty() && a[0] == '-') {
            return usage_error("conform", "unknown option '" + a + "'");
        } else if (file.empty()) {
            file = a;
        } else {
            return usage_error("conform", "one file only; also got '" + a + "'");
        }
    }
    if (file.empty()) return usage_error("conform", "no pcap file given");
    port::ConformMonitor mon(cfg);
    std::vector<port::Violation> vs;
    std::string err;
    if (!port::conform_pcap(file, mon, vs, err)) {
        std::fprintf(stderr, "hcaemu conform: %s\n", err.c_str());
        return kExitUsage;
    }
    std::array<uint64_t, port::kConfRuleCount> counts{};
    uint64_t total = 0;
    std::string out;
    for (const port::Violation& v : vs) {
        if (ignored[size_t(v.rule)]) continue;
        ++counts[size_t(v.rule)];
        ++total;
        out = json ? port::to_json(v, lang) : port::describe(v, lang);
        out += '\n';
        std::fwrite(out.data(), 1, out.size(), stdout);
    }
    const port::ConformStats st = mon.stats();
    if (json) {
        out = "{\"summary\":{\"frames\":" + std::to_string(st.frames) + ",\"roce\":" + std::to_string(st.roce) +
              ",\"flows\":" + std::to_string(st.flows) + ",\"table_full\":" + std::to_string(st.table_full) +
              ",\"violations\":" + std::to_string(total) + ",\"rules\":{";
        bool first = true;
        for (size_t i = 0; i < port::kConfRuleCount; ++i) {
            if (!counts[i]) continue;
            out += std::string(first ? "" : ",") + "\"" + port::kConfRules[i].id + "\":" + std::to_string(counts[i]);
            first = false;
        }
        out += "}}}\n";
    } else {
        out = pkt::msg(pkt::Msg::conf_summary, lang,
                       {std::to_string(st.frames), std::to_string(st.roce), std::to_string(st.flows), std::to_string(total)}) +
              "\n";
        for (size_t i = 0; i < port::kConfRuleCount; ++i) {
            if (!counts[i]) continue;
            const port::ConfRuleInfo& r = port::kConfRules[i];
            out += pkt::msg(pkt::Msg::conf_rule_count, lang,
                            {std::to_string(counts[i]), r.id, r.cite,
                             pkt::text(r.sev == port::Severity::error ? pkt::Msg::conf_sev_error : pkt::Msg::conf_sev_warning, lang)}) +
                   "\n";
        }
        if (st.table_full)
            out += pkt::msg(pkt::Msg::conf_table_full, lang, {std::to_string(st.table_full)}) + "\n";
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    return total ? kExitFail : kExitOk;
}

}  // namespace hcaemu::tools

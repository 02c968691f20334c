// hcaemu demo: two hcaemu HCAs, A and B, on the embedded link (DPDK's net_ring pair, in this
// process) perform SEND, RDMA WRITE, RDMA READ, CmpSwap and FetchAdd one after the other. Every
// step is told in plain words from the engines' trace events (post, WQE fetched, DMA, packets
// with their PSNs, ACK, CQE), the data is verified, and every frame goes to a pcap file.
// `--samples` writes the older teaching capture instead: one frame of every opcode, dissected.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dpdk_port/clock.hpp"
#include "dpdk_port/dpdk.hpp"
#include "dpdk_port/pcap_file.hpp"
#include "packet/dissect.hpp"
#include "packet/parse.hpp"
#include "tools/hcaemu/cli.hpp"
#include "tools/hcaemu/samples.hpp"
#include "tools/hcaemu/sim_pair.hpp"
#include "tools/hcaemu/stop.hpp"
#include "tools/ladder/ladder.hpp"
#include "transport/hca.hpp"

namespace hcaemu::tools {

namespace {

constexpr const char* kHelp =
    "usage: hcaemu demo [--pcap FILE] [--ladder OUT] [--size N] [--quiet] [--lang L]\n"
    "       hcaemu demo --samples [--pcap FILE] [--ladder OUT] [--brief | --json | --quiet] [--lang L]\n"
    "\n"
    "Two hcaemu HCAs, A (198.18.0.1) and B (198.18.0.2), joined by DPDK's net_ring pair in this\n"
    "process (no NIC needed), each with one RC QP. A performs, one after the other, a SEND, an\n"
    "RDMA WRITE, an RDMA READ, an atomic Compare & Swap and an atomic Fetch & Add on B. Every step\n"
    "is told as it happens: the work request posted, the WQE fetched, each DMA read and write,\n"
    "each packet with its PSN, the ACK, the CQE. Then the data (and the atomics' returned values)\n"
    "are compared byte for byte; exit 1 on any difference. Every frame is written to a pcap file:\n"
    "read it with `hcaemu dissect` or Wireshark. A's first PSN is 0x000100, the path MTU 1024.\n"
    "The run is the same every time: fixed PSNs, MR addresses (A's MR is known as 0x10000000, B's as\n"
    "0x20000000) and data, and the frames are stamped 1 us apart from 2026-01-01 00:00:00 UTC\n"
    "(the link's real timing says nothing about an HCA), so the story and the capture are too.\n"
    "\n"
    "options:\n"
    "  --pcap FILE   where to write the capture (default: hcaemu-demo.pcap)\n"
    "  --ladder OUT  also draw the capture as a ladder diagram, OUT.svg or OUT.html (see\n"
    "                `hcaemu ladder`; the embedded link drops no frame, so no arrow ends in a cross)\n"
    "  --size N      bytes of the SEND, WRITE and READ, 0 to 1048576 (default: a 64-byte SEND,\n"
    "                3000-byte WRITE and READ, three packets each)\n"
    "  --quiet       no step-by-step story: the checks and the summary only\n"
    "  --lang L      the language of the story (and with --samples, of the captions and notes):\n"
    "                en (default) or zh (简体中文)\n"
    "  --samples     instead: one made-up frame of every opcode hcaemu knows (RC, UC, UD, CNP;\n"
    "                IPv4, IPv6, 802.1Q), written to the pcap file, read back and dissected\n"
    "  --brief       (--samples) one line per frame\n"
    "  --json        (--samples) one JSON object per frame\n"
    "  -h, --help    this text\n";

constexpr uint32_t kMaxSize = 1u << 20;
constexpr uint32_t kFirstPsn[2] = {0x100, 0x200};  // A's and B's first send PSNs: fixed, so the story is too
constexpr uint64_t kMrIova[2] = {0x10000000, 0x20000000};  // the addresses A's and B's MRs are known by: fixed too
constexpr uint64_t kFirstStamp = 1'767'225'600'000'000'000ull;  // 2026-01-01 00:00:00 UTC, in ns
using pkt::Lang;
using pkt::Msg;

// ---- --samples: the older capture of one frame per opcode

int run_samples(const std::string& file, const pkt::DissectOptions& opt, bool quiet) {
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
        std::printf("%s\n", pkt::msg(Msg::sample_wrote, opt.lang, {std::to_string(frames.size()), file}).c_str());
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
            out += "# " + caption(frames[idx], opt.lang) + "\n";
        ++idx;
        pkt::Packet p;
        const pkt::ParseError e = pkt::parse(fr.data, p);
        pkt::dissect(out, p, e, fr.data.size(), idx, double(fr.ts_ns - t0) * 1e-9, opt);
        sum.add(p, e);
        if (opt.format == pkt::DissectFormat::full) out += '\n';
        std::fwrite(out.data(), 1, out.size(), stdout);
    }
    out.clear();
    sum.print(out, opt.format, opt.lang);
    std::fwrite(out.data(), 1, out.size(), stdout);
    if (opt.format != pkt::DissectFormat::json)
        std::printf("\n%s\n", pkt::msg(Msg::sample_read_back, opt.lang,
                                       {std::to_string(frames.size()), file, std::to_string(sum.frames),
                                        std::to_string(sum.roce)})
                                   .c_str());
    return sum.frames == frames.size() && sum.roce == frames.size() ? kExitOk : kExitFail;
}

// ---- the run on the embedded link

// Tells the trace events of both HCAs as sentences and writes every frame sent to the pcap.
struct Narrator {
    port::PcapWriter* pcap = nullptr;
    bool quiet = false;
    Lang lang = Lang::en;
    uint64_t frames = 0;
    uint64_t bad_frames = 0;   // frames that did not parse (none expected on this link)

    void say(const std::string& s) {
        if (!quiet) std::printf("%s\n", s.c_str());
    }
};

struct SideCtx {
    Narrator* n;
    int side;
};

const char* side_name(int s) { return s ? "B" : "A"; }

std::string hex(uint64_t v) {
    char b[24];
    std::snprintf(b, sizeof b, "0x%" PRIx64, v);
    return b;
}

std::string psn_str(uint32_t psn) {
    char b[16];
    std::snprintf(b, sizeof b, "0x%06x", psn);
    return b;
}

const char* aeth_name(pkt::AethType t) {
    switch (t) {
    case pkt::AethType::ack: return "ACK";
    case pkt::AethType::rnr_nak: return "RNR NAK";
    case pkt::AethType::nak: return "NAK";
    default: return "reserved";
    }
}

// One line for a frame on the wire: who sends it, the opcode, the PSN and the fields that matter.
std::string frame_line(int side, const uint8_t* f, uint32_t len, bool& parsed, Lang lg) {
    std::string s = std::string(side_name(side)) + " -> " + side_name(1 - side) + ": ";
    pkt::Packet p;
    const pkt::ParseError e = pkt::parse({f, len}, p);
    parsed = e == pkt::ParseError::ok;
    if (!parsed) return s + pkt::msg(Msg::demo_frame_unparsed, lg, {pkt::name(e)});
    const pkt::OpcodeInfo& oi = *p.op;
    s += oi.name;
    s += "  PSN " + psn_str(p.h.bth.psn);
    s += "  DestQP " + psn_str(p.h.bth.dest_qp);
    if (p.h.bth.ack_req) s += "  AckReq";
    if (oi.has(pkt::Ext::reth))
        s += pkt::msg(Msg::demo_frame_reth, lg, {hex(p.h.reth.va), hex(p.h.reth.rkey), std::to_string(p.h.reth.dma_len)});
    if (oi.has(pkt::Ext::atomic_eth)) {
        s += "  AtomicETH VA " + hex(p.h.atomic.va) + " R_Key " + hex(p.h.atomic.rkey);
        if (oi.kind == pkt::Kind::cmp_swap)
            s += pkt::msg(Msg::demo_frame_cmp_swap, lg, {hex(p.h.atomic.compare), hex(p.h.atomic.swap_add)});
        else
            s += pkt::msg(Msg::demo_frame_add, lg, {hex(p.h.atomic.swap_add)});
    }
    if (oi.has(pkt::Ext::aeth)) {
        s += "  AETH ";
        s += aeth_name(p.h.aeth.type());
        s += " MSN " + std::to_string(p.h.aeth.msn);
    }
    if (oi.has(pkt::Ext::atomic_ack_eth)) s += pkt::msg(Msg::demo_frame_orig, lg, {hex(p.h.atomic_ack.orig)});
    if (oi.payload) s += pkt::msg(Msg::demo_frame_payload, lg, {std::to_string(p.payload_len)});
    return s;
}

void on_event(void* ctx, const transport::TraceEvent& ev) {
    auto* sc = static_cast<SideCtx*>(ctx);
    Narrator& n = *sc->n;
    const std::string me = side_name(sc->side);
    const char* key_kind = ev.remote ? "R_Key" : "L_Key";
    const Lang lg = n.lang;
    using transport::TraceKind;
    switch (ev.kind) {
    case TraceKind::tx: {
        n.pcap->write({ev.frame, ev.len}, kFirstStamp + n.frames * 1000);
        ++n.frames;
        bool parsed = false;
        n.say(frame_line(sc->side, ev.frame, ev.len, parsed, lg));
        if (!parsed) ++n.bad_frames;
        return;
    }
    case TraceKind::rx: return;  // the sender's line shows the frame
    case TraceKind::rx_error:
        n.say(pkt::msg(Msg::demo_rx_dropped, lg, {me, pkt::name(ev.error)}));
        return;
    case TraceKind::wqe_fetched: {
        const SendWqe& w = *ev.wqe;
        const std::string qpn = psn_str(ev.qpn), wr_id = std::to_string(w.wr_id), len = std::to_string(w.length);
        if (w.opcode == WrOpcode::rdma_read)
            n.say(pkt::msg(Msg::demo_wqe_fetched_read, lg,
                           {me, qpn, wr_id, name(w.opcode), len, psn_str(ev.psn), std::to_string(ev.count),
                            psn_str((ev.psn + ev.count - 1) & 0xFFFFFF)}));
        else
            n.say(pkt::msg(Msg::demo_wqe_fetched, lg,
                           {me, qpn, wr_id, name(w.opcode), len, std::to_string(ev.count), psn_str(ev.psn)}));
        return;
    }
    case TraceKind::recv_wqe_taken:
        n.say(pkt::msg(Msg::demo_recv_wqe_taken, lg, {me, std::to_string(ev.wr_id), psn_str(ev.qpn), psn_str(ev.psn)}));
        return;
    case TraceKind::dma_read:
        n.say(pkt::msg(Msg::demo_dma_read, lg,
                       {me, std::to_string(ev.bytes), hex(ev.addr), key_kind, hex(ev.key), psn_str(ev.psn)}));
        return;
    case TraceKind::dma_write:
        if (ev.count == 1)
            n.say(pkt::msg(Msg::demo_dma_write_atomic, lg, {me, hex(ev.addr), key_kind, hex(ev.key), hex(ev.old_value)}));
        else
            n.say(pkt::msg(Msg::demo_dma_write, lg,
                           {me, std::to_string(ev.bytes), hex(ev.addr), key_kind, hex(ev.key), psn_str(ev.psn)}));
        return;
    case TraceKind::atomic_done:
        n.say(pkt::msg(Msg::demo_atomic_done, lg,
                       {me, hex(ev.addr), key_kind, hex(ev.key), hex(ev.old_value), hex(ev.new_value)}));
        return;
    case TraceKind::ack_received:
        n.say(pkt::msg(Msg::demo_ack_received, lg, {me, psn_str(ev.psn), std::to_string(ev.count)}));
        return;
    case TraceKind::cqe:
        if (ev.wc)
            n.say(pkt::msg(Msg::demo_cqe, lg,
                           {me, std::to_string(ev.wc->wr_id), name(ev.wc->opcode),
                            ev.wc->status == WcStatus::success ? text(Msg::demo_success, lg) : name(ev.wc->status),
                            std::to_string(ev.wc->byte_len)}));
        return;
    default:
        n.say(me + ": " + transport::kTraceKindName[size_t(ev.kind)] + " QP " + psn_str(ev.qpn) + " PSN " + psn_str(ev.psn));
        return;
    }
}

struct Op {
    WrOpcode opcode;
    uint32_t len;
    const char* title;
    Msg what;
};

class Demo {
public:
    Demo(tools::SimPair::Side* s, bool quiet, uint32_t region, Lang lang)
        : s_(s), quiet_(quiet), region_(region), lang_(lang) {}

    // Polls both HCAs until A has `want_a` CQEs and B `want_b`, or 10 s pass, or SIGINT/SIGTERM
    // came. False on timeout or stop.
    bool run(size_t want_a, size_t want_b) {
        wa_.clear();
        wb_.clear();
        const auto t0 = std::chrono::steady_clock::now();
        Wc wc[16];
        for (uint64_t turn = 0; turn < 200'000'000; ++turn) {
            s_[0].hca->poll();
            s_[1].hca->poll();
            int k;
            while ((k = s_[0].cq.poll(wc)) > 0) wa_.insert(wa_.end(), wc, wc + k);
            while ((k = s_[1].cq.poll(wc)) > 0) wb_.insert(wb_.end(), wc, wc + k);
            if (wa_.size() >= want_a && wb_.size() >= want_b) return wa_.size() == want_a && wb_.size() == want_b;
            if (stop_requested()) break;
            if ((turn & 1023) == 0 && std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) break;
        }
        return false;
    }

    uint64_t a(uint32_t r) const { return s_[0].mr.addr() + uint64_t(r) * region_; }
    uint64_t b(uint32_t r) const { return s_[1].mr.addr() + uint64_t(r) * region_; }
    uint8_t* amem(uint32_t r) { return s_[0].mem.data() + size_t(r) * region_; }
    uint8_t* bmem(uint32_t r) { return s_[1].mem.data() + size_t(r) * region_; }

    bool post(const Op& op, uint64_t wr_id, uint64_t laddr, uint64_t raddr, uint64_t cmp_add = 0, uint64_t swap = 0) {
        Sge sge{laddr, op.len, s_[0].mr.lkey()};
        SendWr w;
        w.wr_id = wr_id;
        w.sg_list = &sge;
        w.num_sge = 1;
        w.opcode = op.opcode;
        w.send_flags = send_flag::signaled;
        w.rdma = {raddr, s_[1].mr.rkey()};
        w.atomic = {raddr, cmp_add, swap, s_[1].mr.rkey()};
        const bool from = op.opcode == WrOpcode::send || op.opcode == WrOpcode::rdma_write;
        std::string s = pkt::msg(from ? Msg::demo_post_from : Msg::demo_post_into, lang_,
                                 {"A", name(op.opcode), std::to_string(wr_id), std::to_string(op.len), hex(laddr),
                                  hex(s_[0].mr.lkey())});
        if (op.opcode != WrOpcode::send) s += pkt::msg(Msg::demo_post_remote, lang_, {hex(raddr), hex(s_[1].mr.rkey())});
        if (op.opcode == WrOpcode::atomic_cmp_and_swp) s += pkt::msg(Msg::demo_post_cmp_swap, lang_, {hex(cmp_add), hex(swap)});
        if (op.opcode == WrOpcode::atomic_fetch_and_add) s += pkt::msg(Msg::demo_post_add, lang_, {hex(cmp_add)});
        say(s);
        const SendWr* bad = nullptr;
        const Status st = s_[0].qp.post_send(&w, &bad);
        if (st != Status::ok) return fail(pkt::msg(Msg::demo_refused, lang_, {"post_send", name(st)}));
        return true;
    }

    bool post_recv(uint64_t wr_id, uint64_t addr, uint32_t len) {
        Sge sge{addr, len, s_[1].mr.lkey()};
        RecvWr r;
        r.wr_id = wr_id;
        r.sg_list = &sge;
        r.num_sge = 1;
        say(pkt::msg(Msg::demo_post_recv, lang_,
                     {"B", std::to_string(wr_id), std::to_string(len), hex(addr), hex(s_[1].mr.lkey())}));
        const RecvWr* bad = nullptr;
        const Status st = s_[1].qp.post_recv(&r, &bad);
        if (st != Status::ok) return fail(pkt::msg(Msg::demo_refused, lang_, {"post_recv", name(st)}));
        return true;
    }

    // The CQE A (or B) got must be this one, successful.
    bool check_cqe(int side, size_t i, uint64_t wr_id, WcOpcode op, uint32_t len) {
        const std::vector<Wc>& v = side ? wb_ : wa_;
        if (i >= v.size()) return fail(pkt::msg(Msg::demo_cqe_missing, lang_, {side_name(side)}));
        const Wc& w = v[i];
        if (w.wr_id != wr_id || w.opcode != op || w.status != WcStatus::success || w.byte_len != len)
            return fail(pkt::msg(Msg::demo_cqe_wrong, lang_,
                                 {side_name(side), std::to_string(w.wr_id), name(w.opcode), name(w.status),
                                  std::to_string(w.byte_len), std::to_string(wr_id), name(op), std::to_string(len)}));
        return true;
    }

    bool check_bytes(Msg what_m, const uint8_t* got, const uint8_t* want, uint32_t len) {
        const char* what = text(what_m, lang_);
        for (uint32_t i = 0; i < len; ++i)
            if (got[i] != want[i]) {
                char g[8], w[8];
                std::snprintf(g, sizeof g, "0x%02x", got[i]);
                std::snprintf(w, sizeof w, "0x%02x", want[i]);
                return fail(pkt::msg(Msg::demo_byte_differs, lang_, {what, std::to_string(i), g, w}));
            }
        std::printf("%s\n", pkt::msg(Msg::demo_bytes_ok, lang_, {what, std::to_string(len)}).c_str());
        return true;
    }

    bool check_word(Msg what_m, const uint8_t* at, uint64_t want) {
        const char* what = text(what_m, lang_);
        uint64_t got;
        std::memcpy(&got, at, 8);
        if (got != want) return fail(pkt::msg(Msg::demo_word_differs, lang_, {what, hex(got), hex(want)}));
        std::printf("%s\n", pkt::msg(Msg::demo_word_ok, lang_, {what, hex(want)}).c_str());
        return true;
    }

    void say(const std::string& s) const {
        if (!quiet_) std::printf("%s\n", s.c_str());
    }
    bool fail(const std::string& s) {
        std::printf("%s\n", pkt::msg(Msg::demo_mismatch, lang_, {s}).c_str());
        ++failures;
        return false;
    }

    int failures = 0;
    Lang lang() const { return lang_; }

private:
    tools::SimPair::Side* s_;
    bool quiet_;
    uint32_t region_;
    Lang lang_;
    std::vector<Wc> wa_, wb_;
};

void fill(uint8_t* p, uint32_t len, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (uint32_t i = 0; i < len; ++i) {
        x = x * 1103515245u + 12345u;
        p[i] = uint8_t(x >> 16);
    }
}

int run_link(const std::string& file, int64_t size, bool quiet, Lang lg) {
    // Each operation may wait up to 10 s for its completions (a lost frame, a stuck engine): a
    // SIGINT/SIGTERM ends that wait, the capture is flushed and the port closed on the way out.
    install_stop_handlers();
    port::PcapWriter pcap(file);
    if (!pcap.ok()) {
        std::fprintf(stderr, "hcaemu demo: %s\n", pcap.error().c_str());
        return kExitUsage;
    }
    std::string err;
    std::vector<std::string> eal = port::default_eal_args();
    eal.push_back("--no-telemetry");  // no socket, no message: this process only demonstrates
    if (!port::eal_start(eal, err)) {
        std::fprintf(stderr, "hcaemu demo: DPDK: %s\n", err.c_str());
        return kExitFail;
    }
    uint16_t pa = 0, pb = 0;
    if (!port::make_ring_pair("demo", pa, pb, err)) {
        std::fprintf(stderr, "hcaemu demo: net_ring pair: %s\n", err.c_str());
        return kExitFail;
    }
    std::unique_ptr<port::DpdkPort> ports[2];
    for (int i = 0; i < 2; ++i) {
        port::DpdkPortConfig pc;
        pc.extra_mbufs = 1024;
        pc.mac = pkt::Mac{0x02, 0, 0, 0x18, 0, uint8_t(i + 1)};
        ports[i] = port::DpdkPort::open(i ? pb : pa, pc, err);
        if (!ports[i]) {
            std::fprintf(stderr, "hcaemu demo: DPDK port: %s\n", err.c_str());
            return kExitFail;
        }
    }

    const uint32_t send_len = size >= 0 ? uint32_t(size) : 64;
    const uint32_t rw_len = size >= 0 ? uint32_t(size) : 3000;
    const uint32_t region = (std::max({send_len, rw_len, 64u}) + 4095u) & ~4095u;
    SimConfig cfg;
    cfg.mem_bytes = size_t(region) * 4;  // regions: 0 SEND, 1 WRITE, 2 READ, 3 atomics
    cfg.sq_depth = 16;
    cfg.rq_depth = 16;
    cfg.mr_iova[0] = kMrIova[0];
    cfg.mr_iova[1] = kMrIova[1];
    cfg.timeout = 18;  // 4.096 us * 2^18 = 1.07 s: on an idle link no retransmission interrupts the story
    port::SteadyClock clock;
    SimPair::Side s[2];
    for (int i = 0; i < 2; ++i) SimPair::build_side(s[i], *ports[i], clock, cfg, i, ports[1 - i]->mac());
    for (int i = 0; i < 2; ++i)
        if (!connect_qp(s[i].qp, cfg, s[1 - i].qp.qpn(), s[1 - i].gid, kFirstPsn[i], kFirstPsn[1 - i])) {
            std::fprintf(stderr, "hcaemu demo: could not bring QP %u to RTS\n", s[i].qp.qpn());
            return kExitFail;
        }
    Narrator nar;
    nar.pcap = &pcap;
    nar.quiet = quiet;
    nar.lang = lg;
    SideCtx ctx[2] = {{&nar, 0}, {&nar, 1}};
    for (int i = 0; i < 2; ++i) s[i].hca->set_trace(on_event, &ctx[i]);

    Demo d(s, quiet, region, lg);
    if (!quiet) {
        std::printf("%s\n", text(Msg::demo_link, lg));
        for (int i = 0; i < 2; ++i) {
            const pkt::Mac m = ports[i]->mac();
            char mac[18];
            std::snprintf(mac, sizeof mac, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
            std::printf("%s\n", pkt::msg(Msg::demo_side, lg,
                                         {side_name(i), std::to_string(i + 1), mac, psn_str(s[i].qp.qpn()),
                                          psn_str(kFirstPsn[i]), std::to_string(s[i].mem.size()), hex(s[i].mr.addr()),
                                          hex(s[i].mr.lkey()), hex(s[i].mr.rkey())})
                                     .c_str());
        }
        std::printf("%s\n", text(Msg::demo_mtu, lg));
    }

    // The data: A's SEND and WRITE sources, B's READ source, B's atomic words.
    fill(d.amem(0), send_len, 1);
    fill(d.amem(1), rw_len, 2);
    fill(d.bmem(2), rw_len, 3);
    const uint64_t cas_before = 0x1111111111111111ull, cas_swap = 0x2222222222222222ull;
    const uint64_t fa_before = 41, fa_add = 1;
    std::memcpy(d.bmem(3), &cas_before, 8);
    std::memcpy(d.bmem(3) + 8, &fa_before, 8);

    const Op ops[5] = {
        {WrOpcode::send, send_len, "SEND", Msg::demo_what_send},
        {WrOpcode::rdma_write, rw_len, "RDMA WRITE", Msg::demo_what_write},
        {WrOpcode::rdma_read, rw_len, "RDMA READ", Msg::demo_what_read},
        {WrOpcode::atomic_cmp_and_swp, 8, "ATOMIC CMP_SWP", Msg::demo_what_cmp_swap},
        {WrOpcode::atomic_fetch_and_add, 8, "ATOMIC FETCH_ADD", Msg::demo_what_fetch_add},
    };
    int done = 0;
    for (int k = 0; k < 5; ++k) {
        const Op& op = ops[k];
        const uint64_t id = uint64_t(k + 1);
        if (!quiet)
            std::printf("\n%s\n", pkt::msg(Msg::demo_step, lg,
                                           {std::to_string(k + 1), op.title, std::to_string(op.len), text(op.what, lg)})
                                       .c_str());
        bool ok = true;
        switch (op.opcode) {
        case WrOpcode::send:
            ok = d.post_recv(101, d.b(0), std::max(op.len, 64u)) && d.post(op, id, d.a(0), 0);
            break;
        case WrOpcode::rdma_write: ok = d.post(op, id, d.a(1), d.b(1)); break;
        case WrOpcode::rdma_read: ok = d.post(op, id, d.a(2), d.b(2)); break;
        case WrOpcode::atomic_cmp_and_swp: ok = d.post(op, id, d.a(3), d.b(3), cas_before, cas_swap); break;
        default: ok = d.post(op, id, d.a(3) + 8, d.b(3) + 8, fa_add); break;
        }
        if (!ok) break;
        const size_t want_b = op.opcode == WrOpcode::send ? 1 : 0;
        if (!d.run(1, want_b)) {
            if (stop_requested()) break;
            d.fail(pkt::msg(Msg::demo_timeout, lg, {op.title}));
            break;
        }
        const WcOpcode wop = wc_opcode_for(op.opcode);
        ok = d.check_cqe(0, 0, id, wop, op.len);
        switch (op.opcode) {
        case WrOpcode::send:
            ok = d.check_cqe(1, 0, 101, WcOpcode::recv, op.len) && ok;
            ok = d.check_bytes(Msg::demo_check_send, d.bmem(0), d.amem(0), op.len) && ok;
            break;
        case WrOpcode::rdma_write:
            ok = d.check_bytes(Msg::demo_check_write, d.bmem(1), d.amem(1), op.len) && ok;
            break;
        case WrOpcode::rdma_read:
            ok = d.check_bytes(Msg::demo_check_read, d.amem(2), d.bmem(2), op.len) && ok;
            break;
        case WrOpcode::atomic_cmp_and_swp:
            ok = d.check_word(Msg::demo_check_cmp_old, d.amem(3), cas_before) && ok;
            ok = d.check_word(Msg::demo_check_cmp_now, d.bmem(3), cas_swap) && ok;
            break;
        default:
            ok = d.check_word(Msg::demo_check_add_old, d.amem(3) + 8, fa_before) && ok;
            ok = d.check_word(Msg::demo_check_add_now, d.bmem(3) + 8, fa_before + fa_add) && ok;
            break;
        }
        if (ok) ++done;
    }
    for (int i = 0; i < 2; ++i) s[i].hca->set_trace(nullptr, nullptr);
    pcap.flush();
    if (stop_requested()) return report_stop("demo");
    if (nar.bad_frames) d.fail(pkt::msg(Msg::demo_bad_frames, lg, {std::to_string(nar.bad_frames)}));
    std::printf("\n%s\n", pkt::msg(Msg::demo_summary, lg, {std::to_string(done), std::to_string(nar.frames), file}).c_str());
    if (!quiet && d.failures == 0) std::printf("%s\n", pkt::msg(Msg::demo_read_hint, lg, {file}).c_str());
    return d.failures == 0 && done == 5 ? kExitOk : kExitFail;
}

}  // namespace

int cmd_demo(int argc, char** argv) {
    std::string file = "hcaemu-demo.pcap";
    std::string ladder_out;
    pkt::DissectOptions opt;
    bool quiet = false, samples = false, format_given = false;
    int64_t size = -1;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            std::fputs(kHelp, stdout);
            return kExitOk;
        } else if (a == "--pcap") {
            if (i + 1 >= argc) return usage_error("demo", "--pcap needs a file name");
            file = argv[++i];
        } else if (a == "--ladder") {
            if (i + 1 >= argc) return usage_error("demo", "--ladder needs a file name");
            ladder_out = argv[++i];
            if (!ladder::output_ext_ok(ladder_out)) return usage_error("demo", "--ladder: the file must end in .svg, .html or .htm");
        } else if (a == "--size") {
            if (i + 1 >= argc) return usage_error("demo", "--size needs a number");
            const auto v = parse_uint(argv[++i], 0, kMaxSize);
            if (!v) return usage_error("demo", "--size takes a number of bytes from 0 to 1048576");
            size = int64_t(*v);
        } else if (a == "--samples") {
            samples = true;
        } else if (a == "--brief") {
            opt.format = pkt::DissectFormat::brief;
            format_given = true;
        } else if (a == "--json") {
            opt.format = pkt::DissectFormat::json;
            format_given = true;
        } else if (a == "--quiet") {
            quiet = true;
        } else if (a == "--lang") {
            if (i + 1 >= argc) return usage_error("demo", "--lang needs a language: " + pkt::lang_codes());
            const auto l = pkt::lang_from_code(argv[++i]);
            if (!l) return usage_error("demo", std::string("--lang: unknown language '") + argv[i] + "': use one of " + pkt::lang_codes());
            opt.lang = *l;
        } else {
            return usage_error("demo", "unknown argument '" + a + "'");
        }
    }
    if (samples && size >= 0) return usage_error("demo", "--size is for the run on the link, not --samples");
    if (!samples && format_given) return usage_error("demo", "--brief and --json go with --samples");
    const int rc = samples ? run_samples(file, opt, quiet) : run_link(file, size, quiet, opt.lang);
    if (ladder_out.empty() || rc == kExitUsage || stop_requested()) return rc;
    std::string err;
    ladder::Ladder model;
    if (ladder::write_ladder(file, {}, ladder_out, {}, err, &model) != ladder::WriteResult::ok) {
        std::fprintf(stderr, "hcaemu demo: ladder: %s\n", err.c_str());
        return kExitFail;
    }
    std::printf("%s\n", pkt::msg(Msg::demo_ladder, opt.lang, {file, ladder_out, std::to_string(model.arrows.size())}).c_str());
    return rc;
}

}  // namespace hcaemu::tools

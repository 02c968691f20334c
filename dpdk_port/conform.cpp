#include "dpdk_port/conform.hpp"

#include <arpa/inet.h>

#include <cstdio>
#include <cstring>

#include "dpdk_port/pcap_file.hpp"
#include "packet/parse.hpp"

namespace hcaemu::port {

using pkt::Msg;

// Citations: IBTA Vol. 1 (release 1.4 numbering) and its Annex A17 (RoCE v2).
const std::array<ConfRuleInfo, kConfRuleCount> kConfRules = {{
    {"icrc", "IBTA 7.8.1, A17 (ICRC)", Severity::error, Msg::conf_icrc},
    {"malformed", "IBTA 9.6 (packet header validation)", Severity::error, Msg::conf_malformed},
    {"bth.tver", "IBTA 9.2 (TVer: 0)", Severity::error, Msg::conf_tver},
    {"bth.reserved", "IBTA 9.2 (reserved fields sent as 0)", Severity::warning, Msg::conf_bth_reserved},
    {"bth.pkey", "IBTA 10.9.3 (P_Key)", Severity::error, Msg::conf_pkey},
    {"bth.padcnt", "IBTA 9.2 (PadCnt)", Severity::error, Msg::conf_padcnt},
    {"len.mtu", "IBTA 9.7.5.1 (packet length against the path MTU)", Severity::error, Msg::conf_mtu},
    {"udp.sport", "IBTA A17 (RoCE v2 UDP source port: one per QP)", Severity::warning, Msg::conf_udp_sport},
    {"psn.opcode_seq", "IBTA 9.7.5.1 (opcode sequence)", Severity::error, Msg::conf_opcode_seq},
    {"psn.window", "IBTA 9.7.1 (PSNs within 2^23 of the oldest unacknowledged)", Severity::error, Msg::conf_psn_window},
    {"resp.unsolicited", "IBTA 9.7.5.2 (a response for a PSN never sent)", Severity::error, Msg::conf_resp_unsolicited},
    {"resp.opcode", "IBTA 9.7.5.2 (response opcode against the request)", Severity::error, Msg::conf_resp_opcode},
    {"read.opcode", "IBTA 9.7.5.1, 9.4 (RDMA READ responses)", Severity::error, Msg::conf_read_opcode},
    {"read.length", "IBTA 9.4 (RDMA READ response length)", Severity::error, Msg::conf_read_length},
    {"atomic.resp", "IBTA 9.4 (atomic operations)", Severity::error, Msg::conf_atomic_resp},
    {"aeth.syndrome", "IBTA 9.3.5 (AETH syndrome)", Severity::error, Msg::conf_aeth_syndrome},
    {"aeth.msn", "IBTA 9.3.5 (MSN)", Severity::error, Msg::conf_aeth_msn},
    {"retx.psn", "IBTA 9.7.5.2 (retransmission from the NAK's PSN or the oldest unacknowledged)", Severity::error,
     Msg::conf_retx_timeout},
    {"retx.rnr_timer", "IBTA 9.7.5.2, table 45 (RNR NAK timer)", Severity::error, Msg::conf_rnr_timer},
    {"retx.count", "IBTA 9.7.5.2 (retry counter, retry_cnt)", Severity::error, Msg::conf_retry_count},
    {"cnp.pacing", "IBTA A17.9 (CNP); DCQCN NP minimum interval", Severity::warning, Msg::conf_cnp_pacing},
}};

namespace {

constexpr uint32_t kPsnMask = 0xFFFFFF;

// Signed distance a - b in the 24-bit PSN space (IBTA 9.7.1).
int32_t psn_diff(uint32_t a, uint32_t b) { return int32_t((a - b) << 8) >> 8; }

// IBTA table 45: the RNR NAK timer codes, in µs (code 0 is the longest).
constexpr uint64_t kRnrUs[32] = {655360, 10,    20,    30,    40,    60,    80,    120,   160,   240,  320,
                                 480,    640,   960,   1280,  1920,  2560,  3840,  5120,  7680,  10240, 15360,
                                 20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};

bool valid_mtu(uint32_t n) { return n == 256 || n == 512 || n == 1024 || n == 2048 || n == 4096; }

struct MsgRec {
    uint32_t psn = 0;
    uint32_t len = 0;     // READ: its DMA length
    uint32_t npkts = 0;   // 0: not known yet
    pkt::Kind kind = pkt::Kind::send;
    uint32_t re_psn = 0, re_len = 0;  // a READ re-issued from inside it (re_len 0: none)
};

// The message of `f` that PSN `psn` belongs to: the newest that starts at or before it, among
// those remembered and not older than the oldest unacknowledged. nullptr when unknown.
MsgRec* message_at(std::array<MsgRec, ConformMonitor::kMsgs>& msgs, uint32_t nmsgs, uint32_t psn) {
    const uint32_t n = nmsgs < ConformMonitor::kMsgs ? nmsgs : ConformMonitor::kMsgs;
    MsgRec* best = nullptr;
    int32_t best_d = INT32_MAX;
    for (uint32_t k = 0; k < n; ++k) {  // newest first: a re-issued READ wins a tie
        MsgRec& m = msgs[(nmsgs - 1 - k) % ConformMonitor::kMsgs];
        const int32_t d = psn_diff(psn, m.psn);
        if (d >= 0 && d < best_d) best_d = d, best = &m;
    }
    return best;
}

uint64_t hash_key(const pkt::Ip6& s, const pkt::Ip6& d, uint32_t qp) {
    uint64_t h = 1469598103934665603ull;
    for (uint8_t b : s) h = (h ^ b) * 1099511628211ull;
    for (uint8_t b : d) h = (h ^ b) * 1099511628211ull;
    return (h ^ qp) * 0x9E3779B97F4A7C15ull;
}

}  // namespace

struct ConformMonitor::Flow {
    bool used = false;
    pkt::Ip6 src{}, dst{};
    uint32_t qp = 0;
    // every packet
    uint16_t sport = 0, pkey = 0;
    bool hdr_seen = false;
    uint32_t pmtu = 0;  // learnt from a First or Middle packet
    // requests this flow carried
    bool req_seen = false;
    uint32_t first_psn = 0, max_psn = 0, prev_psn = 0;
    uint32_t end_psn = 0;  // the last PSN a response may carry: a READ's last response packet
    uint8_t prev_op = 0;
    bool acked_valid = false;
    uint32_t acked = 0;  // the latest PSN acknowledged, explicitly or by a READ response
    bool nak_pending = false, rnr_pending = false, in_retx = false;
    uint32_t nak_psn = 0, rnr_psn = 0;
    uint64_t rnr_ts = 0;
    uint8_t rnr_code = 0;
    uint32_t retry_psn = 0, retry_n = 0;
    std::array<MsgRec, kMsgs> msgs{};
    uint32_t nmsgs = 0;  // pushed so far; the newest is msgs[(nmsgs - 1) % kMsgs]
    // responses this flow carried: they answer the requests of flows_[peer]
    int32_t peer = -1;
    bool conv = false;  // binding failed, but a request flow the other way exists
    bool msn_valid = false;
    uint32_t msn = 0;
    // CNPs this flow carried
    bool cnp_seen = false;
    uint64_t cnp_ts = 0;
};

struct ConformMonitor::Ctx {
    pkt::Packet p;
    uint64_t ts = 0;
    uint64_t earliest = 0;  // it may have arrived as early as this (ts when the stamp is exact)
    uint64_t frame_no = 0;
    Flow* f = nullptr;
    Violation v(ConfRule r) const {
        Violation x;
        x.rule = r;
        x.msg = info(r).msg;
        x.frame = frame_no;
        x.ts_ns = ts;
        x.qp = p.h.bth.dest_qp;
        x.psn = p.h.bth.psn;
        x.opcode = p.h.bth.opcode;
        x.has_bth = true;
        if (p.h.ipv6) {
            x.src = p.h.ip6.src;
            x.dst = p.h.ip6.dst;
        } else {
            x.src = pkt::ipv4_mapped_gid(p.h.ip4.src);
            x.dst = pkt::ipv4_mapped_gid(p.h.ip4.dst);
        }
        return x;
    }
};

ConformMonitor::ConformMonitor(const ConformConfig& cfg) : cfg_(cfg), flows_(new Flow[kFlows]) {}
ConformMonitor::~ConformMonitor() = default;

void ConformMonitor::reset() {
    for (uint32_t i = 0; i < kFlows && nflows_; ++i)
        if (flows_[i].used) {
            flows_[i] = Flow{};
            --nflows_;
        }
    for (auto& c : counts_) c.store(0, std::memory_order_relaxed);
    frames_ = 0;
    roce_ = 0;
    table_full_ = 0;
    violations_ = 0;
}

ConformStats ConformMonitor::stats() const {
    ConformStats s;
    s.frames = frames_.load(std::memory_order_relaxed);
    s.roce = roce_.load(std::memory_order_relaxed);
    s.flows = nflows_;
    s.table_full = table_full_.load(std::memory_order_relaxed);
    s.violations = violations_.load(std::memory_order_relaxed);
    return s;
}

void ConformMonitor::report(Violation& v) {
    counts_[size_t(v.rule)].fetch_add(1, std::memory_order_relaxed);
    violations_.fetch_add(1, std::memory_order_relaxed);
    if (sink_) sink_(sink_ctx_, v);
}

ConformMonitor::Flow* ConformMonitor::find(const pkt::Ip6& src, const pkt::Ip6& dst, uint32_t qp, bool create) {
    uint32_t i = uint32_t(hash_key(src, dst, qp) >> 40) & (kFlows - 1);
    for (uint32_t n = 0; n < kFlows; ++n, i = (i + 1) & (kFlows - 1)) {
        Flow& f = flows_[i];
        if (!f.used) {
            // Keep a quarter free: probes stay short.
            if (!create || nflows_ >= kFlows - kFlows / 4) return nullptr;
            f.used = true;
            f.src = src;
            f.dst = dst;
            f.qp = qp;
            ++nflows_;
            return &f;
        }
        if (f.qp == qp && f.src == src && f.dst == dst) return &f;
    }
    return nullptr;
}

void ConformMonitor::frame(std::span<const uint8_t> data, uint64_t ts_ns, uint64_t frame_no, uint64_t late_ns) {
    frames_.fetch_add(1, std::memory_order_relaxed);
    Ctx c;
    c.ts = ts_ns;
    c.earliest = ts_ns - std::min(late_ns, ts_ns);
    c.frame_no = frame_no;
    pkt::ParseOptions po;
    po.verify_icrc = cfg_.verify_icrc;
    const pkt::ParseError e = pkt::parse(data, c.p, po);
    if (!pkt::decoded_udp(e) || c.p.h.udp.dport != pkt::kRoceV2Port) return;
    roce_.fetch_add(1, std::memory_order_relaxed);
    if (e != pkt::ParseError::ok) {
        Violation v = c.v(ConfRule::malformed);
        v.has_bth = pkt::decoded_bth(e);
        if (!v.has_bth) v.qp = v.psn = v.opcode = 0;
        v.what = pkt::name(e);
        if (e == pkt::ParseError::bad_icrc) {
            v.rule = ConfRule::icrc;
            v.msg = Msg::conf_icrc;
            v.a = c.p.icrc;
        } else if (e == pkt::ParseError::bad_tver) {
            v.rule = ConfRule::tver;
            v.msg = Msg::conf_tver;
            v.a = c.p.h.bth.tver;
        } else if (e == pkt::ParseError::bad_pad_count) {
            v.rule = ConfRule::padcnt;
            v.msg = Msg::conf_padcnt;
            v.a = c.p.h.bth.pad_cnt;
        }
        report(v);
        // A receiver drops it (IBTA 9.6); but it was sent: with a bad ICRC only (which may have
        // been damaged on the way) it still counts as the sender's packet.
        if (e != pkt::ParseError::bad_icrc) return;
    }
    const pkt::Ip6 src = c.p.h.ipv6 ? c.p.h.ip6.src : pkt::ipv4_mapped_gid(c.p.h.ip4.src);
    const pkt::Ip6 dst = c.p.h.ipv6 ? c.p.h.ip6.dst : pkt::ipv4_mapped_gid(c.p.h.ip4.dst);
    c.f = find(src, dst, c.p.h.bth.dest_qp, true);
    if (!c.f) table_full_.fetch_add(1, std::memory_order_relaxed);
    check_headers(c);
    if (!c.f) return;
    const pkt::OpcodeInfo& op = *c.p.op;
    if (op.transport == pkt::Transport::cnp)
        on_cnp(c);
    else if (op.transport == pkt::Transport::ud)
        return;
    else if (op.request)
        on_request(c);
    else if (op.transport == pkt::Transport::rc)
        on_response(c);
}

// Checks of one packet on its own, and of the fields that must stay the same on its flow.
void ConformMonitor::check_headers(Ctx& c) {
    const pkt::Bth& b = c.p.h.bth;
    const pkt::OpcodeInfo& op = *c.p.op;
    if (b.resv6 || b.resv7) {  // IBTA 9.2: byte 4 bits 5:0 (RoCE v2), byte 8 bits 6:0
        Violation v = c.v(ConfRule::bth_reserved);
        v.a = b.resv6;
        v.b = b.resv7;
        report(v);
    }
    if ((b.pkey & 0x7FFF) == 0) {  // IBTA 10.9.3: 0x0000 and 0x8000 are invalid keys
        Violation v = c.v(ConfRule::pkey);
        v.msg = Msg::conf_pkey_invalid;
        v.a = b.pkey;
        report(v);
    }
    const uint32_t pl = c.p.payload_len;
    if (op.payload && ((pl + b.pad_cnt) & 3)) {
        Violation v = c.v(ConfRule::padcnt);
        v.a = b.pad_cnt;
        v.b = pl;
        report(v);
    } else if (b.pad_cnt && (op.pos == pkt::Position::first || op.pos == pkt::Position::middle)) {
        Violation v = c.v(ConfRule::padcnt);  // IBTA 9.2: only a message's last packet is padded
        v.a = b.pad_cnt;
        v.b = pl;
        report(v);
    }
    if (pl > 4096) {
        Violation v = c.v(ConfRule::mtu);
        v.msg = Msg::conf_mtu_max;
        v.a = pl;
        report(v);
    } else if (c.f && op.payload && op.transport != pkt::Transport::ud) {
        Flow& f = *c.f;
        const bool full = op.pos == pkt::Position::first || op.pos == pkt::Position::middle;
        if (full && !f.pmtu) {
            if (valid_mtu(pl)) {
                f.pmtu = pl;
            } else {
                Violation v = c.v(ConfRule::mtu);
                v.msg = Msg::conf_mtu_invalid;
                v.a = pl;
                report(v);
            }
        } else if (f.pmtu && ((full && pl != f.pmtu) || pl > f.pmtu)) {
            Violation v = c.v(ConfRule::mtu);
            v.msg = full ? Msg::conf_mtu : Msg::conf_mtu_over;
            v.a = pl;
            v.b = f.pmtu;
            report(v);
        }
    }
    if (!c.f || op.transport == pkt::Transport::ud || op.transport == pkt::Transport::cnp) return;
    Flow& f = *c.f;
    if (!f.hdr_seen) {
        f.hdr_seen = true;
        f.sport = c.p.h.udp.sport;
        f.pkey = b.pkey;
        return;
    }
    if (c.p.h.udp.sport != f.sport) {
        Violation v = c.v(ConfRule::udp_sport);
        v.a = c.p.h.udp.sport;
        v.b = f.sport;
        report(v);
    }
    if (b.pkey != f.pkey) {
        Violation v = c.v(ConfRule::pkey);
        v.a = b.pkey;
        v.b = f.pkey;
        report(v);
    }
}

void ConformMonitor::on_request(Ctx& c) {
    Flow& f = *c.f;
    const pkt::Bth& b = c.p.h.bth;
    const pkt::OpcodeInfo& op = *c.p.op;
    const uint32_t psn = b.psn;
    const bool rc = op.transport == pkt::Transport::rc;
    // Opcode sequence at consecutive PSNs: First, Middle..., Last (IBTA 9.7.5.1).
    if (f.req_seen && psn == ((f.prev_psn + 1) & kPsnMask)) {
        const pkt::OpcodeInfo& prev = pkt::opcode_info(f.prev_op);
        const bool open = prev.pos == pkt::Position::first || prev.pos == pkt::Position::middle;
        const bool cont = op.pos == pkt::Position::middle || op.pos == pkt::Position::last;
        if (open != cont || (open && prev.kind != op.kind)) {
            Violation v = c.v(ConfRule::opcode_seq);
            v.what = op.name;
            v.what2 = prev.name;
            report(v);
        }
    }
    if (op.kind == pkt::Kind::cmp_swap || op.kind == pkt::Kind::fetch_add) {
        if (c.p.h.atomic.va & 7) {  // IBTA 9.4: an 8-byte aligned word
            Violation v = c.v(ConfRule::atomic_resp);
            v.msg = Msg::conf_atomic_align;
            v.a = c.p.h.atomic.va;
            report(v);
        }
    }
    if (!f.req_seen) {
        f.req_seen = true;
        f.first_psn = f.max_psn = f.end_psn = psn;
        f.prev_psn = (psn - 1) & kPsnMask;
    }
    const int32_t ahead = psn_diff(psn, f.max_psn);
    const bool fresh = ahead > 0 || f.nmsgs == 0;
    if (!fresh && rc && psn_diff(psn, f.first_psn) < 0) {
        // Behind every PSN this requester sent: not a retransmission but a PSN outside its window
        // (2^23 or more ahead of the oldest unacknowledged reads as behind it, IBTA 9.7.1).
        Violation v = c.v(ConfRule::psn_window);
        v.a = f.first_psn;
        v.b = f.max_psn;
        report(v);
    } else if (!fresh && rc) {
        if (!f.in_retx || psn_diff(psn, f.prev_psn) <= 0) on_restart(c, f);
        // A READ re-issued for its remaining part, from a PSN inside it: the responder may answer
        // it as the rest of the first (rxe, hcaemu) or as a READ of its own.
        if (op.kind == pkt::Kind::rdma_read_request) {
            MsgRec* m = message_at(f.msgs, f.nmsgs, psn);
            if (m && m->kind == pkt::Kind::rdma_read_request && m->psn != psn) {
                m->re_psn = psn;
                m->re_len = c.p.h.reth.dma_len;
            }
        }
    } else if (fresh) {
        f.in_retx = false;
        f.max_psn = psn;
        f.end_psn = psn;  // a new request: every earlier message ended before it
        // Remember the message: where it starts, its kind, a READ's length.
        if (op.is_first() || op.pos == pkt::Position::none) {
            MsgRec& m = f.msgs[f.nmsgs % kMsgs];
            ++f.nmsgs;
            m.psn = psn;
            m.kind = op.kind;
            m.len = op.has(pkt::Ext::reth) ? c.p.h.reth.dma_len : c.p.payload_len;
            m.npkts = op.kind == pkt::Kind::rdma_read_request ? 0 : (op.is_last() ? 1 : 0);
            // A READ takes one PSN per response packet (IBTA 9.7.1): at most one per 256 bytes.
            uint32_t end = psn;
            if (op.kind == pkt::Kind::rdma_read_request && m.len > 256) {
                const uint32_t mtu = f.peer >= 0 && flows_[size_t(f.peer)].pmtu ? flows_[size_t(f.peer)].pmtu : 256;
                end = (psn + (m.len + mtu - 1) / mtu - 1) & kPsnMask;
            }
            if (psn_diff(end, f.end_psn) > 0) f.end_psn = end;
        } else if (op.is_last() && f.nmsgs) {
            MsgRec& m = f.msgs[(f.nmsgs - 1) % kMsgs];
            m.npkts = uint32_t(psn_diff(psn, m.psn)) + 1;
        }
    }
    if (f.nak_pending && psn == f.nak_psn) f.nak_pending = false;
    if (f.rnr_pending && psn == f.rnr_psn) f.rnr_pending = false;
    f.prev_psn = psn;
    f.prev_op = b.opcode;
}

// A request at or below the highest PSN sent, after a forward run: the requester went back.
void ConformMonitor::on_restart(Ctx& c, Flow& f) {
    const uint32_t psn = c.p.h.bth.psn;
    if (f.rnr_pending && c.ts - f.rnr_ts < kRnrUs[f.rnr_code] * 1000) {
        Violation v = c.v(ConfRule::rnr_timer);
        v.a = (c.ts - f.rnr_ts) / 1000;
        v.b = f.rnr_code;
        v.c = kRnrUs[f.rnr_code];
        report(v);
    }
    const bool nak = f.nak_pending, rnr = !nak && f.rnr_pending;
    const uint32_t expected = nak ? f.nak_psn : rnr ? f.rnr_psn : f.acked_valid ? (f.acked + 1) & kPsnMask : f.first_psn;
    const int32_t d = psn_diff(psn, expected);
    // After a NAK or an RNR NAK exactly its PSN; after a timeout at most the oldest unacknowledged
    // (earlier is a duplicate the responder re-acknowledges: an ACK may have crossed the retry).
    if (d > 0 || ((nak || rnr) && d < 0)) {
        Violation v = c.v(ConfRule::retx_psn);
        v.msg = nak ? Msg::conf_retx_nak : rnr ? Msg::conf_retx_rnr : Msg::conf_retx_timeout;
        v.a = expected;
        report(v);
    }
    if (!rnr) {  // RNR retries count against rnr_retry (7: for ever), not retry_cnt
        if (f.retry_n && f.retry_psn == psn)
            ++f.retry_n;
        else
            f.retry_n = 1, f.retry_psn = psn;
        if (f.retry_n == uint32_t(cfg_.retry_cnt) + 1) {  // once, at the first retry too many
            Violation v = c.v(ConfRule::retry_count);
            v.a = f.retry_n;
            v.b = cfg_.retry_cnt;
            report(v);
        }
    }
    f.nak_pending = f.rnr_pending = false;
    f.in_retx = true;
}

// The request flow a response flow answers: the flow the other way whose PSNs sent take in this
// PSN (the nearest below its highest). Binds both ways: an RC QP has one peer.
ConformMonitor::Flow* ConformMonitor::bind_responses(Flow& resp, uint32_t psn) {
    if (resp.peer >= 0) return &flows_[size_t(resp.peer)];
    // Unbound: scan the table (a flow whose responses answer nothing sent; rare, bounded).
    resp.conv = false;
    int32_t best = -1;
    int32_t best_d = INT32_MAX;
    for (uint32_t i = 0; i < kFlows; ++i) {
        const Flow& r = flows_[i];
        if (!r.used || !r.req_seen || r.src != resp.dst || r.dst != resp.src) continue;
        resp.conv = true;
        const int32_t below = psn_diff(r.end_psn, psn), above = psn_diff(psn, r.first_psn);
        if (below < 0 || above < -1) continue;
        if (below < best_d) best_d = below, best = int32_t(i);
    }
    if (best < 0) return nullptr;
    resp.peer = best;
    Flow& req = flows_[size_t(best)];
    const int32_t self = int32_t(&resp - flows_.get());
    if (req.peer < 0) req.peer = self;  // requests on `resp`, if any, are answered on `req`
    return &req;
}

void ConformMonitor::on_response(Ctx& c) {
    Flow& rf = *c.f;
    const pkt::OpcodeInfo& op = *c.p.op;
    const uint32_t psn = c.p.h.bth.psn;
    if (op.has(pkt::Ext::aeth)) {
        const uint8_t syn = c.p.h.aeth.syndrome;
        const pkt::AethType t = c.p.h.aeth.type();
        if ((syn & 0x80) || t == pkt::AethType::reserved ||
            (t == pkt::AethType::nak && c.p.h.aeth.value() > uint8_t(pkt::NakCode::remote_op_error))) {
            Violation v = c.v(ConfRule::aeth_syndrome);
            v.a = syn;
            report(v);
            return;
        }
    }
    Flow* req = bind_responses(rf, psn);
    if (!req) {
        if (rf.conv) {
            Violation v = c.v(ConfRule::resp_unsolicited);
            v.msg = Msg::conf_resp_no_request;
            report(v);
        }
        return;
    }
    if (psn_diff(psn, req->end_psn) > 0) {
        Violation v = c.v(ConfRule::resp_unsolicited);
        v.a = req->end_psn;
        report(v);
        return;
    }
    if (op.has(pkt::Ext::aeth)) {
        const uint32_t msn = c.p.h.aeth.msn;
        if (rf.msn_valid && psn_diff(msn, rf.msn) < 0) {
            Violation v = c.v(ConfRule::aeth_msn);
            v.a = msn;
            v.b = rf.msn;
            report(v);
        } else {
            rf.msn_valid = true;
            rf.msn = msn;
        }
    }
    if (op.kind == pkt::Kind::rdma_read_response) check_read_response(c, *req);
    if (op.kind == pkt::Kind::atomic_ack || op.kind == pkt::Kind::ack) on_ack(c, *req);
}

// Packet PSN - `first` of a READ of `len` bytes: the opcode and length its place asks for. False
// with `v` filled when it is not that.
static bool read_packet_ok(const ConformMonitor::Ctx& c, uint32_t first, uint32_t len, uint32_t pmtu, Violation& v) {
    const pkt::OpcodeInfo& op = *c.p.op;
    const uint32_t k = uint32_t(psn_diff(c.p.h.bth.psn, first));
    const uint32_t npkts = len == 0 ? 1 : pmtu ? (len + pmtu - 1) / pmtu : 1;
    uint8_t want = pkt::op::read_response_middle;
    if (npkts == 1)
        want = pkt::op::read_response_only;
    else if (k == 0)
        want = pkt::op::read_response_first;
    else if (k + 1 == npkts)
        want = pkt::op::read_response_last;
    if (k >= npkts || (c.p.h.bth.opcode & 0x1F) != want) {
        v.rule = ConfRule::read_opcode;
        v.msg = k >= npkts ? Msg::conf_read_past : Msg::conf_read_opcode;
        v.a = k + 1;
        v.b = npkts;
        v.what = op.name;
        v.what2 = pkt::opcode_info(want).name;
        return false;
    }
    const uint32_t expect = npkts == 1 ? len : k + 1 < npkts ? pmtu : len - (npkts - 1) * pmtu;
    if (c.p.payload_len != expect) {
        v.rule = ConfRule::read_length;
        v.msg = Msg::conf_read_length;
        v.a = c.p.payload_len;
        v.b = expect;
        v.c = len;
        return false;
    }
    return true;
}

void ConformMonitor::check_read_response(Ctx& c, Flow& req) {
    const pkt::OpcodeInfo& op = *c.p.op;
    const uint32_t psn = c.p.h.bth.psn;
    const MsgRec* m = message_at(req.msgs, req.nmsgs, psn);
    if (!m) return;
    if (m->kind != pkt::Kind::rdma_read_request) {
        Violation v = c.v(ConfRule::resp_opcode);
        v.what = op.name;
        v.what2 = pkt::kKindName[size_t(m->kind)];
        v.a = m->psn;
        report(v);
        return;
    }
    // Its packets: one path MTU each (the responder's, learnt from a First or Middle) and the rest.
    const uint32_t pmtu = c.f->pmtu;
    if (pmtu || op.pos == pkt::Position::only) {
        Violation v = c.v(ConfRule::read_opcode);
        if (!read_packet_ok(c, m->psn, m->len, pmtu, v) &&
            !(m->re_len && psn_diff(psn, m->re_psn) >= 0 && read_packet_ok(c, m->re_psn, m->re_len, pmtu, v)))
            report(v);
    }
    // A READ response acknowledges every request before it, and its READ up to this PSN.
    if (!req.acked_valid || psn_diff(psn, req.acked) > 0) req.acked = psn, req.acked_valid = true;
    if (req.retry_n && psn_diff(req.acked, req.retry_psn) >= 0) req.retry_n = 0;
}

void ConformMonitor::on_ack(Ctx& c, Flow& req) {
    const pkt::OpcodeInfo& op = *c.p.op;
    const uint32_t psn = c.p.h.bth.psn;
    const pkt::Aeth& a = c.p.h.aeth;
    if (op.kind == pkt::Kind::atomic_ack) {
        const MsgRec* m = message_at(req.msgs, req.nmsgs, psn);
        const bool atomic = m && (m->kind == pkt::Kind::cmp_swap || m->kind == pkt::Kind::fetch_add);
        if ((m && !atomic) || (m && m->psn != psn) || a.type() != pkt::AethType::ack) {
            Violation v = c.v(ConfRule::atomic_resp);
            v.what2 = m ? pkt::kKindName[size_t(m->kind)] : "";
            v.a = a.syndrome;
            report(v);
        }
    }
    switch (a.type()) {
    case pkt::AethType::ack:
        if (!req.acked_valid || psn_diff(psn, req.acked) > 0) req.acked = psn, req.acked_valid = true;
        if (req.retry_n && psn_diff(req.acked, req.retry_psn) >= 0) req.retry_n = 0;
        break;
    case pkt::AethType::rnr_nak:  // IBTA 9.7.5.2, table 45: wait the timer, then from this PSN
        req.rnr_pending = true;
        req.rnr_psn = psn;
        req.rnr_ts = c.ts;
        req.rnr_code = a.value();
        req.nak_pending = false;
        break;
    case pkt::AethType::nak:
        if (a.value() == uint8_t(pkt::NakCode::psn_seq_error)) {  // IBTA 9.7.5.2.1: from this PSN
            req.nak_pending = true;
            req.nak_psn = psn;
            req.rnr_pending = false;
        }
        break;
    default:
        break;
    }
    // A NAK acknowledges every PSN before its own.
    if (a.type() != pkt::AethType::ack) {
        const uint32_t before = (psn - 1) & kPsnMask;
        if (!req.acked_valid || psn_diff(before, req.acked) > 0) req.acked = before, req.acked_valid = true;
    }
}

// Both CNPs are received frames: the longest the interval can have been is from the earliest
// the previous one may have arrived to this one's stamp. Only a shorter one is a violation.
void ConformMonitor::on_cnp(Ctx& c) {
    Flow& f = *c.f;
    if (f.cnp_seen && c.ts - f.cnp_ts + cfg_.cnp_slack_ns < cfg_.cnp_interval_ns) {
        Violation v = c.v(ConfRule::cnp_pacing);
        v.a = (c.ts - f.cnp_ts) / 1000;
        v.b = cfg_.cnp_interval_ns / 1000;
        report(v);
    }
    f.cnp_seen = true;
    f.cnp_ts = c.earliest;
}

// ---- reports (not the data path)

namespace {

std::string gid_text(const pkt::Ip6& g) {
    char b[INET6_ADDRSTRLEN];
    if (pkt::is_ipv4_mapped(g)) {
        const uint32_t a = htonl(pkt::ipv4_of_mapped(g));
        inet_ntop(AF_INET, &a, b, sizeof b);
    } else {
        inet_ntop(AF_INET6, g.data(), b, sizeof b);
    }
    return b;
}

std::string json_escape(const std::string& s) {
    std::string o;
    for (char ch : s) {
        if (ch == '"' || ch == '\\') {
            o += '\\';
            o += ch;
        } else if (uint8_t(ch) < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", unsigned(uint8_t(ch)));
            o += b;
        } else {
            o += ch;
        }
    }
    return o;
}

// Each message's arguments {0} {1} ... in order: a b c (decimal), A B (a, b in hex), w W (what, what2).
struct MsgArgs {
    Msg msg;
    const char* spec;
};
constexpr MsgArgs kMsgArgs[] = {
    {Msg::conf_icrc, "A"},
    {Msg::conf_malformed, "w"},
    {Msg::conf_tver, "a"},
    {Msg::conf_bth_reserved, "ab"},
    {Msg::conf_pkey, "AB"},
    {Msg::conf_pkey_invalid, "A"},
    {Msg::conf_padcnt, "ab"},
    {Msg::conf_mtu, "ab"},
    {Msg::conf_mtu_over, "ab"},
    {Msg::conf_mtu_max, "a"},
    {Msg::conf_mtu_invalid, "a"},
    {Msg::conf_udp_sport, "ab"},
    {Msg::conf_opcode_seq, "wW"},
    {Msg::conf_psn_window, "ab"},
    {Msg::conf_resp_unsolicited, "a"},
    {Msg::conf_resp_no_request, ""},
    {Msg::conf_resp_opcode, "awW"},
    {Msg::conf_read_opcode, "abwW"},
    {Msg::conf_read_past, "abw"},
    {Msg::conf_read_length, "abc"},
    {Msg::conf_atomic_resp, "WA"},
    {Msg::conf_atomic_align, "A"},
    {Msg::conf_aeth_syndrome, "A"},
    {Msg::conf_aeth_msn, "ab"},
    {Msg::conf_retx_nak, "a"},
    {Msg::conf_retx_rnr, "a"},
    {Msg::conf_retx_timeout, "a"},
    {Msg::conf_rnr_timer, "abc"},
    {Msg::conf_retry_count, "ab"},
    {Msg::conf_cnp_pacing, "ab"},
};

std::string arg(const Violation& v, char k) {
    char b[24];
    switch (k) {
    case 'a': return std::to_string(v.a);
    case 'b': return std::to_string(v.b);
    case 'c': return std::to_string(v.c);
    case 'A': std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v.a)); return b;
    case 'B': std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v.b)); return b;
    case 'w': return v.what;
    default: return v.what2;
    }
}

}  // namespace

std::string message(const Violation& v, pkt::Lang lang) {
    const char* spec = "";
    for (const MsgArgs& m : kMsgArgs)
        if (m.msg == v.msg) spec = m.spec;
    std::string s[4];
    for (size_t i = 0; i < 4 && spec[i]; ++i) s[i] = arg(v, spec[i]);
    return pkt::msg(v.msg, lang, {s[0], s[1], s[2], s[3]});
}

std::string describe(const Violation& v, pkt::Lang lang) {
    char qp[16] = "-", psn[16] = "-";
    if (v.has_bth) {
        std::snprintf(qp, sizeof qp, "0x%06x", v.qp);
        std::snprintf(psn, sizeof psn, "%u", v.psn);
    }
    const ConfRuleInfo& r = info(v.rule);
    return pkt::msg(Msg::conf_line, lang,
                    {std::to_string(v.frame), gid_text(v.src), gid_text(v.dst), qp, psn, message(v, lang), r.id,
                     r.cite, pkt::text(r.sev == Severity::error ? Msg::conf_sev_error : Msg::conf_sev_warning, lang)});
}

std::string to_json(const Violation& v, pkt::Lang lang) {
    const ConfRuleInfo& r = info(v.rule);
    char b[160];
    std::snprintf(b, sizeof b, "{\"frame\":%llu,\"ts_ns\":%llu,\"rule\":\"%s\",\"severity\":\"%s\",",
                  static_cast<unsigned long long>(v.frame), static_cast<unsigned long long>(v.ts_ns), r.id,
                  kSeverityName[size_t(r.sev)]);
    std::string o = b;
    o += "\"cite\":\"" + json_escape(r.cite) + "\",\"src\":\"" + gid_text(v.src) + "\",\"dst\":\"" + gid_text(v.dst) +
         "\",";
    if (v.has_bth) {
        std::snprintf(b, sizeof b, "\"qp\":%u,\"psn\":%u,\"opcode\":%u,", v.qp, v.psn, v.opcode);
        o += b;
    } else {
        o += "\"qp\":null,\"psn\":null,\"opcode\":null,";
    }
    o += "\"message\":\"" + json_escape(message(v, lang)) + "\"}";
    return o;
}

bool rule_from_id(std::string_view id, ConfRule& out) {
    for (size_t i = 0; i < kConfRuleCount; ++i)
        if (id == kConfRules[i].id) {
            out = ConfRule(i);
            return true;
        }
    return false;
}

namespace {
void collect(void* ctx, const Violation& v) { static_cast<std::vector<Violation>*>(ctx)->push_back(v); }
}  // namespace

bool conform_pcap(const std::string& path, ConformMonitor& mon, std::vector<Violation>& out, std::string& err) {
    PcapReader rd(path);
    if (!rd.ok()) {
        err = rd.error();
        return false;
    }
    // A capture taken above event injection holds tx frames that never reached the wire.
    std::vector<uint64_t> unsent;
    std::map<uint64_t, uint64_t> late;
    for (const auto& [frame, text] : read_notes(path, &late))
        if (text.find(": not sent") != std::string::npos) unsent.push_back(frame);  // std::map: in order
    mon.set_sink(&collect, &out);
    PcapFrame fr;
    uint64_t n = 0;
    size_t u = 0;
    while (rd.next(fr)) {
        ++n;
        while (u < unsent.size() && unsent[u] < n) ++u;
        if (u < unsent.size() && unsent[u] == n) continue;
        const auto lt = late.find(n);
        mon.frame(fr.data, fr.ts_ns, n, lt == late.end() ? 0 : lt->second);
    }
    mon.set_sink(nullptr, nullptr);
    if (!rd.error().empty()) {
        err = path + ": read error after " + std::to_string(n) + " frames: " + rd.error();
        return false;
    }
    return true;
}

// ---- ConformPort

ConformPort::ConformPort(Port& inner, const Clock& clock, const ConformConfig& cfg)
    : inner_(inner), clock_(clock), mon_(cfg), drained_ns_(clock.now_ns()) {
    mon_.set_sink(&ConformPort::sink, this);
}

void ConformPort::sink(void* self, const Violation& v) {
    auto* p = static_cast<ConformPort*>(self);
    p->recent_[p->nrecent_ % kRecent] = v;
    ++p->nrecent_;
}

uint32_t ConformPort::recent(std::array<Violation, kRecent>& out) const {
    const uint64_t n = nrecent_ < kRecent ? nrecent_ : kRecent;
    for (uint64_t i = 0; i < n; ++i) out[i] = recent_[(nrecent_ - n + i) % kRecent];
    return uint32_t(n);
}

void ConformPort::see(const Frame& f) { mon_.frame({f.data, f.len}, clock_.now_ns(), ++frame_no_); }

uint16_t ConformPort::tx_burst(Frame* frames, uint16_t n) {
    // Frames offered again after a partial burst were seen already (the same buffers, in front).
    uint16_t i = 0;
    for (uint32_t k = 0; i < n && k < nuntaken_ && frames[i].data == untaken_[k]; ++k) ++i;
    for (uint16_t j = i; j < n; ++j) see(frames[j]);
    const uint16_t taken = inner_.tx_burst(frames, n);
    nuntaken_ = 0;
    for (uint16_t j = taken; j < n && nuntaken_ < untaken_.size(); ++j) untaken_[nuntaken_++] = frames[j].data;
    return taken;
}

// Received frames are stamped when the poll returns; they arrived after the last poll that left
// the ring empty (the monitor's cnp.pacing needs that bound).
uint16_t ConformPort::rx_burst(Frame* frames, uint16_t n) {
    const uint64_t polled = clock_.now_ns();
    const uint16_t got = inner_.rx_burst(frames, n);
    if (got) {
        const uint64_t stamp = clock_.now_ns();
        for (uint16_t i = 0; i < got; ++i) mon_.frame({frames[i].data, frames[i].len}, stamp, ++frame_no_, stamp - drained_ns_);
    }
    if (got < n) drained_ns_ = polled;
    return got;
}

}  // namespace hcaemu::port

// The ladder model: frames -> lanes (IP, QP) and arrows with their labels, retransmissions, drops
// and the request each response answers.
#include "tools/ladder/ladder.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <tuple>
#include <unordered_map>

#include "dpdk_port/pcap_file.hpp"
#include "packet/opcode.hpp"
#include "packet/parse.hpp"
#include "transport/psn.hpp"

namespace hcaemu::ladder {

using transport::psn_add;
using transport::psn_diff;

const char* name(DropReason r) {
    switch (r) {
    case DropReason::lost: return "lost on the wire";
    case DropReason::too_big: return "dropped: larger than the wire's MTU";
    case DropReason::rx_full: return "dropped: the receiver's ring was full";
    case DropReason::injected: return "dropped by an injection rule";
    }
    return "dropped";
}

// What the model keeps of one frame: the fields the diagram shows, not the bytes.
struct Builder::Rec {
    uint64_t frame = 0, ts = 0, hash = 0;
    pkt::ParseError err = pkt::ParseError::ok;
    pkt::Ip6 src{}, dst{};
    uint16_t sport = 0;
    uint8_t opcode = 0;
    uint32_t dest_qp = 0, psn = 0;
    bool has_aeth = false;
    uint8_t syndrome = 0;
    uint32_t msn = 0;
    uint32_t payload_len = 0;
    bool has_reth = false;
    uint32_t dma_len = 0;
    bool has_deth = false;
    uint32_t deth_src_qp = 0;
    bool lost = false;
    DropReason drop = DropReason::lost;
};

Builder::Builder() = default;
Builder::~Builder() = default;
uint64_t Builder::frames() const { return frames_; }

namespace {

uint64_t fnv1a(std::span<const uint8_t> b) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint8_t c : b) h = (h ^ c) * 0x100000001b3ull;
    return h;
}

std::string psn_hex(uint32_t psn) {
    char b[16];
    std::snprintf(b, sizeof b, "0x%06x", psn & 0xFFFFFF);
    return b;
}

std::string ip_text(const pkt::Ip6& ip) {
    char b[INET6_ADDRSTRLEN] = {};
    if (pkt::is_ipv4_mapped(ip)) {
        const uint32_t a = pkt::ipv4_of_mapped(ip);
        std::snprintf(b, sizeof b, "%u.%u.%u.%u", a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255);
        return b;
    }
    inet_ntop(AF_INET6, ip.data(), b, sizeof b);
    return b;
}

// "RC RDMA WRITE First" -> "RDMA WRITE First"; UC and UD keep their prefix.
std::string short_name(uint8_t opcode) {
    const pkt::OpcodeInfo& oi = pkt::opcode_info(opcode);
    if (!oi.valid()) {
        char b[24];
        std::snprintf(b, sizeof b, "opcode 0x%02x", opcode);
        return b;
    }
    std::string s = oi.name;
    if (s.rfind("RC ", 0) == 0) s.erase(0, 3);
    return s;
}

std::string rnr_time(uint8_t code) {
    char b[32];
    std::snprintf(b, sizeof b, "%g ms", double(transport::rnr_timer_ns(code)) / 1e6);
    return b;
}

void append(std::string& s, const std::string& part) {
    if (!s.empty()) s += ", ";
    s += part;
}

struct FlowKey {
    pkt::Ip6 src, dst;
    uint32_t dqp;
    bool operator<(const FlowKey& o) const { return std::tie(src, dst, dqp) < std::tie(o.src, o.dst, o.dqp); }
};

struct Flow {
    FlowKey key;
    std::vector<uint16_t> sports;
    std::vector<uint32_t> req_psns, resp_psns;  // the first few, to pair flows by PSN
    int peer = -1;
};

// Flows (src IP, dst IP, DestQP) in order of first appearance; each paired with the flow of the
// other direction that carries its answers: the same UDP source port (Linux and hcaemu use one per
// connection), else the only candidate, else the one whose PSNs match.
std::vector<Flow> pair_flows(const std::vector<Builder::Rec>& recs, std::map<FlowKey, int>& index) {
    std::vector<Flow> flows;
    for (const auto& r : recs) {
        if (!pkt::decoded_bth(r.err)) continue;
        const FlowKey k{r.src, r.dst, r.dest_qp};
        auto [it, fresh] = index.try_emplace(k, int(flows.size()));
        if (fresh) flows.push_back({k, {}, {}, {}, -1});
        Flow& f = flows[size_t(it->second)];
        if (std::find(f.sports.begin(), f.sports.end(), r.sport) == f.sports.end() && f.sports.size() < 8)
            f.sports.push_back(r.sport);
        const bool req = pkt::opcode_info(r.opcode).request;
        auto& v = req ? f.req_psns : f.resp_psns;
        if (v.size() < 256) v.push_back(r.psn);
    }
    auto overlap = [](const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
        size_t n = 0;
        for (uint32_t x : a) n += std::find(b.begin(), b.end(), x) != b.end();
        return n;
    };
    for (size_t i = 0; i < flows.size(); ++i) {
        Flow& f = flows[i];
        if (f.peer >= 0) continue;
        std::vector<size_t> cand;
        for (size_t j = 0; j < flows.size(); ++j)
            if (j != i && flows[j].peer < 0 && flows[j].key.src == f.key.dst && flows[j].key.dst == f.key.src) cand.push_back(j);
        int best = -1;
        size_t best_score = 0;
        for (size_t j : cand) {
            const Flow& g = flows[j];
            size_t score = overlap(f.req_psns, g.resp_psns) + overlap(g.req_psns, f.resp_psns);
            for (uint16_t s : f.sports)
                if (std::find(g.sports.begin(), g.sports.end(), s) != g.sports.end()) score += 1'000'000;
            if (best < 0 || score > best_score) {
                best = int(j);
                best_score = score;
            }
        }
        if (best >= 0 && (cand.size() == 1 || best_score > 0)) {
            f.peer = best;
            flows[size_t(best)].peer = int(i);
        }
    }
    return flows;
}

// Per direction: the PSNs seen (and the hash of the frame that carried each), to mark retransmissions.
struct DirState {
    std::unordered_map<uint32_t, uint64_t> req, data_resp;
    std::unordered_map<uint32_t, uint8_t> ack;  // PSN -> AETH syndrome
};

// Per requester -> responder pair: the requests by PSN, to tie responses to them.
struct ConnState {
    std::unordered_map<uint32_t, size_t> req;  // PSN -> the latest arrow with it
    std::vector<std::pair<uint32_t, size_t>> reads;
    bool have_unacked = false;
    uint32_t unacked = 0;  // the oldest PSN not yet acknowledged
};

std::string label_of(const Builder::Rec& r, const pkt::OpcodeInfo& oi) {
    std::string s;
    if (oi.valid() && oi.kind == pkt::Kind::ack && pkt::decoded_all(r.err)) {
        const auto t = pkt::AethType((r.syndrome >> 5) & 3);
        s = t == pkt::AethType::ack ? "ACK" : t == pkt::AethType::nak ? "NAK" : t == pkt::AethType::rnr_nak ? "RNR NAK" : "AETH reserved";
    } else {
        s = short_name(r.opcode);
    }
    s += " PSN " + psn_hex(r.psn);
    if (!pkt::decoded_all(r.err)) return s;
    if (oi.kind == pkt::Kind::rdma_read_request && r.has_reth) s += " DMA len " + std::to_string(r.dma_len);
    if (oi.payload) s += " len " + std::to_string(r.payload_len);
    if (r.has_aeth) {
        s += " MSN " + std::to_string(r.msn);
        const auto t = pkt::AethType((r.syndrome >> 5) & 3);
        if (t == pkt::AethType::nak) s += std::string(" ") + pkt::nak_code_name(r.syndrome & 0x1F);
        if (t == pkt::AethType::rnr_nak) s += " timer " + rnr_time(r.syndrome & 0x1F);
    }
    return s;
}

class Model {
public:
    Model(const std::vector<Builder::Rec>& recs, Ladder& l) : recs_(recs), l_(l) {}

    void run() {
        std::map<FlowKey, int> index;
        flows_ = pair_flows(recs_, index);
        std::vector<std::pair<uint32_t, uint32_t>> ends;  // per drawn rec: lanes before ordering
        for (const auto& r : recs_) {
            if (!pkt::decoded_bth(r.err)) continue;
            const Flow& f = flows_[size_t(index.at({r.src, r.dst, r.dest_qp}))];
            uint32_t src_qp = 0;
            bool known = true;
            if (f.peer >= 0) src_qp = flows_[size_t(f.peer)].key.dqp;
            else if (r.has_deth) src_qp = r.deth_src_qp;
            else known = false;
            const uint32_t from = lane(r.src, src_qp, known), to = lane(r.dst, r.dest_qp, true);
            ends.emplace_back(from, to);
        }
        order_lanes();
        size_t k = 0;
        for (const auto& r : recs_) {
            if (!pkt::decoded_bth(r.err)) continue;
            add_arrow(r, rank_[ends[k].first], rank_[ends[k].second]);
            ++k;
        }
    }

private:
    uint32_t lane(const pkt::Ip6& ip, uint32_t qpn, bool known) {
        auto [it, fresh] = lane_index_.try_emplace({ip, known ? qpn : 0, known}, uint32_t(lanes_.size()));
        if (!fresh) return it->second;
        Lane ln;
        ln.ip = ip;
        ln.qpn = known ? qpn : 0;
        ln.qpn_known = known;
        ln.host = ip_text(ip);
        ln.name = ln.host + " QP " + (known ? psn_hex(qpn) : std::string("?"));
        lanes_.push_back(ln);
        return uint32_t(lanes_.size() - 1);
    }

    // Lanes grouped by host, hosts and the QPs of each in order of first appearance.
    void order_lanes() {
        std::vector<pkt::Ip6> hosts;
        for (const auto& ln : lanes_)
            if (std::find(hosts.begin(), hosts.end(), ln.ip) == hosts.end()) hosts.push_back(ln.ip);
        rank_.assign(lanes_.size(), 0);
        for (const auto& h : hosts)
            for (size_t i = 0; i < lanes_.size(); ++i)
                if (lanes_[i].ip == h) {
                    rank_[i] = uint32_t(l_.lanes.size());
                    l_.lanes.push_back(lanes_[i]);
                }
    }

    void add_arrow(const Builder::Rec& r, uint32_t from, uint32_t to) {
        const pkt::OpcodeInfo& oi = pkt::opcode_info(r.opcode);
        Arrow a;
        a.frame = a.frame_last = r.frame;
        a.t_ns = r.ts > recs_.front().ts ? r.ts - recs_.front().ts : 0;
        a.from = from;
        a.to = to;
        a.opcode = r.opcode;
        a.request = oi.valid() && oi.request;
        a.psn = a.psn_last = r.psn;
        a.len = r.payload_len;
        a.lost = r.lost;
        a.drop = r.drop;
        a.error = r.err;
        a.malformed = r.err != pkt::ParseError::ok;
        if (r.has_aeth) {
            const auto t = pkt::AethType((r.syndrome >> 5) & 3);
            a.syndrome = t == pkt::AethType::ack ? Syndrome::ack : t == pkt::AethType::nak ? Syndrome::nak
                       : t == pkt::AethType::rnr_nak ? Syndrome::rnr_nak : Syndrome::reserved;
            a.syndrome_value = r.syndrome & 0x1F;
            a.msn = r.msn;
        }
        a.label = label_of(r, oi);
        std::string ties;
        if (oi.valid() && pkt::decoded_all(r.err) && oi.transport != pkt::Transport::cnp) {
            DirState& d = dirs_[{from, to}];
            if (a.request) request(r, oi, a, d, conns_[{from, to}]);
            else response(r, oi, a, d, conns_[{to, from}], ties);
        }
        std::string note;
        if (a.dup) note = "dup";
        else if (a.retx) note = "retx";
        if (a.lost) append(note, name(a.drop));
        if (a.malformed) append(note, std::string(r.err == pkt::ParseError::bad_icrc ? "bad ICRC" : "malformed: ") +
                                          (r.err == pkt::ParseError::bad_icrc ? "" : pkt::name(r.err)));
        if (!ties.empty()) append(note, ties);
        a.note = note;
        l_.arrows.push_back(std::move(a));
    }

    void request(const Builder::Rec& r, const pkt::OpcodeInfo& oi, Arrow& a, DirState& d, ConnState& c) {
        auto [it, fresh] = d.req.try_emplace(r.psn, r.hash);
        if (!fresh) {
            a.retx = true;
            a.dup = it->second == r.hash;
            it->second = r.hash;
        }
        const size_t idx = l_.arrows.size();
        c.req[r.psn] = idx;
        if (oi.kind == pkt::Kind::rdma_read_request) c.reads.emplace_back(r.psn, idx);
        if (!c.have_unacked) {
            c.have_unacked = true;
            c.unacked = r.psn;
        }
    }

    int64_t request_at(const ConnState& c, uint32_t psn) const {
        auto it = c.req.find(psn);
        return it == c.req.end() ? -1 : int64_t(it->second);
    }

    // "acks PSN a..last" from the oldest unacknowledged PSN; moves it past `last`.
    std::string acks(ConnState& c, uint32_t last) {
        std::string s;
        if (c.have_unacked && psn_diff(last, c.unacked) > 0) s = "acks PSN " + psn_hex(c.unacked) + ".." + psn_hex(last);
        else if (c.have_unacked && psn_diff(last, c.unacked) < 0) s = "acks PSN " + psn_hex(last) + " again";
        else s = "acks PSN " + psn_hex(last);
        advance(c, psn_add(last, 1));
        return s;
    }
    static void advance(ConnState& c, uint32_t next) {
        if (!c.have_unacked || psn_diff(next, c.unacked) > 0) c.unacked = next;
        c.have_unacked = true;
    }

    void response(const Builder::Rec& r, const pkt::OpcodeInfo& oi, Arrow& a, DirState& d, ConnState& c, std::string& ties) {
        const uint32_t p = r.psn;
        if (oi.kind == pkt::Kind::ack) {
            auto [it, fresh] = d.ack.try_emplace(p, r.syndrome);
            if (!fresh && (it->second >> 5) == (r.syndrome >> 5)) a.retx = true;
            it->second = r.syndrome;
            switch (a.syndrome) {
            case Syndrome::ack:
                a.answers = request_at(c, p);
                ties = acks(c, p);
                return;
            case Syndrome::nak:
                if (a.syndrome_value == uint8_t(pkt::NakCode::psn_seq_error)) {
                    // IBTA 9.7.5.2.1: PSN is the one the responder expects; everything before it arrived.
                    if (c.have_unacked && psn_diff(p, c.unacked) > 0) ties = "acks PSN " + psn_hex(c.unacked) + ".." + psn_hex(psn_add(p, 0xFFFFFF)) + ", ";
                    ties += "resend from PSN " + psn_hex(p);
                    advance(c, p);
                } else {
                    a.answers = request_at(c, p);
                    ties = "rejects PSN " + psn_hex(p);
                }
                return;
            case Syndrome::rnr_nak:  // IBTA 9.7.5.2.8: no receive WQE for PSN p; retry it after the timer
                a.answers = request_at(c, p);
                ties = "retry PSN " + psn_hex(p) + " in " + rnr_time(a.syndrome_value);
                advance(c, p);
                return;
            default: return;
            }
        }
        auto [it, fresh] = d.data_resp.try_emplace(p, r.hash);
        if (!fresh) {
            a.retx = true;
            a.dup = it->second == r.hash;
            it->second = r.hash;
        }
        if (oi.kind == pkt::Kind::rdma_read_response) {
            // The READ whose PSN range holds p: the latest READ request at or before p.
            int64_t best = -1;
            int32_t best_d = INT32_MAX;
            for (auto ri = c.reads.rbegin(); ri != c.reads.rend() && ri - c.reads.rbegin() < 4096; ++ri) {
                const int32_t dd = psn_diff(p, ri->first);
                if (dd >= 0 && dd < best_d) {
                    best_d = dd;
                    best = int64_t(ri->second);
                }
            }
            a.answers = best;
            if (best >= 0) ties = "answers READ PSN " + psn_hex(l_.arrows[size_t(best)].psn);
            if (oi.is_last()) advance(c, psn_add(p, 1));
        } else if (oi.kind == pkt::Kind::atomic_ack) {
            a.answers = request_at(c, p);
            ties = a.answers >= 0 ? "answers " + short_name(l_.arrows[size_t(a.answers)].opcode) + " PSN " + psn_hex(p) : "";
            advance(c, psn_add(p, 1));
        }
    }

    const std::vector<Builder::Rec>& recs_;
    Ladder& l_;
    std::vector<Flow> flows_;
    std::vector<Lane> lanes_;
    std::map<std::tuple<pkt::Ip6, uint32_t, bool>, uint32_t> lane_index_;
    std::vector<uint32_t> rank_;
    std::map<std::pair<uint32_t, uint32_t>, DirState> dirs_;
    std::map<std::pair<uint32_t, uint32_t>, ConnState> conns_;
};

// The arrows --frames and --qp keep, their lanes only; `answers` re-pointed or cleared.
void filter(Ladder& l, const Options& o) {
    std::vector<int64_t> new_idx(l.arrows.size(), -1);
    std::vector<Arrow> kept;
    for (size_t i = 0; i < l.arrows.size(); ++i) {
        const Arrow& a = l.arrows[i];
        if (a.frame < o.first_frame || a.frame > o.last_frame) continue;
        if (o.qp_filter) {
            const Lane& f = l.lanes[a.from];
            const Lane& t = l.lanes[a.to];
            if (!(f.qpn_known && f.qpn == o.qp) && !(t.qpn_known && t.qpn == o.qp)) continue;
        }
        new_idx[i] = int64_t(kept.size());
        kept.push_back(a);
    }
    for (auto& a : kept) a.answers = a.answers >= 0 ? new_idx[size_t(a.answers)] : -1;
    std::vector<int64_t> lane_idx(l.lanes.size(), -1);
    for (const auto& a : kept) lane_idx[a.from] = lane_idx[a.to] = 0;
    std::vector<Lane> lanes;
    for (size_t i = 0; i < l.lanes.size(); ++i)
        if (lane_idx[i] >= 0) {
            lane_idx[i] = int64_t(lanes.size());
            lanes.push_back(l.lanes[i]);
        }
    for (auto& a : kept) {
        a.from = uint32_t(lane_idx[a.from]);
        a.to = uint32_t(lane_idx[a.to]);
    }
    l.arrows = std::move(kept);
    l.lanes = std::move(lanes);
}

// "SEND Last with Immediate" -> ("SEND with Immediate", "Last").
std::pair<std::string, std::string> split_position(const std::string& n) {
    for (const char* w : {" First", " Middle", " Last", " Only"}) {
        const size_t at = n.find(w);
        if (at != std::string::npos) return {n.substr(0, at) + n.substr(at + std::strlen(w)), std::string(w + 1)};
    }
    return {n, ""};
}

// Summary: the packets of one message (First, Middle..., Last in PSN order, same direction, same
// marks) become one row; ACKs, NAKs, lost and malformed packets stay rows of their own.
void summarize(Ladder& l) {
    std::vector<Arrow> rows;
    std::vector<uint8_t> last_op;
    std::vector<int64_t> row_of(l.arrows.size(), -1);
    std::map<std::pair<uint32_t, uint32_t>, size_t> open;  // direction -> row still expecting packets
    for (size_t i = 0; i < l.arrows.size(); ++i) {
        const Arrow& a = l.arrows[i];
        const pkt::OpcodeInfo& oi = pkt::opcode_info(a.opcode);
        const auto key = std::make_pair(a.from, a.to);
        auto it = open.find(key);
        const bool cont = oi.valid() && (oi.pos == pkt::Position::middle || oi.pos == pkt::Position::last);
        if (it != open.end() && cont && !a.lost && !a.malformed) {
            Arrow& r = rows[it->second];
            if (pkt::opcode_info(r.opcode).kind == oi.kind && r.retx == a.retx && r.dup == a.dup &&
                a.psn == psn_add(r.psn_last, 1)) {
                r.psn_last = a.psn;
                r.frame_last = a.frame;
                r.len += a.len;
                ++r.packets;
                if (a.syndrome != Syndrome::none) r.msn = a.msn;
                last_op[it->second] = a.opcode;
                row_of[i] = int64_t(it->second);
                if (oi.pos == pkt::Position::last) open.erase(it);
                continue;
            }
        }
        if (it != open.end()) open.erase(it);
        row_of[i] = int64_t(rows.size());
        rows.push_back(a);
        last_op.push_back(a.opcode);
        if (oi.valid() && (oi.pos == pkt::Position::first || oi.pos == pkt::Position::middle) && !a.lost && !a.malformed)
            open[key] = rows.size() - 1;
    }
    for (size_t k = 0; k < rows.size(); ++k) {
        Arrow& r = rows[k];
        r.answers = r.answers >= 0 ? row_of[size_t(r.answers)] : -1;
        if (r.packets == 1) continue;
        const auto [base, p0] = split_position(short_name(r.opcode));
        const auto [base_last, p1] = split_position(short_name(last_op[k]));
        std::string s = base_last;
        if (!(p0 == "First" && p1 == "Last")) s = base + " " + p0 + ".." + p1;
        s += " PSN " + psn_hex(r.psn) + ".." + psn_hex(r.psn_last) + " " + std::to_string(r.packets) + " pkts len " +
             std::to_string(r.len);
        if (r.syndrome != Syndrome::none) s += " MSN " + std::to_string(r.msn);
        r.label = s;
    }
    l.arrows = std::move(rows);
}

}  // namespace

void Builder::add(std::span<const uint8_t> frame, uint64_t ts_ns) {
    const uint64_t no = ++frames_;
    pkt::Packet p;
    const pkt::ParseError e = pkt::parse(frame, p);
    if (!pkt::decoded_udp(e) || e == pkt::ParseError::bad_udp_length || p.h.udp.dport != pkt::kRoceV2Port) {
        ++skipped_;  // not RoCE v2: ARP, TCP, other UDP ports, broken IP
        return;
    }
    if (!pkt::decoded_bth(e)) {
        ++malformed_;  // UDP/4791 cut before its BTH, or a bad UDP checksum: nothing to draw
        return;
    }
    Rec r;
    r.frame = no;
    r.ts = ts_ns;
    r.hash = fnv1a(frame);
    r.err = e;
    r.src = p.h.ipv6 ? p.h.ip6.src : pkt::ipv4_mapped_gid(p.h.ip4.src);
    r.dst = p.h.ipv6 ? p.h.ip6.dst : pkt::ipv4_mapped_gid(p.h.ip4.dst);
    r.sport = p.h.udp.sport;
    r.opcode = p.h.bth.opcode;
    r.dest_qp = p.h.bth.dest_qp;
    r.psn = p.h.bth.psn;
    if (pkt::decoded_all(e) && p.op) {
        const pkt::OpcodeInfo& oi = *p.op;
        r.has_aeth = oi.has(pkt::Ext::aeth);
        r.syndrome = p.h.aeth.syndrome;
        r.msn = p.h.aeth.msn;
        r.payload_len = p.payload_len;
        r.has_reth = oi.has(pkt::Ext::reth);
        r.dma_len = p.h.reth.dma_len;
        r.has_deth = oi.has(pkt::Ext::deth);
        r.deth_src_qp = p.h.deth.src_qp;
    }
    recs_.push_back(r);
}

void Builder::drop(const Drop& d) { drops_.push_back(d); }

Ladder Builder::build(const Options& opt) const {
    Ladder l;
    std::vector<Rec> recs = recs_;
    uint64_t lost = 0;
    for (const Drop& d : drops_) {
        auto it = std::lower_bound(recs.begin(), recs.end(), d.frame, [](const Rec& r, uint64_t f) { return r.frame < f; });
        if (it != recs.end() && it->frame == d.frame && !it->lost) {
            it->lost = true;
            it->drop = d.why;
            ++lost;
        }
    }
    if (!recs.empty()) Model(recs, l).run();
    l.stats.frames = frames_;
    l.stats.roce = recs.size();
    l.stats.skipped = skipped_;
    l.stats.malformed = malformed_;
    l.stats.lost = lost;
    for (const auto& a : l.arrows) l.stats.bad += a.malformed;
    filter(l, opt);
    if (opt.summary) summarize(l);
    for (const auto& a : l.arrows) l.stats.shown += a.packets;
    for (size_t i = 1; i < l.arrows.size(); ++i) {
        const uint64_t dt = l.arrows[i].t_ns - l.arrows[i - 1].t_ns;
        if (l.arrows[i].t_ns > l.arrows[i - 1].t_ns && dt >= opt.gap_ns) l.gaps.push_back({i, dt});
    }
    return l;
}

bool read_pcap(const std::string& path, Builder& b, std::string& err) {
    port::PcapReader rd(path);
    if (!rd.ok()) {
        err = rd.error();
        return false;
    }
    port::PcapFrame fr;
    while (rd.next(fr)) b.add(fr.data, fr.ts_ns);
    if (!rd.error().empty()) {
        err = path + ": read error after " + std::to_string(b.frames()) + " frames: " + rd.error();
        return false;
    }
    return true;
}

}  // namespace hcaemu::ladder

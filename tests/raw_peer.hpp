// A device under test facing a hand-driven peer: one real HCA (a SimPair side) on end 0 of the
// in-memory wire, and end 1 driven by the test itself. The test builds each request or response
// field by field, sends it, runs virtual time, and reads back every frame the HCA sent, parsed.
// This is how a rule is tested packet by packet: exact opcodes, PSNs, AETH syndromes and MSNs.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "packet/build.hpp"
#include "packet/bytes.hpp"
#include "packet/icrc.hpp"
#include "packet/parse.hpp"
#include "tools/hcaemu/sim_pair.hpp"

namespace hcaemu::test {

// One frame the HCA sent, parsed (the bytes are kept, the view points into them).
struct RxFrame {
    std::vector<uint8_t> bytes;
    pkt::Packet p;
    uint8_t opcode() const { return p.h.bth.opcode; }
    uint32_t psn() const { return p.h.bth.psn; }
    uint8_t syndrome() const { return p.h.aeth.syndrome; }
    uint32_t msn() const { return p.h.aeth.msn; }
    std::vector<uint8_t> payload() const { return {p.payload().begin(), p.payload().end()}; }
};

class RawPeer {
public:
    static constexpr uint32_t kPeerIp = 0xC6120002;  // 198.18.0.2 (the DUT is 198.18.0.1)
    static constexpr uint32_t kPeerQpn = 0x77;

    // The DUT's QP is connected (cfg.type, cfg.mtu ...) to kPeerQpn at 198.18.0.2: its send PSN
    // is cfg.sq_psn[0], its expected PSN cfg.sq_psn[1] (the peer's first request PSN). With
    // cfg.ipv6[0] and [1] set, over those IPv6 addresses instead (DUT, peer).
    explicit RawPeer(tools::SimConfig c = {}) : clock(1'000'000'000), wire(c.wire, clock), cfg(c) {
        tools::SimPair::build_side(dut, wire.end(0), clock, c, 0, c.wire.mac[1]);
        const bool v6 = c.ipv6[1] != Gid{};
        connected = tools::connect_qp(dut.qp, c, kPeerQpn, v6 ? c.ipv6[1] : pkt::ipv4_mapped_gid(kPeerIp), c.sq_psn[0],
                                      c.sq_psn[1]);
        // The peer's packet template: Ethernet, IPv4 and UDP to the DUT, BTH to its QP.
        tmpl.eth.src = c.wire.mac[1];
        tmpl.eth.dst = c.wire.mac[0];
        tmpl.eth.ethertype = pkt::kEthTypeIpv4;
        tmpl.ip4.src = kPeerIp;
        tmpl.ip4.dst = 0xC6120001;
        tmpl.ip4.ttl = 64;
        tmpl.udp.sport = 0xC123;
        tmpl.bth.dest_qp = dut.qp.qpn();
        tmpl.bth.pkey = 0xFFFF;
        if (c.type == QpType::ud) tmpl.deth = {0x11111111, 0, kPeerQpn};
        if (v6) {
            tmpl.ipv6 = true;
            tmpl.eth.ethertype = pkt::kEthTypeIpv6;
            tmpl.ip6.src = c.ipv6[1];
            tmpl.ip6.dst = c.ipv6[0];
        }
    }

    // A packet from the peer with this opcode and PSN; the test sets the other fields it needs.
    pkt::Headers req(uint8_t opcode, uint32_t psn, bool ack_req = false) const {
        pkt::Headers h = tmpl;
        h.bth.opcode = opcode;
        h.bth.psn = psn & 0xFFFFFF;
        h.bth.ack_req = ack_req;
        return h;
    }

    // Builds `h` with `payload` (valid ICRC) and puts it on the wire towards the DUT.
    bool send(const pkt::Headers& h, std::span<const uint8_t> payload = {}) {
        port::Frame f;
        if (!wire.end(1).alloc(f)) return false;
        size_t len = 0;
        if (pkt::build(h, payload, {f.data, f.cap}, len) != pkt::BuildError::ok) {
            wire.end(1).free(f);
            return false;
        }
        f.len = uint32_t(len);
        return send_raw(f);
    }
    // `h` (IPv4) with BTH PadCnt `pad` and `payload` followed by `pad` zero bytes, whatever they
    // add up to: the IP and UDP lengths, the IP checksum and the ICRC are made to match, so that
    // only the transport's length rules can refuse it (the UDP checksum is 0).
    bool send_padded(const pkt::Headers& h, std::span<const uint8_t> payload, uint8_t pad) {
        port::Frame f;
        if (!wire.end(1).alloc(f)) return false;
        size_t hl = 0;
        const size_t data = payload.size() + pad;
        if (pkt::build_headers(h, 0, {f.data, f.cap}, hl) != pkt::BuildError::ok || hl + data + 4 + 60 > f.cap) {
            wire.end(1).free(f);
            return false;
        }
        uint8_t* ip = f.data + pkt::kEthLen;
        const size_t udp_len = hl - pkt::kEthLen - pkt::kIpv4Len + data + pkt::kIcrcLen;
        pkt::store_be16(ip + 2, uint16_t(pkt::kIpv4Len + udp_len));
        pkt::store_be16(ip + 10, 0);
        uint32_t sum = 0;
        for (size_t i = 0; i < pkt::kIpv4Len; i += 2) sum += uint32_t(ip[i]) << 8 | ip[i + 1];
        while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
        pkt::store_be16(ip + 10, uint16_t(~sum));
        uint8_t* udp = ip + pkt::kIpv4Len;
        pkt::store_be16(udp + 4, uint16_t(udp_len));
        pkt::store_be16(udp + 6, 0);
        udp[8 + 1] = uint8_t((udp[8 + 1] & ~0x30) | (pad & 3) << 4);  // BTH byte 1: PadCnt
        std::copy(payload.begin(), payload.end(), f.data + hl);
        std::fill(f.data + hl + payload.size(), f.data + hl + data, uint8_t(0));
        size_t end = hl + data;
        pkt::store_le32(f.data + end, pkt::icrc(ip, end - pkt::kEthLen, false));
        end += pkt::kIcrcLen;
        if (end < 60) {
            std::fill(f.data + end, f.data + 60, uint8_t(0));
            end = 60;
        }
        f.len = uint32_t(end);
        return send_raw(f);
    }

    // A frame the test wrote itself (bytes as they are: no ICRC or length fixed up).
    bool send_bytes(std::span<const uint8_t> bytes) {
        port::Frame f;
        if (!wire.end(1).alloc(f)) return false;
        if (bytes.size() > f.cap) {
            wire.end(1).free(f);
            return false;
        }
        std::copy(bytes.begin(), bytes.end(), f.data);
        f.len = uint32_t(bytes.size());
        return send_raw(f);
    }

    // Runs the DUT for `ns` of virtual time (polling, jumping to its timers and the wire's
    // deliveries) and returns the frames it sent meanwhile, in order. Frames that do not parse
    // are kept with p.op == nullptr.
    std::vector<RxFrame> run(uint64_t ns = 1'000'000) {
        const uint64_t end = clock.now_ns() + ns;
        std::vector<RxFrame> out;
        for (uint64_t turns = 0; turns < 10'000'000; ++turns) {
            const size_t moved = dut.hca->poll();
            collect(out);
            if (moved) continue;
            uint64_t next = std::min(dut.hca->next_timer_ns(), wire.next_delivery_ns());
            if (next <= clock.now_ns()) continue;
            if (next > end) break;
            clock.set(next);
        }
        clock.set(end);
        dut.hca->poll();
        collect(out);
        return out;
    }

    // One turn of the DUT's loop once the wire has delivered what the peer sent (virtual time
    // moves to the next delivery). Returns what poll() returned; the frames the DUT sent stay on
    // the wire for run() to collect.
    size_t poll_once() {
        const uint64_t next = wire.next_delivery_ns();
        if (next != UINT64_MAX && next > clock.now_ns()) clock.set(next);
        return dut.hca->poll();
    }

    // Takes the DUT's QP through RESET and back to RTS, connected as at construction.
    bool reconnect() {
        QpAttr a;
        a.qp_state = QpState::reset;
        if (!dut.qp.modify(a, qp_attr::state).ok()) return false;
        return tools::connect_qp(dut.qp, cfg, kPeerQpn, pkt::ipv4_mapped_gid(kPeerIp), cfg.sq_psn[0], cfg.sq_psn[1]);
    }

    // Completions on the DUT's CQ so far.
    std::vector<Wc> poll_cq() {
        std::vector<Wc> v;
        Wc wc[16];
        int n;
        while ((n = dut.cq.poll(wc)) > 0) v.insert(v.end(), wc, wc + n);
        return v;
    }

    Status post_recv(uint64_t off, uint32_t len, uint64_t wr_id) {
        Sge sge{dut.mr.addr() + off, len, dut.mr.lkey()};
        RecvWr r;
        r.wr_id = wr_id;
        r.sg_list = &sge;
        r.num_sge = 1;
        const RecvWr* bad = nullptr;
        return dut.qp.post_recv(&r, &bad);
    }

    // A receive WQE with one SGE per (offset, length) pair of the registered buffer.
    Status post_recv_sges(const std::vector<std::pair<uint64_t, uint32_t>>& parts, uint64_t wr_id) {
        std::vector<Sge> sges;
        for (const auto& [off, len] : parts) sges.push_back(Sge{dut.mr.addr() + off, len, dut.mr.lkey()});
        RecvWr r;
        r.wr_id = wr_id;
        r.sg_list = sges.data();
        r.num_sge = int(sges.size());
        const RecvWr* bad = nullptr;
        return dut.qp.post_recv(&r, &bad);
    }

    uint8_t* mem() { return dut.mem.data(); }
    uint64_t addr(uint64_t off = 0) const { return dut.mr.addr() + off; }
    uint32_t rkey() const { return dut.mr.rkey(); }
    uint64_t counter(Counter c) { return dut.dev->counters().get(c); }
    QpState state() { return dut.qp.state(); }

    port::VirtualClock clock;
    port::MemWire wire;
    tools::SimConfig cfg;
    tools::SimPair::Side dut;
    pkt::Headers tmpl;
    bool connected = false;

private:
    bool send_raw(port::Frame& f) {
        if (wire.end(1).tx_burst(&f, 1) == 1) return true;
        wire.end(1).free(f);
        return false;
    }
    void collect(std::vector<RxFrame>& out) {
        port::Frame f[32];
        uint16_t n;
        while ((n = wire.end(1).rx_burst(f, 32)) > 0) {
            for (uint16_t i = 0; i < n; ++i) {
                RxFrame r;
                r.bytes.assign(f[i].data, f[i].data + f[i].len);
                if (pkt::parse({r.bytes.data(), r.bytes.size()}, r.p) != pkt::ParseError::ok) r.p = pkt::Packet{};
                out.push_back(std::move(r));
                wire.end(1).free(f[i]);
            }
        }
    }
};

}  // namespace hcaemu::test

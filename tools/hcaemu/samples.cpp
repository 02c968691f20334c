#include "tools/hcaemu/samples.hpp"

#include "packet/build.hpp"
#include "packet/messages.hpp"
#include "packet/opcode.hpp"

namespace hcaemu::tools {

namespace {

using namespace hcaemu::pkt;

constexpr Mac kMacA = {0x52, 0x54, 0x00, 0x18, 0x00, 0x01};
constexpr Mac kMacB = {0x52, 0x54, 0x00, 0x18, 0x00, 0x02};
constexpr uint32_t kIpA = 0xC6120001;  // 198.18.0.1
constexpr uint32_t kIpB = 0xC6120002;  // 198.18.0.2
constexpr uint32_t kQpA = 0x000011, kQpB = 0x000012;

struct Conv {
    std::vector<SampleFrame> out;
    uint16_t ip_id = 0x1000;

    Headers base(bool a_to_b) {
        Headers h;
        h.eth.src = a_to_b ? kMacA : kMacB;
        h.eth.dst = a_to_b ? kMacB : kMacA;
        h.eth.ethertype = kEthTypeIpv4;
        h.ip4.src = a_to_b ? kIpA : kIpB;
        h.ip4.dst = a_to_b ? kIpB : kIpA;
        h.ip4.id = ip_id++;
        h.udp.sport = udp_sport_for_flow(0, kQpA, kQpB);  // connected RC/UC: same port both ways
        h.bth.dest_qp = a_to_b ? kQpB : kQpA;
        return h;
    }

    void add(Headers h, uint32_t payload_len, Msg what, uint8_t seed = 0, std::string arg = {}) {
        SampleFrame s;
        s.payload.resize(payload_len);
        for (uint32_t i = 0; i < payload_len; ++i) s.payload[i] = uint8_t(seed + i * 7);
        s.bytes.resize(frame_len(opcode_info(h.bth.opcode), h.eth.vlan, h.ipv6, payload_len) + kMinFrameLen);
        size_t len = 0;
        if (build(h, s.payload, s.bytes, len) != BuildError::ok) __builtin_trap();  // fixed inputs
        s.bytes.resize(len);
        s.h = h;
        s.what_msg = what;
        s.what_arg = std::move(arg);
        s.what = caption(s, Lang::en);
        out.push_back(std::move(s));
    }
};

}  // namespace

std::string caption(const SampleFrame& f, pkt::Lang lang) { return pkt::msg(f.what_msg, lang, {f.what_arg}); }

std::vector<SampleFrame> sample_frames() {
    Conv c;
    constexpr uint64_t kVa = 0x00007f3a12340000;
    constexpr uint32_t kRkey = 0x00000e69;
    const uint8_t ack_ok = aeth_syndrome(AethType::ack, kAethCreditInvalid);

    auto req = [&](uint8_t opcode, uint32_t psn, bool ack_req) {
        Headers h = c.base(true);
        h.bth.opcode = opcode;
        h.bth.psn = psn;
        h.bth.ack_req = ack_req;
        return h;
    };
    auto resp = [&](uint8_t opcode, uint32_t psn, uint8_t syndrome, uint32_t msn) {
        Headers h = c.base(false);
        h.bth.opcode = opcode;
        h.bth.psn = psn;
        h.aeth = {syndrome, msn};
        return h;
    };

    // RC SEND: a 2500-byte message at path MTU 1024 (First, Middle, Last), then Only variants.
    c.add(req(op::send_first, 100, false), 1024, Msg::sample_send_first_2500, 1);
    c.add(req(op::send_middle, 101, false), 1024, Msg::sample_send_middle, 2);
    c.add(req(op::send_last, 102, true), 452, Msg::sample_send_last_ackreq, 3);
    c.add(resp(op::acknowledge, 102, ack_ok, 1), 0, Msg::sample_ack_102);
    Headers h = req(op::send_last_imm, 104, true);
    h.imm = 0xdeadbeef;
    c.add(req(op::send_first, 103, false), 1024, Msg::sample_send_first, 4);
    c.add(h, 13, Msg::sample_send_last_imm, 5);
    c.add(req(op::send_only, 105, true), 64, Msg::sample_send_only_64, 6);
    h = req(op::send_only_imm, 106, true);
    h.imm = 0x01020304;
    h.bth.se = true;
    c.add(h, 1, Msg::sample_send_only_imm_se, 7);
    h = req(op::send_only_inv, 107, true);
    h.ieth_rkey = 0x00001234;
    c.add(h, 8, Msg::sample_send_only_inv, 8);
    c.add(req(op::send_first, 108, false), 1024, Msg::sample_send_first, 9);
    h = req(op::send_last_inv, 109, true);
    h.ieth_rkey = 0x00005678;
    c.add(h, 100, Msg::sample_send_last_inv, 10);
    c.add(resp(op::acknowledge, 109, aeth_syndrome(AethType::rnr_nak, 14), 4), 0, Msg::sample_rnr_nak);
    c.add(resp(op::acknowledge, 107, aeth_syndrome(AethType::nak, uint8_t(NakCode::psn_seq_error)), 4), 0, Msg::sample_seq_nak);

    // RC RDMA WRITE.
    h = req(op::write_first, 200, false);
    h.reth = {kVa, kRkey, 2048 + 77};
    c.add(h, 1024, Msg::sample_write_first_reth, 11);
    c.add(req(op::write_middle, 201, false), 1024, Msg::sample_write_middle, 12);
    c.add(req(op::write_last, 202, true), 77, Msg::sample_write_last, 13);
    h = req(op::write_only, 203, true);
    h.reth = {kVa + 4096, kRkey, 0};
    c.add(h, 0, Msg::sample_write_only_0);
    h = req(op::write_first, 204, false);
    h.reth = {kVa, kRkey, 1030};
    c.add(h, 1024, Msg::sample_write_first, 14);
    h = req(op::write_last_imm, 205, true);
    h.imm = 0xcafe0001;
    c.add(h, 6, Msg::sample_write_last_imm, 15);
    h = req(op::write_only_imm, 206, true);
    h.reth = {kVa + 8192, kRkey, 33};
    h.imm = 0xcafe0002;
    c.add(h, 33, Msg::sample_write_only_imm, 16);
    c.add(resp(op::acknowledge, 206, aeth_syndrome(AethType::nak, uint8_t(NakCode::remote_access_error)), 9), 0, Msg::sample_access_nak);

    // RC RDMA READ with a 3-packet response, then a single-packet one.
    h = req(op::read_request, 300, false);
    h.reth = {kVa, kRkey, 2100};
    c.add(h, 0, Msg::sample_read_req_2100);
    c.add(resp(op::read_response_first, 300, ack_ok, 9), 1024, Msg::sample_read_resp_first, 17);
    Headers mid = c.base(false);
    mid.bth.opcode = op::read_response_middle;
    mid.bth.psn = 301;
    c.add(mid, 1024, Msg::sample_read_resp_middle, 18);
    c.add(resp(op::read_response_last, 302, ack_ok, 10), 52, Msg::sample_read_resp_last, 19);
    h = req(op::read_request, 303, false);
    h.reth = {kVa + 64, kRkey, 64};
    c.add(h, 0, Msg::sample_read_req_64);
    c.add(resp(op::read_response_only, 303, ack_ok, 11), 64, Msg::sample_read_resp_only, 20);

    // RC atomics.
    h = req(op::cmp_swap, 304, true);
    h.atomic = {kVa + 8, kRkey, 0x1111111111111111, 0x0};
    c.add(h, 0, Msg::sample_cmp_swap);
    h = resp(op::atomic_acknowledge, 304, ack_ok, 12);
    h.atomic_ack.orig = 0x0;
    c.add(h, 0, Msg::sample_atomic_ack_orig);
    h = req(op::fetch_add, 305, true);
    h.atomic = {kVa + 16, kRkey, 5, 0};
    c.add(h, 0, Msg::sample_fetch_add);
    h = resp(op::atomic_acknowledge, 305, ack_ok, 13);
    h.atomic_ack.orig = 0x0123456789abcdef;
    c.add(h, 0, Msg::sample_atomic_ack, 0);
    h = req(op::flush, 306, true);
    h.feth.raw = 0x11;  // selectivity 1 (memory region), placement type 1 (global visibility)
    h.reth = {kVa, kRkey, 4096};
    c.add(h, 0, Msg::sample_flush);
    h = req(op::atomic_write, 307, true);
    h.reth = {kVa + 24, kRkey, 8};
    c.add(h, 8, Msg::sample_atomic_write, 21);
    c.add(resp(op::acknowledge, 307, ack_ok, 15), 0, Msg::sample_ack_coalesced);

    // UC: the same SEND and WRITE opcodes, no ACKs.
    for (uint8_t o = op::send_first; o <= op::write_only_imm; ++o) {
        h = req(uint8_t(op::uc | o), 400u + o, false);
        const OpcodeInfo& oi = opcode_info(h.bth.opcode);
        if (oi.has(Ext::reth)) h.reth = {kVa, kRkey, oi.pos == Position::only ? 40u : 2000u};
        if (oi.has(Ext::immdt)) h.imm = 0xabc00000u + o;
        c.add(h, oi.pos == Position::first || oi.pos == Position::middle ? 1024 : 40, Msg::sample_uc, uint8_t(30 + o), oi.name);
    }

    // UD SEND with DETH, one with immediate.
    h = req(op::ud | op::send_only, 500, false);
    h.bth.dest_qp = 0x000020;
    h.deth = {0x11111111, 0, kQpA};
    h.udp.sport = udp_sport_for_qpn(kQpA);  // UD has no connection: the QP's own port
    c.add(h, 256, Msg::sample_ud_send, 40);
    h = req(op::ud | op::send_only_imm, 501, false);
    h.bth.dest_qp = 0x000020;
    h.deth = {0x11111111, 0, kQpA};
    h.imm = 0x600d600d;
    h.udp.sport = udp_sport_for_qpn(kQpA);
    c.add(h, 100, Msg::sample_ud_send_imm, 41);

    // CNP: B saw CE marks on A's traffic and notifies A's QP (IBTA Annex A17).
    h = c.base(false);
    h.bth.opcode = op::cnp;
    h.bth.becn = true;
    h.bth.psn = 0;
    h.ip4.tos = 0x02 << 2;  // DSCP as rxe/mlx5 send CNPs is configurable; ECN 0
    c.add(h, 0, Msg::sample_cnp);

    // IPv6 and 802.1Q variants of a SEND Only.
    h = req(op::send_only, 600, true);
    h.ipv6 = true;
    h.eth.ethertype = kEthTypeIpv6;
    h.ip6.src = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    h.ip6.dst = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
    h.ip6.flow_label = 0x12345;
    c.add(h, 64, Msg::sample_ipv6, 50);
    h = req(op::send_only, 601, true);
    h.eth.vlan = true;
    h.eth.vlan_tci = (3u << 13) | 100;  // PCP 3, VID 100
    c.add(h, 64, Msg::sample_vlan, 51);
    return std::move(c.out);
}

}  // namespace hcaemu::tools

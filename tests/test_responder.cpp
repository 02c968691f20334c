// The responder's rules packet by packet: a hand-driven peer (tests/raw_peer.hpp) sends requests
// field by field and the test checks every response the HCA sends, its PSN, syndrome and MSN.
#include <catch2/catch.hpp>

#include <cstring>

#include "tests/raw_peer.hpp"

using namespace hcaemu;
using test::RawPeer;
namespace op = pkt::op;

TEST_CASE("raw peer: a WRITE Only with AckReq is placed and acknowledged with its PSN and MSN 1",
          "[responder]") {
    RawPeer r;
    REQUIRE(r.connected);
    std::vector<uint8_t> data(100);
    for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 7 + 1);
    pkt::Headers h = r.req(op::write_only, r.cfg.sq_psn[1], true);
    h.reth = {r.addr(256), r.rkey(), uint32_t(data.size())};
    REQUIRE(r.send(h, data));
    auto out = r.run();
    REQUIRE(out.size() == 1);
    CHECK(out[0].opcode() == op::acknowledge);
    CHECK(out[0].psn() == r.cfg.sq_psn[1]);
    CHECK(out[0].msn() == 1);
    CHECK((out[0].syndrome() >> 5) == 0);  // an ACK
    CHECK(std::memcmp(r.mem() + 256, data.data(), data.size()) == 0);
}

namespace {

const uint8_t kNakInvalid = pkt::aeth_syndrome(pkt::AethType::nak, uint8_t(pkt::NakCode::invalid_request));
const uint8_t kNakSeq = pkt::aeth_syndrome(pkt::AethType::nak, uint8_t(pkt::NakCode::psn_seq_error));

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = uint8_t(i * 13 + seed);
    return v;
}

bool is_ack(const test::RxFrame& f) { return f.opcode() == op::acknowledge && (f.syndrome() >> 5) == 0; }

// The request must have been refused: one NAK Invalid Request for `psn`, the QP in ERR, counted.
void check_invalid_request(RawPeer& r, const std::vector<test::RxFrame>& out, uint32_t psn) {
    REQUIRE(out.size() == 1);
    CHECK(out[0].opcode() == op::acknowledge);
    CHECK(out[0].syndrome() == kNakInvalid);
    CHECK(out[0].psn() == psn);
    CHECK(r.state() == QpState::err);
    CHECK(r.counter(Counter::resp_invalid_request) == 1);
}

}  // namespace

// Issue 11, defect 1: rxe retransmits SEND(n) then READ(n+1) after a lost READ response; the
// SEND's ACK must not carry the READ's PSN, or rxe's completer retires the READ without its data.
TEST_CASE("a duplicate SEND after a READ is acknowledged with the SEND's PSN and MSN, never the READ's",
          "[responder][duplicate]") {
    RawPeer r;
    const uint32_t p0 = r.cfg.sq_psn[1];
    REQUIRE(r.post_recv(0, 256, 1) == Status::ok);
    const auto msg = pattern(64, 3);
    REQUIRE(r.send(r.req(op::send_only, p0, true), msg));
    auto out = r.run();
    REQUIRE(out.size() == 1);
    CHECK(out[0].psn() == p0);
    pkt::Headers rd = r.req(op::read_request, p0 + 1);
    rd.reth = {r.addr(4096), r.rkey(), 3000};  // three responses: p0 + 1 .. p0 + 3
    REQUIRE(r.send(rd));
    out = r.run();
    REQUIRE(out.size() == 3);
    CHECK(out[2].opcode() == op::read_response_last);
    CHECK(out[2].psn() == p0 + 3);
    REQUIRE(r.send(r.req(op::send_only, p0, true), msg));  // the retransmitted SEND, another burst
    out = r.run();
    REQUIRE(out.size() == 1);
    CHECK(is_ack(out[0]));
    CHECK(out[0].psn() == p0);  // not p0 + 3, the READ's last response
    CHECK(out[0].msn() == 1);
    CHECK(r.counter(Counter::duplicate_request) == 1);
    CHECK(r.poll_cq().size() == 1);  // executed once
}

// Defect 2: hcaemu has no key a peer may invalidate (no memory windows, no fast-register MRs):
// fail as rxe does for a user MR, and never report IBV_WC_WITH_INV for a key that stays valid.
TEST_CASE("SEND with Invalidate: REM_INV_REQ_ERR, NAK Invalid Request, QP to ERR, the key still valid",
          "[responder][invalidate]") {
    RawPeer r;
    const uint32_t p0 = r.cfg.sq_psn[1];
    REQUIRE(r.post_recv(0, 256, 7) == Status::ok);
    pkt::Headers h = r.req(op::send_only_inv, p0, true);
    h.ieth_rkey = r.rkey();
    REQUIRE(r.send(h, pattern(16, 1)));
    auto out = r.run();
    check_invalid_request(r, out, p0);
    auto wcs = r.poll_cq();
    REQUIRE(wcs.size() == 1);
    CHECK(wcs[0].wr_id == 7);
    CHECK(wcs[0].status == WcStatus::rem_inv_req_err);
    CHECK((wcs[0].wc_flags & wc_flag::with_inv) == 0);
    // the MR lives on: the QP reconnected, a WRITE through the same R_Key is placed
    REQUIRE(r.reconnect());
    const auto data = pattern(40, 9);
    pkt::Headers w = r.req(op::write_only, p0, true);
    w.reth = {r.addr(1024), r.rkey(), uint32_t(data.size())};
    REQUIRE(r.send(w, data));
    out = r.run();
    REQUIRE(out.size() == 1);
    CHECK(is_ack(out[0]));
    CHECK(out[0].psn() == p0);
    CHECK(std::memcmp(r.mem() + 1024, data.data(), data.size()) == 0);
}

// Defect 3: responses leave in PSN order, each with the MSN of its own PSN.
TEST_CASE("one burst: the coalesced ACK of a WRITE leaves before the READ response, atomic ACK or NAK after it",
          "[responder][order]") {
    RawPeer r;
    const uint32_t p0 = r.cfg.sq_psn[1];
    const auto data = pattern(32, 5);
    pkt::Headers w = r.req(op::write_only, p0, true);
    w.reth = {r.addr(512), r.rkey(), uint32_t(data.size())};
    REQUIRE(r.send(w, data));
    SECTION("READ") {
        pkt::Headers rd = r.req(op::read_request, p0 + 1);
        rd.reth = {r.addr(512), r.rkey(), 32};
        REQUIRE(r.send(rd));
        auto out = r.run();
        REQUIRE(out.size() == 2);
        CHECK(is_ack(out[0]));
        CHECK(out[0].psn() == p0);
        CHECK(out[0].msn() == 1);
        CHECK(out[1].opcode() == op::read_response_only);
        CHECK(out[1].psn() == p0 + 1);
        CHECK(out[1].msn() == 2);
        CHECK(out[1].payload() == data);  // the WRITE was placed before the READ read
    }
    SECTION("atomic") {
        const uint64_t v = 41;
        std::memcpy(r.mem() + 2048, &v, 8);
        pkt::Headers fa = r.req(op::fetch_add, p0 + 1);
        fa.atomic = {r.addr(2048), r.rkey(), 1, 0};
        REQUIRE(r.send(fa));
        auto out = r.run();
        REQUIRE(out.size() == 2);
        CHECK(is_ack(out[0]));
        CHECK(out[0].psn() == p0);
        CHECK(out[0].msn() == 1);
        CHECK(out[1].opcode() == op::atomic_acknowledge);
        CHECK(out[1].psn() == p0 + 1);
        CHECK(out[1].msn() == 2);
        CHECK(out[1].p.h.atomic_ack.orig == 41);
    }
    SECTION("out of sequence") {
        REQUIRE(r.send(r.req(op::send_only, p0 + 5), pattern(8, 1)));
        auto out = r.run();
        REQUIRE(out.size() == 2);
        CHECK(is_ack(out[0]));
        CHECK(out[0].psn() == p0);
        CHECK(out[0].msn() == 1);
        CHECK(out[1].syndrome() == kNakSeq);
        CHECK(out[1].psn() == p0 + 1);
        CHECK(r.counter(Counter::out_of_sequence) == 1);
    }
}

// Defect 4: rxe check_length and check_rkey's length rules, NAK Invalid Request.
TEST_CASE("length rules: NAK Invalid Request, QP to ERR, counted", "[responder][length]") {
    RawPeer r;  // path MTU 1024
    const uint32_t p0 = r.cfg.sq_psn[1];
    REQUIRE(r.post_recv(0, 8192, 1) == Status::ok);
    SECTION("a WRITE Only larger than the path MTU") {
        const auto data = pattern(1028, 1);
        pkt::Headers w = r.req(op::write_only, p0);
        w.reth = {r.addr(0), r.rkey(), uint32_t(data.size())};
        REQUIRE(r.send(w, data));
        check_invalid_request(r, r.run(), p0);
        CHECK(r.mem()[0] == 0);  // nothing placed
    }
    SECTION("a SEND Last with no payload") {
        REQUIRE(r.send(r.req(op::send_first, p0), pattern(1024, 2)));
        REQUIRE(r.send(r.req(op::send_last, p0 + 1)));
        check_invalid_request(r, r.run(), p0 + 1);
    }
    SECTION("payload and pad not a multiple of 4 bytes") {
        REQUIRE(r.send_padded(r.req(op::send_only, p0), pattern(15, 3), 0));
        check_invalid_request(r, r.run(), p0);
    }
    SECTION("a pad in a packet that is not its message's last") {
        REQUIRE(r.send_padded(r.req(op::send_first, p0), pattern(1024, 3), 3));
        auto out = r.run();
        REQUIRE(r.counter(Counter::rcvd_pkts) == 1);  // parsed and taken: the transport refused it
        check_invalid_request(r, out, p0);
    }
    SECTION("a WRITE's RETH DMA length above 2^31") {
        pkt::Headers w = r.req(op::write_first, p0);
        w.reth = {r.addr(0), r.rkey(), 0x80000001u};
        REQUIRE(r.send(w, pattern(1024, 4)));
        check_invalid_request(r, r.run(), p0);
        CHECK(r.counter(Counter::resp_remote_access_errors) == 0);
    }
}

// Defect 5: (len + mtu - 1) / mtu in 32 bits made ~16 M empty responses of this READ.
TEST_CASE("a READ of 0xFFFFFFFF bytes: NAK Invalid Request, no response", "[responder][length]") {
    RawPeer r;
    const uint32_t p0 = r.cfg.sq_psn[1];
    pkt::Headers rd = r.req(op::read_request, p0);
    rd.reth = {r.addr(0), r.rkey(), 0xFFFFFFFFu};
    REQUIRE(r.send(rd));
    check_invalid_request(r, r.run(), p0);
    CHECK(r.counter(Counter::resp_remote_access_errors) == 0);
}

// Defect 6: no responder resources, no READ or atomic (rxe: ERR_TOO_MANY_RDMA_ATM_REQ, class C).
TEST_CASE("max_dest_rd_atomic 0: a READ or an atomic gets NAK Invalid Request", "[responder][resources]") {
    tools::SimConfig c;
    c.max_rd_atomic = 0;  // the DUT's max_dest_rd_atomic (and max_rd_atomic)
    RawPeer r(c);
    REQUIRE(r.connected);
    const uint32_t p0 = r.cfg.sq_psn[1];
    pkt::Headers h;
    SECTION("READ") {
        h = r.req(op::read_request, p0);
        h.reth = {r.addr(0), r.rkey(), 64};
    }
    SECTION("atomic") {
        h = r.req(op::cmp_swap, p0);
        h.atomic = {r.addr(0), r.rkey(), 1, 0};
    }
    REQUIRE(r.send(h));
    check_invalid_request(r, r.run(), p0);
    CHECK(r.counter(Counter::rx_read_requests) + r.counter(Counter::rx_atomic_requests) == 0);
    uint64_t v = 0;
    std::memcpy(&v, r.mem(), 8);
    CHECK(v == 0);  // the compare-swap (0 == 0) never ran
}

// Defect 9: UC has no duplicates; any First or Only starts a message (rxe check_psn, UC).
TEST_CASE("UC: an Only with a PSN behind the expected one starts a new message and is delivered", "[responder][uc]") {
    tools::SimConfig c;
    c.type = QpType::uc;
    RawPeer r(c);
    REQUIRE(r.connected);
    const uint32_t p0 = r.cfg.sq_psn[1];
    REQUIRE(r.post_recv(0, 256, 1) == Status::ok);
    REQUIRE(r.post_recv(256, 256, 2) == Status::ok);
    const auto a = pattern(20, 1), b = pattern(24, 2);
    REQUIRE(r.send(r.req(op::uc | op::send_only, p0), a));
    REQUIRE(r.send(r.req(op::uc | op::send_only, p0 - 16), b));  // "behind": the peer restarted its PSNs
    CHECK(r.run().empty());  // UC: no ACKs
    auto wcs = r.poll_cq();
    REQUIRE(wcs.size() == 2);
    CHECK(wcs[1].wr_id == 2);
    CHECK(wcs[1].status == WcStatus::success);
    CHECK(wcs[1].byte_len == b.size());
    CHECK(std::memcmp(r.mem() + 256, b.data(), b.size()) == 0);
    CHECK(r.counter(Counter::duplicate_request) == 0);
}

// Defect 15: a message stays within the port's max_msg_sz.
TEST_CASE("a SEND whose total exceeds max_msg_sz: NAK Invalid Request at the packet past it", "[responder][length]") {
    tools::SimConfig c;
    c.max_msg_sz = 4096;
    RawPeer r(c);
    REQUIRE(r.connected);
    const uint32_t p0 = r.cfg.sq_psn[1];
    // A receive of max_msg_sz, the most post_recv takes (as rxe's). The message overruns it too,
    // but the length check comes first (rxe's order): the WQE is flushed, not failed LOC_LEN_ERR.
    CHECK(r.post_recv(0, 4097, 1) == Status::invalid_argument);
    REQUIRE(r.post_recv(0, 4096, 1) == Status::ok);
    REQUIRE(r.send(r.req(op::send_first, p0), pattern(1024, 1)));
    for (uint32_t i = 1; i < 4; ++i) REQUIRE(r.send(r.req(op::send_middle, p0 + i), pattern(1024, uint8_t(i))));
    REQUIRE(r.send(r.req(op::send_last, p0 + 4, true), pattern(16, 9)));  // 4112 bytes
    check_invalid_request(r, r.run(), p0 + 4);
    auto wcs = r.poll_cq();
    REQUIRE(wcs.size() == 1);
    CHECK(wcs[0].status == WcStatus::wr_flush_err);
}

// Defect 15: the receive SGEs were cut to 32 whatever max_sge allowed.
TEST_CASE("a receive WQE of 40 SGEs gets its bytes in every SGE", "[responder][sge]") {
    tools::SimConfig c;
    c.max_sge = 40;
    RawPeer r(c);
    REQUIRE(r.connected);
    std::vector<std::pair<uint64_t, uint32_t>> parts;
    for (uint64_t i = 0; i < 40; ++i) parts.push_back({i * 64, 8});  // 8 bytes every 64
    REQUIRE(r.post_recv_sges(parts, 5) == Status::ok);
    const auto msg = pattern(320, 7);
    REQUIRE(r.send(r.req(op::send_only, r.cfg.sq_psn[1], true), msg));
    auto out = r.run();
    REQUIRE(out.size() == 1);
    CHECK(is_ack(out[0]));
    auto wcs = r.poll_cq();
    REQUIRE(wcs.size() == 1);
    CHECK(wcs[0].status == WcStatus::success);
    CHECK(wcs[0].byte_len == 320);
    for (size_t i = 0; i < 40; ++i) {
        INFO("SGE " << i);
        CHECK(std::memcmp(r.mem() + i * 64, msg.data() + i * 8, 8) == 0);
    }
}

// Defect 16: READ responses go out in the QP's turn under the tx budget, and requests behind
// them execute meanwhile, their ACK after the responses.
TEST_CASE("a READ of 16 packets then a WRITE in one burst: the WRITE placed, at most tx_budget responses a turn, PSN order",
          "[responder][budget]") {
    tools::SimConfig c;
    c.hca.tx_budget = 4;
    RawPeer r(c);
    REQUIRE(r.connected);
    const uint32_t p0 = r.cfg.sq_psn[1];
    const auto src = pattern(16 * 1024, 11);
    std::memcpy(r.mem() + 65536, src.data(), src.size());
    pkt::Headers rd = r.req(op::read_request, p0);
    rd.reth = {r.addr(65536), r.rkey(), uint32_t(src.size())};
    REQUIRE(r.send(rd));
    const auto data = pattern(48, 4);
    pkt::Headers w = r.req(op::write_only, p0 + 16, true);
    w.reth = {r.addr(0), r.rkey(), uint32_t(data.size())};
    REQUIRE(r.send(w, data));
    const uint64_t sent0 = r.counter(Counter::sent_pkts);
    r.poll_once();
    CHECK(r.counter(Counter::sent_pkts) - sent0 <= 4);
    CHECK(r.counter(Counter::rx_write_requests) == 1);
    CHECK(std::memcmp(r.mem(), data.data(), data.size()) == 0);  // executed in the same turn
    auto out = r.run();
    REQUIRE(out.size() == 17);
    for (uint32_t i = 0; i < 16; ++i) {
        INFO("response " << i);
        CHECK(out[i].opcode() == (i == 0 ? op::read_response_first : i == 15 ? op::read_response_last : op::read_response_middle));
        CHECK(out[i].psn() == p0 + i);
        CHECK(out[i].payload() == std::vector<uint8_t>(src.begin() + i * 1024, src.begin() + (i + 1) * 1024));
    }
    CHECK(is_ack(out[16]));
    CHECK(out[16].psn() == p0 + 16);
    CHECK(out[16].msn() == 2);
    CHECK(r.counter(Counter::rx_drop_no_qp) == 0);
}

// Responses in PSN order with responses still due: a NAK decided while READ responses wait for
// their turn leaves after them, never before.
TEST_CASE("a sequence error behind a 16-packet READ: the NAK leaves after the READ's last response", "[responder][order]") {
    tools::SimConfig c;
    c.hca.tx_budget = 4;
    RawPeer r(c);
    REQUIRE(r.connected);
    const uint32_t p0 = r.cfg.sq_psn[1];
    pkt::Headers rd = r.req(op::read_request, p0);
    rd.reth = {r.addr(0), r.rkey(), 16 * 1024};
    REQUIRE(r.send(rd));
    REQUIRE(r.send(r.req(op::send_only, p0 + 20), pattern(8, 1)));  // p0 + 16 .. p0 + 19 lost
    auto out = r.run();
    REQUIRE(out.size() == 17);
    for (uint32_t i = 0; i < 16; ++i) CHECK(out[i].psn() == p0 + i);
    CHECK(out[15].opcode() == op::read_response_last);
    CHECK(out[16].opcode() == op::acknowledge);
    CHECK(out[16].syndrome() == kNakSeq);
    CHECK(out[16].psn() == p0 + 16);
    CHECK(out[16].msn() == 1);
}

namespace {

std::vector<uint8_t> frame_of(const pkt::Headers& h, const std::vector<uint8_t>& pl) {
    std::vector<uint8_t> f(2048);
    size_t len = 0;
    REQUIRE(pkt::build(h, pl, f, len) == pkt::BuildError::ok);
    f.resize(len);
    return f;
}

pkt::IcrcFlow flow_of(const std::vector<uint8_t>& f, bool v6 = false) {
    pkt::IcrcFlow x;
    pkt::icrc_flow_init(x, f.data() + pkt::kEthLen, v6);
    return x;
}

}  // namespace

TEST_CASE("the ICRC from the QP's learnt header: a repeated header checked from it, a changed one in full and learnt",
          "[responder][icrc]") {
    RawPeer r;
    REQUIRE(r.connected);
    const pkt::IcrcFlow* fl = r.dut.hca->rx_flow(r.dut.qp.qpn());
    REQUIRE(fl);
    CHECK(!fl->valid);
    const uint64_t& bad_icrc = r.dut.dev->counters().rx_err[size_t(pkt::ParseError::bad_icrc)];
    const auto from_flow = [&] { return r.counter(Counter::rx_icrc_flow); };
    uint32_t psn = r.cfg.sq_psn[1];
    uint64_t off = 0;
    // A WRITE Only of 8 bytes at the next offset; its frame as built (valid ICRC).
    const auto write = [&](pkt::Headers h) {
        h.bth.psn = psn;
        h.reth = {r.addr(off), r.rkey(), 8};
        return frame_of(h, pattern(8, uint8_t(psn)));
    };
    const auto acked = [&](const std::vector<uint8_t>& f) {
        REQUIRE(r.send_bytes(f));
        const auto out = r.run();
        REQUIRE(out.size() == 1);
        CHECK(is_ack(out[0]));
        CHECK(out[0].psn() == psn);
        CHECK(std::memcmp(r.mem() + off, f.data() + f.size() - 12, 8) == 0);  // payload, before the ICRC
        ++psn;
        off += 8;
    };
    const auto refused = [&](std::vector<uint8_t> f, uint64_t want_bad) {
        f[f.size() - 5] ^= 0x40;  // the payload's last byte: the ICRC no longer matches
        REQUIRE(r.send_bytes(f));
        CHECK(r.run().empty());
        CHECK(bad_icrc == want_bad);
        CHECK(r.mem()[off + 7] == 0);  // nothing placed
    };

    const pkt::Headers h = r.req(op::write_only, psn, true);
    auto f1 = write(h);
    acked(f1);
    REQUIRE(fl->valid);
    CHECK(fl->state == flow_of(f1).state);  // learnt from the first packet
    CHECK(fl->fixed == flow_of(f1).fixed);
    CHECK(from_flow() == 0);  // checked in full: nothing learnt yet

    // The same header, a corrupt payload: checked from the learnt header, refused.
    refused(write(h), 1);
    CHECK(from_flow() == 1);
    // Fields the ICRC masks changed (TTL, ToS, not CE): the header still matches, nothing learnt.
    pkt::Headers masked = h;
    masked.ip4.ttl = 7;
    masked.ip4.tos = 0x04;
    const auto f2 = write(masked);
    CHECK(pkt::icrc_flow_matches(*fl, f2.data() + pkt::kEthLen));
    acked(f2);
    CHECK(fl->state == flow_of(f1).state);
    CHECK(from_flow() == 2);

    // A new UDP source port: checked in full, accepted, learnt; then a corrupt one is refused.
    pkt::Headers moved = h;
    moved.udp.sport = 0xC456;
    const auto f3 = write(moved);
    CHECK(!pkt::icrc_flow_matches(*fl, f3.data() + pkt::kEthLen));
    acked(f3);
    CHECK(from_flow() == 2);
    CHECK(fl->state == flow_of(f3).state);
    CHECK(fl->fixed == flow_of(f3).fixed);
    refused(write(moved), 2);
    CHECK(from_flow() == 3);

    // From another host with a valid ICRC: dropped by address, not learnt.
    pkt::Headers other = moved;
    other.ip4.src = RawPeer::kPeerIp + 1;
    REQUIRE(r.send_bytes(write(other)));
    CHECK(r.run().empty());
    CHECK(r.counter(Counter::rx_drop_addr) == 1);
    CHECK(fl->fixed == flow_of(f3).fixed);
    CHECK(bad_icrc == 2);
    CHECK(from_flow() == 3);  // checked in full: its header is not the learnt one
}

TEST_CASE("UD: the ICRC flow is its first sender's until 16 packets in a row came from others", "[responder][icrc]") {
    tools::SimConfig cfg;
    cfg.type = QpType::ud;
    RawPeer r(cfg);
    REQUIRE(r.connected);
    const pkt::IcrcFlow* fl = r.dut.hca->rx_flow(r.dut.qp.qpn());
    REQUIRE(fl);
    const auto from_flow = [&] { return r.counter(Counter::rx_icrc_flow); };
    uint64_t n = 0;
    // A SEND Only of 8 bytes from `src`: placed in its receive WQE (after the 40-byte GRH).
    const auto datagram = [&](uint32_t src) {
        REQUIRE(r.post_recv(n * 64, 48, n) == Status::ok);
        pkt::Headers h = r.req(op::ud | op::send_only, uint32_t(n));
        h.ip4.src = src;
        const auto data = pattern(8, uint8_t(n + 1));
        auto f = frame_of(h, data);
        REQUIRE(r.send_bytes(f));
        r.run();
        const auto wc = r.poll_cq();
        REQUIRE(wc.size() == 1);
        CHECK(wc[0].wr_id == n);
        CHECK(wc[0].status == WcStatus::success);
        CHECK(std::memcmp(r.mem() + n * 64 + 40, data.data(), 8) == 0);
        ++n;
        return f;
    };
    const uint32_t a = RawPeer::kPeerIp, b = RawPeer::kPeerIp + 1;
    const auto fa = datagram(a);
    REQUIRE(fl->valid);
    CHECK(fl->fixed == flow_of(fa).fixed);
    CHECK(from_flow() == 0);
    // Senders taking turns: the first one's header stays, its packets are checked from it.
    for (int i = 0; i < 5; ++i) {
        datagram(b);
        datagram(a);
    }
    CHECK(fl->fixed == flow_of(fa).fixed);
    CHECK(from_flow() == 5);
    // The first sender gone: 15 packets in a row from another keep its header, the 16th replaces it.
    std::vector<uint8_t> fb;
    for (int i = 0; i < 15; ++i) fb = datagram(b);
    CHECK(fl->fixed == flow_of(fa).fixed);
    CHECK(from_flow() == 5);
    datagram(b);
    CHECK(fl->fixed == flow_of(fb).fixed);
    CHECK(fl->state == flow_of(fb).state);
    datagram(b);
    CHECK(from_flow() == 6);
}

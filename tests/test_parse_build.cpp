// Parse and build: round trips of every opcode, each typed parse error from a crafted frame,
// every single-bit flip and every truncation of real frames, build errors.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "packet/build.hpp"
#include "packet/bytes.hpp"
#include "packet/icrc.hpp"
#include "packet/parse.hpp"
#include "tools/hcaemu/samples.hpp"

using namespace hcaemu::pkt;

namespace {

Headers random_headers(std::mt19937_64& rng, uint8_t opcode, bool v6, bool vlan) {
    Headers h;
    for (auto& b : h.eth.dst) b = uint8_t(rng());
    for (auto& b : h.eth.src) b = uint8_t(rng());
    h.eth.vlan = vlan;
    h.eth.vlan_tci = vlan ? uint16_t(rng()) : 0;
    h.eth.ethertype = v6 ? kEthTypeIpv6 : kEthTypeIpv4;
    h.ipv6 = v6;
    if (v6) {
        h.ip6.traffic_class = uint8_t(rng());
        h.ip6.flow_label = uint32_t(rng()) & 0xFFFFF;
        h.ip6.hop_limit = uint8_t(rng());
        for (auto& b : h.ip6.src) b = uint8_t(rng());
        for (auto& b : h.ip6.dst) b = uint8_t(rng());
    } else {
        h.ip4.tos = uint8_t(rng());
        h.ip4.id = uint16_t(rng());
        h.ip4.frag = rng() & 1 ? 0x4000 : 0;
        h.ip4.ttl = uint8_t(rng());
        h.ip4.src = uint32_t(rng());
        h.ip4.dst = uint32_t(rng());
    }
    h.udp.sport = uint16_t(rng());
    Bth& b = h.bth;
    b.opcode = opcode;
    b.se = rng() & 1;
    b.mig = rng() & 1;
    b.pkey = uint16_t(rng());
    b.fecn = rng() & 1;
    b.becn = rng() & 1;
    b.resv6 = uint8_t(rng() & 0x3F);
    b.dest_qp = uint32_t(rng()) & 0xFFFFFF;
    b.ack_req = rng() & 1;
    b.resv7 = uint8_t(rng() & 0x7F);
    b.psn = uint32_t(rng()) & 0xFFFFFF;
    const OpcodeInfo& oi = opcode_info(opcode);
    if (oi.has(Ext::deth)) h.deth = {uint32_t(rng()), uint8_t(rng()), uint32_t(rng()) & 0xFFFFFF};
    if (oi.has(Ext::feth)) h.feth.raw = uint32_t(rng());
    if (oi.has(Ext::reth)) h.reth = {rng(), uint32_t(rng()), uint32_t(rng())};
    if (oi.has(Ext::atomic_eth)) h.atomic = {rng(), uint32_t(rng()), rng(), rng()};
    if (oi.has(Ext::aeth)) h.aeth = {uint8_t(rng()), uint32_t(rng()) & 0xFFFFFF};
    if (oi.has(Ext::atomic_ack_eth)) h.atomic_ack.orig = rng();
    if (oi.has(Ext::immdt)) h.imm = uint32_t(rng());
    if (oi.has(Ext::ieth)) h.ieth_rkey = uint32_t(rng());
    if (oi.has(Ext::cnp))
        for (auto& x : h.cnp_reserved) x = uint8_t(rng());
    return h;
}

// The fields parse() fills in that build() computes; copied so that whole structs compare.
void adopt_computed(Headers& want, const Headers& got) {
    want.ip4.total_len = got.ip4.total_len;
    want.ip4.checksum = got.ip4.checksum;
    want.ip6.payload_len = got.ip6.payload_len;
    want.udp.length = got.udp.length;
    want.udp.checksum = got.udp.checksum;
    want.bth.pad_cnt = got.bth.pad_cnt;
}

// Headers for fields an opcode does not carry stay default in `want`; clear them in `got` too.
Headers only_carried(Headers h, const OpcodeInfo& oi) {
    if (!oi.has(Ext::deth)) h.deth = {};
    if (!oi.has(Ext::feth)) h.feth = {};
    if (!oi.has(Ext::reth)) h.reth = {};
    if (!oi.has(Ext::atomic_eth)) h.atomic = {};
    if (!oi.has(Ext::aeth)) h.aeth = {};
    if (!oi.has(Ext::atomic_ack_eth)) h.atomic_ack = {};
    if (!oi.has(Ext::immdt)) h.imm = 0;
    if (!oi.has(Ext::ieth)) h.ieth_rkey = 0;
    if (!oi.has(Ext::cnp)) h.cnp_reserved = {};
    if (h.ipv6) h.ip4 = {};
    else h.ip6 = {};
    return h;
}

std::vector<uint8_t> make(const Headers& h, uint32_t payload_len, const BuildOptions& o = {}) {
    std::vector<uint8_t> pl(payload_len);
    for (uint32_t i = 0; i < payload_len; ++i) pl[i] = uint8_t(i * 13 + 1);
    std::vector<uint8_t> f(payload_len + 200);
    size_t len = 0;
    REQUIRE(build(h, pl, f, len, o) == BuildError::ok);
    f.resize(len);
    return f;
}

ParseError parse_err(const std::vector<uint8_t>& f) {
    Packet p;
    return parse(f, p);
}

void fix_ip4_csum(std::vector<uint8_t>& f, size_t l3 = kEthLen) {
    store_be16(&f[l3 + 10], 0);
    store_be16(&f[l3 + 10], ipv4_header_checksum(&f[l3]));
}

void fix_icrc(std::vector<uint8_t>& f, size_t end, bool v6 = false, size_t l3 = kEthLen) {
    store_le32(&f[end - 4], icrc(&f[l3], end - 4 - l3, v6));
}

Headers simple(uint8_t opcode) {
    Headers h;
    h.eth.ethertype = kEthTypeIpv4;
    h.ip4.src = 0xC6120001;
    h.ip4.dst = 0xC6120002;
    h.bth.opcode = opcode;
    h.bth.dest_qp = 0x12;
    h.bth.psn = 7;
    return h;
}

}  // namespace

TEST_CASE("every opcode round-trips through build and parse", "[build][parse]") {
    std::mt19937_64 rng(7);
    size_t n = 0;
    for (int c = 0; c < 256; ++c) {
        const OpcodeInfo& oi = opcode_info(uint8_t(c));
        if (!oi.valid()) continue;
        for (int variant = 0; variant < 4; ++variant) {
            const bool v6 = variant & 1, vlan = variant & 2;
            for (uint32_t plen : {0u, 1u, 2u, 3u, 4u, 5u, 255u, 1023u, 1024u, 4096u, 9000u}) {
                if (!oi.payload && plen) continue;
                for (bool csum : {false, true}) {
                    Headers h = random_headers(rng, uint8_t(c), v6, vlan);
                    BuildOptions bo;
                    bo.udp_checksum = csum ? UdpCsum::compute : UdpCsum::zero;
                    const auto f = make(h, plen, bo);
                    INFO(oi.name << " v6 " << v6 << " vlan " << vlan << " payload " << plen << " csum " << csum);
                    const size_t want_len = frame_len(oi, vlan, v6, plen);
                    REQUIRE(f.size() == std::max(want_len, kMinFrameLen));
                    Packet p;
                    REQUIRE(parse(f, p) == ParseError::ok);
                    CHECK(p.op == &oi);
                    CHECK(p.len == want_len);
                    CHECK(p.payload_len == plen);
                    CHECK(p.h.bth.pad_cnt == pad_for(plen));
                    CHECK(p.payload_off == header_len(oi, vlan, v6));
                    for (uint32_t i = 0; i < plen; ++i) REQUIRE(p.payload()[i] == uint8_t(i * 13 + 1));
                    for (size_t i = 0; i < p.h.bth.pad_cnt; ++i) CHECK(f[p.payload_off + plen + i] == 0);
                    CHECK((p.h.udp.checksum != 0) == csum);
                    adopt_computed(h, p.h);
                    CHECK(only_carried(p.h, oi) == only_carried(h, oi));
                    ++n;
                }
            }
        }
    }
    CHECK(n > 1000);
}

TEST_CASE("the UDP checksum is 0 over IPv4 and computed over IPv6 by default", "[build]") {
    Headers h = simple(op::send_only);
    auto f4 = make(h, 8);
    CHECK(load_be16(&f4[kEthLen + kIpv4Len + 6]) == 0);
    h.ipv6 = true;
    auto f6 = make(h, 8);
    CHECK(load_be16(&f6[kEthLen + kIpv6Len + 6]) != 0);
    CHECK(udp_checksum(&f6[kEthLen], true) == 0);  // verifies
    Packet p;
    CHECK(parse(f6, p) == ParseError::ok);
    BuildOptions bo;
    bo.udp_checksum = UdpCsum::zero;
    CHECK(load_be16(&make(h, 8, bo)[kEthLen + kIpv6Len + 6]) == 0);
}

TEST_CASE("short frames are padded to the Ethernet minimum and parse ignores the padding", "[build][parse]") {
    const auto f = make(simple(op::send_only), 0);  // 14 + 20 + 8 + 12 + 4 = 58 bytes
    REQUIRE(f.size() == 60);
    CHECK(f[58] == 0);
    CHECK(f[59] == 0);
    Packet p;
    REQUIRE(parse(f, p) == ParseError::ok);
    CHECK(p.len == 58);
    CHECK(p.payload_len == 0);
    BuildOptions bo;
    bo.pad_to_min = false;
    CHECK(make(simple(op::send_only), 0, bo).size() == 58);
}

TEST_CASE("each parse error comes from its own defect", "[parse]") {
    const auto good = make(simple(op::send_only), 17);  // 3 pad bytes
    REQUIRE(parse_err(good) == ParseError::ok);
    const size_t l3 = kEthLen, l4 = l3 + kIpv4Len, bth = l4 + kUdpLen;

    SECTION("truncated_eth") {
        CHECK(parse_err(std::vector<uint8_t>(good.begin(), good.begin() + 13)) == ParseError::truncated_eth);
        Headers h = simple(op::send_only);
        h.eth.vlan = true;
        const auto v = make(h, 4);
        CHECK(parse_err(std::vector<uint8_t>(v.begin(), v.begin() + 17)) == ParseError::truncated_eth);
        CHECK(parse_err(v) == ParseError::ok);
    }
    SECTION("not_ip") {
        auto f = good;
        store_be16(&f[12], kEthTypeArp);
        CHECK(parse_err(f) == ParseError::not_ip);
    }
    SECTION("truncated_ip") {
        CHECK(parse_err(std::vector<uint8_t>(good.begin(), good.begin() + l3 + 19)) == ParseError::truncated_ip);
    }
    SECTION("bad_ip_version") {
        auto f = good;
        f[l3] = 0x65;
        CHECK(parse_err(f) == ParseError::bad_ip_version);
    }
    SECTION("bad_ihl: options are rejected") {
        auto f = good;
        f[l3] = 0x46;
        fix_ip4_csum(f);
        CHECK(parse_err(f) == ParseError::bad_ihl);
    }
    SECTION("bad_ip_length") {
        auto f = good;
        store_be16(&f[l3 + 2], uint16_t(f.size()));  // longer than the frame
        fix_ip4_csum(f);
        CHECK(parse_err(f) == ParseError::bad_ip_length);
        store_be16(&f[l3 + 2], 19);
        fix_ip4_csum(f);
        CHECK(parse_err(f) == ParseError::bad_ip_length);
        store_be16(&f[l3 + 2], 24);  // room for the IP header but not for UDP
        fix_ip4_csum(f);
        CHECK(parse_err(f) == ParseError::bad_ip_length);
    }
    SECTION("bad_ipv4_checksum") {
        auto f = good;
        f[l3 + 4] ^= 1;  // the ID
        CHECK(parse_err(f) == ParseError::bad_ipv4_checksum);
    }
    SECTION("ip_fragment") {
        auto f = good;
        f[l3 + 6] |= 0x20;  // MF
        fix_ip4_csum(f);
        CHECK(parse_err(f) == ParseError::ip_fragment);
        f = good;
        store_be16(&f[l3 + 6], 0x0001);  // an offset
        fix_ip4_csum(f);
        CHECK(parse_err(f) == ParseError::ip_fragment);
    }
    SECTION("not_udp") {
        auto f = good;
        f[l3 + 9] = 6;
        fix_ip4_csum(f);
        CHECK(parse_err(f) == ParseError::not_udp);
        Headers h = simple(op::send_only);
        h.ipv6 = true;
        auto g = make(h, 4);
        g[l3 + 6] = 0;  // hop-by-hop options header
        CHECK(parse_err(g) == ParseError::not_udp);
    }
    SECTION("bad_udp_length") {
        auto f = good;
        store_be16(&f[l4 + 4], uint16_t(load_be16(&f[l4 + 4]) - 4));
        CHECK(parse_err(f) == ParseError::bad_udp_length);
    }
    SECTION("not_roce_port") {
        auto f = good;
        store_be16(&f[l4 + 2], 4792);
        CHECK(parse_err(f) == ParseError::not_roce_port);
    }
    SECTION("bad_udp_checksum, and a right one is accepted") {
        auto f = good;
        store_be16(&f[l4 + 6], 0x1234);
        CHECK(parse_err(f) == ParseError::bad_udp_checksum);
        BuildOptions bo;
        bo.udp_checksum = UdpCsum::compute;
        auto g = make(simple(op::send_only), 17, bo);
        CHECK(load_be16(&g[l4 + 6]) != 0);
        CHECK(parse_err(g) == ParseError::ok);
        g[bth + 12] ^= 0x10;  // payload: UDP checksum first, before the ICRC
        CHECK(parse_err(g) == ParseError::bad_udp_checksum);
        ParseOptions po;
        po.verify_udp_checksum = false;
        Packet p;
        CHECK(parse(g, p, po) == ParseError::bad_icrc);
    }
    SECTION("truncated_bth") {
        auto f = good;
        store_be16(&f[l3 + 2], uint16_t(kIpv4Len + kUdpLen + 11));
        fix_ip4_csum(f);
        store_be16(&f[l4 + 4], uint16_t(kUdpLen + 11));
        CHECK(parse_err(f) == ParseError::truncated_bth);
    }
    SECTION("bad_tver") {
        auto f = good;
        f[bth + 1] |= 0x01;
        CHECK(parse_err(f) == ParseError::bad_tver);
    }
    SECTION("unknown_opcode") {
        auto f = good;
        f[bth] = 0x15;
        CHECK(parse_err(f) == ParseError::unknown_opcode);
        f[bth] = 0x40;  // RD is not supported
        CHECK(parse_err(f) == ParseError::unknown_opcode);
    }
    SECTION("truncated_headers") {
        auto f = good;
        f[bth] = op::write_only;  // needs a 16-byte RETH + ICRC = 20 bytes; 17 + 3 + 4 = 24 present
        f[bth + 1] &= 0xCF;      // pad 0
        CHECK(parse_err(f) != ParseError::truncated_headers);
        f[bth] = op::cmp_swap;   // needs 28 + 4
        CHECK(parse_err(f) == ParseError::truncated_headers);
    }
    SECTION("unexpected_payload") {
        auto f = good;
        f[bth] = op::acknowledge;  // AETH + ICRC = 8 of the 24 bytes
        f[bth + 1] &= 0xCF;
        CHECK(parse_err(f) == ParseError::unexpected_payload);
    }
    SECTION("bad_pad_count") {
        auto f = make(simple(op::send_only), 0, BuildOptions{UdpCsum::zero, false});
        f[bth + 1] |= 0x10;  // pad 1 with no payload
        fix_icrc(f, f.size());
        CHECK(parse_err(f) == ParseError::bad_pad_count);
    }
    SECTION("bad_icrc") {
        auto f = good;
        f[bth + 12] ^= 0x80;
        CHECK(parse_err(f) == ParseError::bad_icrc);
        f = good;
        f[f.size() - 1] ^= 0x01;
        CHECK(parse_err(f) == ParseError::bad_icrc);
        ParseOptions po;
        po.verify_icrc = false;
        Packet p;
        CHECK(parse(f, p, po) == ParseError::ok);
    }
}

TEST_CASE("every parse error has a distinct stable name", "[parse]") {
    for (size_t i = 0; i < kParseErrorCount; ++i)
        for (size_t j = i + 1; j < kParseErrorCount; ++j) CHECK(std::string(kParseErrorName[i]) != kParseErrorName[j]);
    CHECK(std::string(name(ParseError::bad_icrc)) == "bad_icrc");
    CHECK(std::string(name(ParseError::ok)) == "ok");
}

// Bits that no check covers, by design: the MAC addresses and VLAN tag (covered by the Ethernet
// FCS, which the NIC strips), BTH byte 4 (FECN/BECN may be set by switches: masked in the ICRC),
// unless a UDP checksum is present; and for IPv6 the traffic class, flow label and hop limit (masked, and IPv6 has no header checksum).
static bool unprotected_bit(const Packet& p, size_t byte, int bit) {
    if (byte < 12) return true;
    if (p.h.eth.vlan && (byte == 14 || byte == 15)) return true;
    if (byte == size_t(p.bth_off) + 4) return p.h.udp.checksum == 0;  // else the UDP checksum covers it
    if (p.h.ipv6) {
        const size_t l3 = p.l3_off;
        if (byte == l3 && bit < 4) return true;
        if (byte == l3 + 1 || byte == l3 + 2 || byte == l3 + 3 || byte == l3 + 7) return true;
    }
    return false;
}

TEST_CASE("any single-bit flip gives a typed error unless the bit is unprotected by design", "[parse][robust]") {
    for (const auto& s : hcaemu::tools::sample_frames()) {
        Packet p0;
        REQUIRE(parse(s.bytes, p0) == ParseError::ok);
        for (size_t i = 0; i < p0.len; ++i) {
            for (int bit = 0; bit < 8; ++bit) {
                auto f = s.bytes;
                f[i] ^= uint8_t(1u << bit);
                Packet p;
                const ParseError e = parse(f, p);
                INFO(s.what << ": byte " << i << " bit " << bit << " -> " << name(e));
                REQUIRE((e == ParseError::ok) == unprotected_bit(p0, i, bit));
            }
        }
    }
}

TEST_CASE("every truncation gives a typed error", "[parse][robust]") {
    for (const auto& s : hcaemu::tools::sample_frames()) {
        Packet p0;
        REQUIRE(parse(s.bytes, p0) == ParseError::ok);
        for (size_t n = 0; n < p0.len; ++n) {
            // a fresh heap copy of exactly n bytes, so that ASan sees any read past the end
            std::vector<uint8_t> f(s.bytes.begin(), s.bytes.begin() + long(n));
            Packet p;
            INFO(s.what << ": " << n << " bytes");
            REQUIRE(parse(f, p) != ParseError::ok);
        }
    }
}

TEST_CASE("random bytes never crash the parser", "[parse][robust]") {
    std::mt19937_64 rng(99);
    size_t ok = 0;
    for (int i = 0; i < 20000; ++i) {
        std::vector<uint8_t> f(rng() % 200);
        for (auto& b : f) b = uint8_t(rng());
        if (f.size() > 13 && (i & 1)) store_be16(&f[12], kEthTypeIpv4);  // get past the first check
        Packet p;
        ok += parse(f, p) == ParseError::ok;
    }
    CHECK(ok == 0);
}

TEST_CASE("build errors", "[build]") {
    std::vector<uint8_t> out(2000);
    size_t len = 0;
    std::vector<uint8_t> pl(10);
    Headers h = simple(0x15);
    CHECK(build(h, pl, out, len) == BuildError::unknown_opcode);
    h.bth.opcode = op::acknowledge;
    CHECK(build(h, pl, out, len) == BuildError::payload_not_allowed);
    CHECK(build(h, {}, out, len) == BuildError::ok);
    CHECK(len == 62);
    h.bth.opcode = op::send_only;
    CHECK(build(h, pl, std::span<uint8_t>(out.data(), 69), len) == BuildError::buffer_too_small);
    CHECK(build(h, pl, std::span<uint8_t>(out.data(), 70), len) == BuildError::ok);
    CHECK(len == 70);
    // IPv4 total length = 20 + 8 + 12 + payload + pad + 4 must fit in 16 bits.
    std::vector<uint8_t> big(65489), bigout(70000);  // + 3 pad bytes = 65536
    CHECK(build(h, big, bigout, len) == BuildError::frame_too_long);
    big.resize(65488);
    CHECK(build(h, big, bigout, len) == BuildError::ok);
    CHECK(load_be16(&bigout[kEthLen + 2]) == 65532);
}

TEST_CASE("UDP source port per QP, as Linux computes it", "[build]") {
    // hash_32(qpn, 14) = (qpn * 0x61C88647) >> 18, worked by hand for QPN 1 and 0x11.
    CHECK(udp_sport_for_qpn(1) == (0xC000 | 0x1872));
    CHECK(udp_sport_for_qpn(0x11) == (0xC000 | ((0x11u * 0x61C88647u) >> 18)));
    for (uint32_t q = 0; q < (1u << 24); q += 4099) CHECK((udp_sport_for_qpn(q) & 0xC000) == 0xC000);
    // Connected: both QPNs 0x13 (as in write_bw.pcap): 0x13 * 0x13 = 0x169 -> port 0xC169 = 49513.
    CHECK(udp_sport_for_flow(0, 0x13, 0x13) == 49513);
    CHECK(udp_sport_for_flow(0, 0x1a, 0x1a) == 49828);  // atomic_fadd_cswap.pcap
    CHECK(udp_sport_for_flow(0x12345, 7, 9) == (0xC000 | ((0x12345 & 0x3FFF) ^ (0x12345 >> 14))));
}

TEST_CASE("a frame from a QP's header template is byte for byte the one build_headers writes, ICRC included", "[build]") {
    std::mt19937_64 rng(13);
    size_t n = 0;
    for (int variant = 0; variant < 4; ++variant) {
        const bool v6 = variant & 1, vlan = variant & 2;
        for (int round = 0; round < 8; ++round) {
            // The QP's fixed fields (random), then per packet every opcode with its own BTH
            // fields, IP ID, extension headers and payload length.
            const Headers base = random_headers(rng, op::rc | op::send_only, v6, vlan);
            FrameTemplate t;
            REQUIRE(make_template(base, t));
            CHECK(t.valid);
            for (int c = 0; c < 256; ++c) {
                const OpcodeInfo& oi = opcode_info(uint8_t(c));
                if (!oi.valid()) continue;
                Headers r = random_headers(rng, uint8_t(c), v6, vlan);
                Headers h = base;  // as the transport does: the QP's headers, then the packet's fields
                h.bth.opcode = uint8_t(c);
                h.bth.se = r.bth.se;
                h.bth.ack_req = r.bth.ack_req;
                h.bth.psn = r.bth.psn;
                h.ip4.id = uint16_t(rng());
                h.deth = r.deth;
                h.feth = r.feth;
                h.reth = r.reth;
                h.atomic = r.atomic;
                h.aeth = r.aeth;
                h.atomic_ack = r.atomic_ack;
                h.imm = r.imm;
                h.ieth_rkey = r.ieth_rkey;
                h.cnp_reserved = r.cnp_reserved;
                for (uint32_t plen : {0u, 1u, 3u, 8u, 1024u, 4093u}) {
                    if (!oi.payload && plen) continue;
                    INFO(oi.name << " v6 " << v6 << " vlan " << vlan << " payload " << plen);
                    std::vector<uint8_t> want(plen + 200, 0xAA), got(plen + 200, 0x55);
                    size_t hw = 0, hg = 0;
                    REQUIRE(build_headers(h, plen, want, hw) == BuildError::ok);
                    REQUIRE(build_headers_tmpl(t, h, plen, got, hg) == BuildError::ok);
                    REQUIRE(hg == hw);
                    REQUIRE(std::vector<uint8_t>(got.begin(), got.begin() + long(hg)) ==
                            std::vector<uint8_t>(want.begin(), want.begin() + long(hw)));
                    // Finished with the ICRC from the template's flow: the same whole frame.
                    for (uint32_t i = 0; i < plen; ++i) want[hw + i] = got[hg + i] = uint8_t(rng());
                    const size_t lw = build_finish(want, hw, plen, v6);
                    REQUIRE(build_finish(got, hg, plen, v6, {}, &t.icrc) == lw);
                    REQUIRE(std::equal(got.begin(), got.begin() + long(lw), want.begin()));
                    ++n;
                }
            }
        }
    }
    CHECK(n > 2000);
    // The errors build_headers gives, from the template too.
    Headers h = simple(op::rc | op::send_only);
    FrameTemplate t;
    REQUIRE(make_template(h, t));
    std::vector<uint8_t> out(100);
    size_t hl = 0;
    h.bth.opcode = op::rc | op::acknowledge;
    CHECK(build_headers_tmpl(t, h, 4, out, hl) == BuildError::payload_not_allowed);
    h.bth.opcode = 0x1F;  // reserved
    CHECK(build_headers_tmpl(t, h, 0, out, hl) == BuildError::unknown_opcode);
    h.bth.opcode = op::rc | op::send_only;
    CHECK(build_headers_tmpl(t, h, 64, out, hl) == BuildError::buffer_too_small);
    std::vector<uint8_t> big(70000);
    CHECK(build_headers_tmpl(t, h, 65500, big, hl) == BuildError::frame_too_long);
}

TEST_CASE("the IPv4 header checksum, against a known header and a word-by-word sum", "[parse]") {
    // A header with its checksum 0xB861 (a textbook example: 192.168.0.1 -> 192.168.0.199, UDP)
    uint8_t ip[20] = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                      0xB8, 0x61, 0xC0, 0xA8, 0x00, 0x01, 0xC0, 0xA8, 0x00, 0xC7};
    CHECK(ipv4_header_checksum(ip) == 0);  // verified in place
    ip[10] = ip[11] = 0;
    CHECK(ipv4_header_checksum(ip) == 0xB861);
    // RFC 1071 by 16-bit big-endian words, folded: the definition, on random headers
    std::mt19937_64 rng(7);
    for (int i = 0; i < 100000; ++i) {
        for (uint8_t& b : ip) b = uint8_t(rng());
        if (i % 3 == 0) std::fill(ip + 2, ip + 4, 0xFF);  // sums that carry more than once
        uint32_t sum = 0;
        for (int k = 0; k < 20; k += 2) sum += uint32_t(ip[k]) << 8 | ip[k + 1];
        while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
        REQUIRE(ipv4_header_checksum(ip) == uint16_t(~sum));
    }
}

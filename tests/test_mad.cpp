// MADs and the CM attributes (packet/mad.hpp): each message built byte for byte against vectors
// written here from IBTA's offsets (vol. 1 12.6 tables 106-120, 13.4.2, 13.4.8.1, Annex A11.4),
// parse(build(x)) == x, every typed error from a crafted input, reserved-bit findings, the GSI
// carriage in a RoCE v2 frame.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "packet/build.hpp"
#include "packet/mad.hpp"
#include "packet/mad_dissect.hpp"
#include "packet/parse.hpp"
#include "tests/mad_samples.hpp"

using namespace hcaemu::pkt;
using hcaemu::test::mad_samples;

namespace {

using Mad = std::array<uint8_t, kMadLen>;

// Writes `n` bytes of `v` big-endian at MAD offset `off` (written out by hand, not the table code).
void put(Mad& m, size_t off, size_t n, uint64_t v) {
    for (size_t i = 0; i < n; ++i) m[off + i] = uint8_t(v >> (8 * (n - 1 - i)));
}

// IBTA 13.4.2: BaseVersion 1, MgmtClass 0x07, ClassVersion 2, method, TID, AttributeID.
Mad hdr(uint8_t method, uint16_t attr) {
    Mad m{};
    m[0] = 0x01;
    m[1] = 0x07;
    m[2] = 0x02;
    m[3] = method;
    put(m, 8, 8, 0x0000000012345678ULL);
    put(m, 16, 2, attr);
    return m;
}

void ipv4_gid(Mad& m, size_t off, uint32_t a) {  // ::ffff:a.b.c.d
    m[off + 10] = 0xFF;
    m[off + 11] = 0xFF;
    put(m, off + 12, 4, a);
}

void cma(Mad& m, size_t off) {  // Annex A11.4: 198.18.0.1:54321 -> 198.18.0.2
    m[off] = 0x00;
    m[off + 1] = 0x40;
    put(m, off + 2, 2, 54321);
    put(m, off + 4 + 12, 4, 0xC6120001);
    put(m, off + 20 + 12, 4, 0xC6120002);
}

// The expected bytes of mad_samples()[i], by the spec's byte offsets (MAD offset = 24 + table offset).
std::vector<Mad> expected() {
    std::vector<Mad> v;
    {   // ClassPortInfo, IBTA 13.4.8.1
        Mad m = hdr(0x81, 0x0001);
        m[24] = 0x01;
        m[25] = 0x02;
        put(m, 26, 2, 0x0100);
        put(m, 28, 4, 0x2468ACF2);  // CapabilityMask2 0x1234567 (27 bits) | RespTimeValue 18 (5 bits)
        ipv4_gid(m, 32, 0xC6120001);
        m[48] = 0x28;
        put(m, 49, 3, 0x5ABCDE);    // RedirectSL 5 (4 bits) | RedirectFL 0xABCDE (20 bits)
        put(m, 52, 2, 0x0102);
        put(m, 54, 2, 0xFFFF);
        put(m, 57, 3, 0x000001);
        put(m, 60, 4, 0x80010000);
        ipv4_gid(m, 64, 0xC6120002);
        m[80] = 0x10;
        put(m, 81, 3, 0x312345);    // TrapSL 3 | TrapFL 0x12345
        put(m, 84, 2, 0x0304);
        put(m, 86, 2, 0x7FFF);
        m[88] = 64;
        put(m, 89, 3, 0x000002);
        put(m, 92, 4, 0x0BADBEEF);
        v.push_back(m);
    }
    {   // REQ, table 106
        Mad m = hdr(0x03, 0x0010);
        put(m, 24, 4, 0x11223344);
        put(m, 29, 3, 0x0002C9);            // VendorID at byte 5
        put(m, 32, 8, 0x0000000001064853);  // ServiceID: TCP port space, port 18515
        put(m, 40, 8, 0x0002C90300AABBCC);
        put(m, 52, 4, 0x01234567);
        put(m, 56, 3, 0x000123);
        m[59] = 4;
        m[63] = 5;
        m[67] = 0xA1;  // Remote CM Response Timeout 20 <<3 | Transport RC <<1 | E2E flow control 1
        put(m, 68, 3, 0xABCDEF);
        m[71] = 0x9F;  // Local CM Response Timeout 19 <<3 | Retry Count 7
        put(m, 72, 2, 0xFFFF);
        m[74] = 0x36;  // MTU 3 <<4 | RDC 0 <<3 | RNR Retry Count 6
        m[75] = 0xF8;  // Max CM Retries 15 <<4 | SRQ 1 <<3 | Extended Transport 0
        put(m, 76, 2, 0xFFFF);
        put(m, 78, 2, 0xFFFF);
        ipv4_gid(m, 80, 0xC6120001);
        ipv4_gid(m, 96, 0xC6120002);
        put(m, 112, 4, 0x12345003);  // Flow Label 0x12345 <<12 | 6 reserved | Packet Rate 3
        m[116] = 0x28;
        m[117] = 64;
        m[118] = 0x38;  // SL 3 <<4 | Subnet Local 1 <<3
        m[119] = 0x90;  // Local ACK Timeout 18 <<3
        m[163] = 0x04;  // byte 139: Alternate Local ACK Timeout 0 | SAP Supported (bit 5)
        cma(m, 164);
        m[200] = 0xAA;
        m[255] = 0x55;
        v.push_back(m);
    }
    {   // MRA, table 107
        Mad m = hdr(0x03, 0x0011);
        put(m, 24, 4, 0x55667788);
        put(m, 28, 4, 0x11223344);
        m[32] = 0x40;  // Message MRAed 1 (REP) in bits 7:6
        m[33] = 0xA8;  // Service Timeout 21 <<3
        m[34] = 0x01;
        m[255] = 0xFE;
        v.push_back(m);
    }
    {   // REJ, table 108
        Mad m = hdr(0x03, 0x0012);
        put(m, 24, 4, 0x55667788);
        put(m, 28, 4, 0x11223344);
        m[33] = 0x04;  // Reject Info Length 2 <<1
        put(m, 34, 2, 8);
        m[36] = 0xA1;
        m[37] = 0xA2;
        m[108] = 0x77;
        m[255] = 0x88;
        v.push_back(m);
    }
    {   // REP, table 110
        Mad m = hdr(0x03, 0x0013);
        put(m, 24, 4, 0x55667788);
        put(m, 28, 4, 0x11223344);
        put(m, 32, 4, 0x89ABCDEF);
        put(m, 36, 3, 0x000456);
        m[39] = 0x00;  // VendorID[23:16]
        put(m, 40, 3, 0x000789);
        m[43] = 0x02;  // VendorID[15:8]
        put(m, 44, 3, 0x123456);
        m[47] = 0xC9;  // VendorID[7:0]
        m[48] = 16;
        m[49] = 8;
        m[50] = 0x7D;  // Target ACK Delay 15 <<3 | Failover Accepted 2 <<1 | E2E 1
        m[51] = 0xF0;  // RNR Retry Count 7 <<5 | SRQ 1 <<4
        put(m, 52, 8, 0x0002C90300DDEEFF);
        m[60] = 0x10;
        m[255] = 0x20;
        v.push_back(m);
    }
    {   // RTU, table 111
        Mad m = hdr(0x03, 0x0014);
        put(m, 24, 4, 0x11223344);
        put(m, 28, 4, 0x55667788);
        m[255] = 0x33;
        v.push_back(m);
    }
    {   // DREQ, table 112
        Mad m = hdr(0x03, 0x0015);
        put(m, 24, 4, 0x11223344);
        put(m, 28, 4, 0x55667788);
        put(m, 32, 3, 0x000456);
        m[36] = 0x44;
        v.push_back(m);
    }
    {   // DREP, table 113
        Mad m = hdr(0x03, 0x0016);
        put(m, 24, 4, 0x55667788);
        put(m, 28, 4, 0x11223344);
        v.push_back(m);
    }
    {   // SIDR_REQ, table 119
        Mad m = hdr(0x03, 0x0017);
        put(m, 24, 4, 0x0A0B0C0D);
        put(m, 28, 2, 0xFFFF);
        put(m, 32, 8, 0x0000000001111C06);  // UDP port space, port 7174
        cma(m, 40);
        v.push_back(m);
    }
    {   // SIDR_REP, table 120
        Mad m = hdr(0x03, 0x0018);
        put(m, 24, 4, 0x0A0B0C0D);
        put(m, 30, 2, 0x0002);  // VendorID[23:8]
        put(m, 32, 3, 0x000321);
        m[35] = 0xC9;           // VendorID[7:0]
        put(m, 36, 8, 0x0000000001111C06);
        put(m, 44, 4, 0x01234567);
        m[255] = 0x99;
        v.push_back(m);
    }
    return v;
}

Mad build_of(const CmMad& m) {
    Mad out;
    out.fill(0xEE);
    build_cm(m, out);
    return out;
}

std::string diff(const Mad& a, const Mad& b) {
    std::string s;
    for (size_t i = 0; i < kMadLen; ++i)
        if (a[i] != b[i]) s += "byte " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " + std::to_string(b[i]) + "\n";
    return s;
}

}  // namespace

TEST_CASE("mad: every CM attribute builds to the bytes the spec's offsets give") {
    const auto samples = mad_samples();
    const auto want = expected();
    REQUIRE(samples.size() == want.size());
    for (size_t i = 0; i < samples.size(); ++i) {
        INFO("sample " << i << " " << kCmAttrs[samples[i].msg.index()].short_name);
        const Mad got = build_of(samples[i]);
        CHECK(diff(got, want[i]) == "");
    }
}

TEST_CASE("mad: parse of the spec's bytes gives the sample fields; parse(build(x)) == x") {
    const auto samples = mad_samples();
    const auto want = expected();
    for (size_t i = 0; i < samples.size(); ++i) {
        INFO("sample " << i);
        CmMad got;
        REQUIRE(parse_cm(want[i], got) == MadError::ok);
        CmMad exp = samples[i];
        exp.hdr.attr_id = kCmAttrs[exp.msg.index()].id;
        CHECK(got.msg.index() == exp.msg.index());
        CHECK(got == exp);
        CmMad again;
        REQUIRE(parse_cm(build_of(got), again) == MadError::ok);
        CHECK(again == got);
        CHECK(mad_reserved_set(want[i]) == 0);
    }
}

TEST_CASE("mad: field values at their widths' limits survive the round trip; wider values are masked") {
    CmReq r;
    r.local_qpn = 0xFFFFFF;
    r.starting_psn = 0xFFFFFF;
    r.primary.flow_label = 0xFFFFF;
    r.primary.packet_rate = 0x3F;
    r.alternate.flow_label = 0xFFFFF;
    r.remote_cm_response_timeout = 31;
    r.transport_service_type = 3;
    r.end_to_end_flow_control = 1;
    r.service_id = ~uint64_t(0);
    CmMad m{MadHdr{}, r};
    CmMad back;
    REQUIRE(parse_cm(build_of(m), back) == MadError::ok);
    m.hdr.attr_id = cm_attr::req;
    CHECK(back == m);
    const Mad b = build_of(m);
    CHECK(b[67] == 0xFF);                  // 31 <<3 | 3 <<1 | 1
    CHECK(b[112] == 0xFF);                 // primary flow label bits 19:12
    CHECK(b[114] == 0xF0);                 // flow label bits 3:0, then reserved 3:0
    CHECK(b[115] == 0x3F);                 // reserved 7:6, packet rate 5:0
    std::get<CmReq>(m.msg).local_qpn = 0x1ABCDEF;  // 25 bits: the top bit does not reach the wire
    const Mad c = build_of(m);
    CHECK(c[56] == 0xAB);
    CHECK(c[59] == 0x00);                  // Responder Resources untouched by the QPN
    CmMad d;
    REQUIRE(parse_cm(c, d) == MadError::ok);
    CHECK(std::get<CmReq>(d.msg).local_qpn == 0xABCDEF);
}

TEST_CASE("mad: every typed error from a crafted input") {
    const Mad req = expected()[1];
    CmMad out;
    auto with = [&](size_t off, uint8_t v) {
        Mad m = req;
        m[off] = v;
        return m;
    };
    std::vector<uint8_t> shortm(req.begin(), req.end() - 1), longm(req.begin(), req.end());
    longm.push_back(0);
    CHECK(parse_cm(shortm, out) == MadError::mad_truncated);
    CHECK(parse_cm(longm, out) == MadError::mad_too_long);
    CHECK(parse_cm(with(0, 2), out) == MadError::bad_base_version);   // OPA's BaseVersion
    CHECK(parse_cm(with(1, 0x03), out) == MadError::not_cm_class);    // SA class
    CHECK(parse_cm(with(2, 1), out) == MadError::bad_class_version);
    CHECK(parse_cm(with(17, 0x20), out) == MadError::unknown_attribute);
    CHECK(parse_cm(with(17, 0x19), out) == MadError::unsupported_attribute);  // LAP
    CHECK(parse_cm(with(17, 0x1A), out) == MadError::unsupported_attribute);  // APR
    CHECK(parse_cm(with(3, 0x01), out) == MadError::bad_method);      // a REQ as Get
    CHECK(parse_cm(with(3, 0x83), out) == MadError::bad_method);      // R bit set
    Mad cpi = expected()[0];
    cpi[3] = 0x03;
    CHECK(parse_cm(cpi, out) == MadError::bad_method);                // ClassPortInfo as Send
    cpi[3] = 0x01;
    CHECK(parse_cm(cpi, out) == MadError::ok);
    Mad mra = expected()[2];
    mra[32] = 0xC0;
    CHECK(parse_cm(mra, out) == MadError::bad_message_code);
    Mad rej = expected()[3];
    rej[32] = 0xC0;
    CHECK(parse_cm(rej, out) == MadError::bad_message_code);
    rej[32] = 0x00;
    rej[33] = 73 << 1;
    CHECK(parse_cm(rej, out) == MadError::bad_info_length);
    rej[33] = 72 << 1;
    CHECK(parse_cm(rej, out) == MadError::ok);
    Mad srep = expected()[9];
    srep[29] = 73;
    CHECK(parse_cm(srep, out) == MadError::bad_info_length);
    MadHdr h;
    CHECK(parse_mad_hdr(with(1, 0x81), h) == MadError::ok);  // any class for the common header
    CHECK(h.mgmt_class == 0x81);

    CmaHdr c;
    const auto samples = mad_samples();
    const auto& pd = std::get<CmReq>(samples[1].msg).private_data;
    CHECK(parse_cma_hdr(std::span<const uint8_t>(pd.data(), 35), c) == MadError::cma_truncated);
    std::array<uint8_t, kCmaHdrLen> bad{};
    std::memcpy(bad.data(), pd.data(), kCmaHdrLen);
    bad[0] = 1;
    CHECK(parse_cma_hdr(bad, c) == MadError::bad_cma_version);
    bad[0] = 0;
    bad[1] = 0x50;
    CHECK(parse_cma_hdr(bad, c) == MadError::bad_cma_ip_version);
    bad[1] = 0x60;
    CHECK(parse_cma_hdr(bad, c) == MadError::ok);
    for (size_t i = 0; i < kMadErrorCount; ++i) CHECK(std::string(kMadErrorName[i]) != "");
    CHECK(std::string(name(MadError::bad_gsi_qkey)) == "bad_gsi_qkey");
}

TEST_CASE("mad: reserved bits are ignored by parse and found by mad_reserved_set") {
    const Mad req = expected()[1];
    struct Case { size_t off; uint8_t bits; };
    // Byte 28 (REQ byte 4), 48 (REQ 24), 115 (reserved bits 7:6 before the packet rate), 119 low 3,
    // 163 low 2 (after SAP Supported), header bytes 18-19, Status bits 7:5.
    for (Case k : {Case{28, 0x01}, Case{48, 0x80}, Case{115, 0x40}, Case{119, 0x01}, Case{163, 0x02},
                   Case{18, 0x01}, Case{19, 0x80}, Case{5, 0x20}}) {
        INFO("byte " << k.off);
        Mad m = req;
        m[k.off] |= k.bits;
        size_t first = 0;
        CHECK(mad_reserved_set(m, &first) == 1);
        CHECK(first == k.off);
        CmMad a, b;
        REQUIRE(parse_cm(m, a) == MadError::ok);
        REQUIRE(parse_cm(req, b) == MadError::ok);
        if (k.off >= kMadHdrLen) CHECK(a == b);
    }
    Mad cpi = expected()[0];
    cpi[24 + 72] = 1;  // after the 72 bytes of ClassPortInfo
    CHECK(mad_reserved_set(cpi) == 1);
}

TEST_CASE("mad: names of REJ reasons, methods, status codes, port spaces") {
    REQUIRE(cm_rej_reason(rej_reason::invalid_service_id) != nullptr);
    CHECK(std::string(cm_rej_reason(8)->id) == "invalid_service_id");
    CHECK(std::string(cm_rej_reason(28)->id) == "consumer_defined");
    CHECK(cm_rej_reason(34) == nullptr);
    CHECK(cm_rej_reason(0) == nullptr);
    CHECK(kCmRejReasons.size() == 34);
    CHECK(std::string(mad_method_name(0x81)) == "GetResp");
    CHECK(std::string(mad_status_code_name(mad_status::unsupported_method_attr)) ==
          "method/attribute combination not supported");
    CHECK(cm_timeout_ns(0) == 4096);
    CHECK(cm_timeout_ns(20) == 4294967296ULL);  // 4.096 us * 2^20 = 4.29 s
    CHECK(cm_timeout_ns(31) == 4096ULL << 31);
    CHECK(ip_service_id(RdmaPs::tcp, 18515) == 0x0000000001064853ULL);
    CHECK(ip_service_id(RdmaPs::udp, 7174) == 0x0000000001111C06ULL);
    CHECK(is_ip_service_id(0x0000000001064853ULL));
    CHECK_FALSE(is_ip_service_id(0x1000000001064853ULL));
    CHECK(std::string(rdma_ps_name(service_id_ps(0x0000000001064853ULL))) == "TCP");
    CHECK(service_id_port(0x0000000001064853ULL) == 18515);
}

TEST_CASE("mad: the CMA header of IPv4 and IPv6 connections") {
    CmaHdr c;
    const auto samples = mad_samples();
    const auto& pd = std::get<CmReq>(samples[1].msg).private_data;
    REQUIRE(parse_cma_hdr(pd, c) == MadError::ok);
    CHECK(c.ip_version == 4);
    CHECK(c.src_port == 54321);
    CHECK(c.src_ip4() == 0xC6120001);
    CHECK(c.dst_ip4() == 0xC6120002);
    Ip6 s{}, d{};
    s[0] = 0x20; s[1] = 0x01; s[15] = 1;
    d[0] = 0x20; d[1] = 0x01; d[15] = 2;
    std::array<uint8_t, kCmaHdrLen> b{};
    build_cma_hdr(cma_hdr_ipv6(s, 4791, d), b);
    CHECK(b[0] == 0x00);
    CHECK(b[1] == 0x60);
    CHECK(b[2] == 0x12);
    CHECK(b[3] == 0xB7);
    CHECK(b[4] == 0x20);
    CHECK(b[19] == 0x01);
    CHECK(b[20] == 0x20);
    CHECK(b[35] == 0x02);
    CmaHdr back;
    REQUIRE(parse_cma_hdr(b, back) == MadError::ok);
    CHECK(back == cma_hdr_ipv6(s, 4791, d));
}

TEST_CASE("mad: a GMP in a RoCE v2 UD SEND Only to QP1") {
    const Mad req = expected()[1];
    Headers h;
    h.eth.ethertype = kEthTypeIpv4;
    h.ip4.src = 0xC6120001;
    h.ip4.dst = 0xC6120002;
    h.bth.psn = 0x000042;
    std::array<uint8_t, 512> f{};
    size_t len = 0;
    REQUIRE(build_gsi_frame(h, kGsiQpn, req, f, len) == BuildError::ok);
    // Ethernet 14, IPv4 20, UDP 8: BTH at 42, DETH at 54, the MAD at 62, ICRC after it.
    CHECK(len == 14 + 20 + 8 + 12 + 8 + 256 + 4);
    CHECK(f[42] == 0x64);  // UD SEND Only
    CHECK(f[44] == 0xFF);
    CHECK(f[45] == 0xFF);  // default P_Key
    CHECK(f[47] == 0x00);
    CHECK(f[48] == 0x00);
    CHECK(f[49] == 0x01);  // DestQP 1
    CHECK(f[54] == 0x80);
    CHECK(f[55] == 0x01);
    CHECK(f[56] == 0x00);
    CHECK(f[57] == 0x00);  // Q_Key 0x80010000
    CHECK(f[59] == 0x00);
    CHECK(f[60] == 0x00);
    CHECK(f[61] == 0x01);  // SrcQP 1
    CHECK(std::memcmp(f.data() + 62, req.data(), kMadLen) == 0);
    Packet p;
    REQUIRE(parse({f.data(), len}, p) == ParseError::ok);
    CHECK(check_gsi(p) == MadError::ok);
    CmMad m;
    CHECK(parse_cm(p.payload(), m) == MadError::ok);
    CHECK(check_gmp(p).ok());

    Packet q = p;
    q.h.bth.dest_qp = 2;
    CHECK(check_gsi(q) == MadError::not_qp1);
    q = p;
    q.h.bth.opcode = 0x65;  // UD SEND Only with Immediate
    CHECK(check_gsi(q) == MadError::not_ud_send_only);
    q = p;
    q.h.deth.qkey = 0x80010001;
    CHECK(check_gsi(q) == MadError::bad_gsi_qkey);
    CHECK(check_gmp(q).error == MadError::bad_gsi_qkey);
    q = p;
    q.payload_len = 255;
    CHECK(check_gsi(q) == MadError::mad_truncated);
    q.payload_len = 260;
    CHECK(check_gsi(q) == MadError::mad_too_long);

    // A reserved bit of the MAD: the frame is fine for the GSI, check_gmp flags it for --strict.
    Mad r = req;
    r[28] = 1;
    REQUIRE(build_gsi_frame(h, kGsiQpn, r, f, len) == BuildError::ok);
    REQUIRE(parse({f.data(), len}, p) == ParseError::ok);
    const GmpCheck g = check_gmp(p);
    CHECK(g.error == MadError::ok);
    CHECK(g.reserved_bytes == 1);
    CHECK(g.first_reserved == 28);
    CHECK_FALSE(g.ok());
}

TEST_CASE("mad: dissect names every field of each message; strict findings are printed") {
    const auto want = expected();
    Headers h;
    h.eth.ethertype = kEthTypeIpv4;
    h.ip4.src = 0xC6120001;
    h.ip4.dst = 0xC6120002;
    std::array<uint8_t, 512> f{};
    size_t len = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        REQUIRE(build_gsi_frame(h, kGsiQpn, want[i], f, len) == BuildError::ok);
        Packet p;
        REQUIRE(parse({f.data(), len}, p) == ParseError::ok);
        std::string s;
        dissect_gmp(s, p, DissectOptions{});
        const CmAttrInfo& a = kCmAttrs[i];
        INFO(s);
        for (const MadField& fl : a.fields) CHECK(s.find(fl.name) != std::string::npos);
        CHECK(s.find(a.name) != std::string::npos);
        CHECK(s.find("ERROR") == std::string::npos);
        std::string j;
        DissectOptions jo;
        jo.format = DissectFormat::json;
        dissect_gmp(j, p, jo);
        CHECK(j.find("\"status\":\"ok\"") != std::string::npos);
    }
    // REQ: the values as text.
    REQUIRE(build_gsi_frame(h, kGsiQpn, want[1], f, len) == BuildError::ok);
    Packet p;
    REQUIRE(parse({f.data(), len}, p) == ParseError::ok);
    std::string s;
    dissect_gmp(s, p, DissectOptions{});
    CHECK(s.find("Local Communication ID 0x11223344") != std::string::npos);
    CHECK(s.find("Local QPN 0x000123") != std::string::npos);
    CHECK(s.find("Starting PSN 11259375 (0xabcdef)") != std::string::npos);
    CHECK(s.find("ServiceID 0x0000000001064853 (IP-based: port space TCP, port 18515)") != std::string::npos);
    CHECK(s.find("198.18.0.1 port 54321 -> 198.18.0.2") != std::string::npos);
    std::string b;
    DissectOptions bo;
    bo.format = DissectFormat::brief;
    dissect_gmp(b, p, bo);
    CHECK(b == " CM REQ TID=0x0000000012345678 LocalCommID=0x11223344 QPN=0x000123 PSN=11259375 SID=0x0000000001064853");
    REQUIRE(build_gsi_frame(h, kGsiQpn, want[3], f, len) == BuildError::ok);
    REQUIRE(parse({f.data(), len}, p) == ParseError::ok);
    b.clear();
    dissect_gmp(b, p, bo);
    CHECK(b == " CM REJ TID=0x0000000012345678 LocalCommID=0x55667788 RemoteCommID=0x11223344 Reason=8(invalid_service_id)");
    // Strict findings.
    Mad bad = want[1];
    bad[28] = 1;
    REQUIRE(build_gsi_frame(h, kGsiQpn, bad, f, len) == BuildError::ok);
    REQUIRE(parse({f.data(), len}, p) == ParseError::ok);
    s.clear();
    dissect_gmp(s, p, DissectOptions{});
    CHECK(s.find("reserved bits set in 1 byte(s), first at MAD byte 28") != std::string::npos);
    bad = want[1];
    bad[17] = 0x19;
    REQUIRE(build_gsi_frame(h, kGsiQpn, bad, f, len) == BuildError::ok);
    REQUIRE(parse({f.data(), len}, p) == ParseError::ok);
    s.clear();
    dissect_gmp(s, p, DissectOptions{});
    CHECK(s.find("ERROR unsupported_attribute") != std::string::npos);
    CHECK(s.find("LoadAlternatePath (LAP)") != std::string::npos);
}

TEST_CASE("mad: dissection in Chinese from the message table; Status words as mad_status_code_name") {
    const auto want = expected();
    Headers h;
    h.eth.ethertype = kEthTypeIpv4;
    h.ip4.src = 0xC6120001;
    h.ip4.dst = 0xC6120002;
    std::array<uint8_t, 512> f{};
    size_t len = 0;
    Packet p;
    Mad req = want[1];
    req[28] = 1;  // a reserved bit: the reserved-bits line and note too
    REQUIRE(build_gsi_frame(h, kGsiQpn, req, f, len) == BuildError::ok);
    REQUIRE(parse({f.data(), len}, p) == ParseError::ok);
    std::string en, zh;
    dissect_gmp(en, p, DissectOptions{});
    dissect_gmp(zh, p, DissectOptions{.lang = Lang::zh});
    INFO(zh);
    for (Msg m : {Msg::mad_note_gsi, Msg::mad_note_mad_hdr, Msg::mad_note_req, Msg::mad_note_cma, Msg::mad_note_reserved}) {
        CHECK(en.find(text(m, Lang::en)) != std::string::npos);
        CHECK(zh.find(text(m, Lang::zh)) != std::string::npos);
        CHECK(zh.find(text(m, Lang::en)) == std::string::npos);
    }
    CHECK(zh.find("ServiceID 0x0000000001064853 (基于 IP：端口空间 TCP，端口 18515)") != std::string::npos);
    CHECK(zh.find("Status 0x0000 (无无效字段)") != std::string::npos);
    CHECK(zh.find("  MAD       1 个字节中有保留位被置位，第一个在 MAD 第 28 字节\n") != std::string::npos);
    CHECK(std::count(en.begin(), en.end(), '\n') == std::count(zh.begin(), zh.end(), '\n'));
    // The Status words of the dissection are mad_status_code_name's, flags after them.
    for (uint16_t code = 0; code < 8; ++code) {
        Mad m = want[1];
        m[4] = 0;
        m[5] = uint8_t(code << 2 | mad_status::busy | mad_status::redirect);
        REQUIRE(build_gsi_frame(h, kGsiQpn, m, f, len) == BuildError::ok);
        REQUIRE(parse({f.data(), len}, p) == ParseError::ok);
        std::string s;
        dissect_gmp(s, p, DissectOptions{});
        INFO(s);
        CHECK(s.find(std::string("(") + mad_status_code_name(uint16_t(code << 2)) + ", busy, redirect)") != std::string::npos);
    }
}

TEST_CASE("mad: DissectSummary counts GMPs and malformed ones") {
    const auto want = expected();
    Headers h;
    h.eth.ethertype = kEthTypeIpv4;
    std::array<uint8_t, 512> f{};
    size_t len = 0;
    DissectSummary sum;
    Mad bad = want[2];
    bad[32] = 0xC0;
    for (const Mad& m : {want[1], want[4], bad}) {
        REQUIRE(build_gsi_frame(h, kGsiQpn, m, f, len) == BuildError::ok);
        Packet p;
        const ParseError e = parse({f.data(), len}, p);
        sum.add(p, e);
    }
    CHECK(sum.frames == 3);
    CHECK(sum.gmp == 3);
    CHECK(sum.gmp_bad == 1);
}

TEST_CASE("mad: the field tables: no two fields overlap, each fits its structure and its member") {
    auto check = [](MadFields fields, size_t len, const char* what) {
        INFO(what);
        std::vector<int> owner(len * 8, -1);
        for (size_t i = 0; i < fields.size(); ++i) {
            const MadField& f = fields[i];
            INFO(f.name);
            CHECK(f.bits > 0);
            CHECK(size_t(f.bit) + f.bits <= len * 8);
            if (f.kind == FieldKind::uint) {
                CHECK(f.bits <= 64);
                CHECK((f.bit % 8 + f.bits + 7) / 8 <= 8);           // field_get reads at most 8 bytes
                CHECK(size_t(f.bits) + f.shift <= size_t(f.size) * 8);  // the value fits its member
            } else {
                CHECK(f.bit % 8 == 0);
                CHECK(f.bits == f.size * 8);
            }
            for (size_t b = f.bit; b < size_t(f.bit) + f.bits && b < owner.size(); ++b) {
                if (owner[b] >= 0) FAIL_CHECK(f.name << " overlaps " << fields[size_t(owner[b])].name << " at bit " << b);
                owner[b] = int(i);
            }
        }
    };
    check(kMadHdrFields, kMadHdrLen, "MAD header");
    check(kCmaHdrFields, kCmaHdrLen, "CMA header");
    for (const CmAttrInfo& a : kCmAttrs) check(a.fields, a.len, a.name);
    // The private data ends each message at byte 232 (IBTA 12.6: the whole MAD data area).
    for (size_t i = 1; i < 10; ++i) {
        const MadField& last = kCmAttrs[i].fields.back();
        CHECK(std::string(last.key) == "private_data");
        CHECK(last.bit / 8 + last.size == kMadDataLen);
    }
}

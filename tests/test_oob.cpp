// The out-of-band messages of ibv_rc_pingpong and perftest: the exact bytes, strict parsing, and
// every such message in the reference capture of the real tools.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "dpdk_port/pcap_file.hpp"
#include "packet/bytes.hpp"
#include "tools/oob.hpp"

using namespace hcaemu::tools::oob;

namespace {

std::vector<uint8_t> bytes(const std::string& s) {  // the string and its NUL
    std::vector<uint8_t> v(s.begin(), s.end());
    v.push_back(0);
    return v;
}

}  // namespace

TEST_CASE("ibv_rc_pingpong's message, byte for byte", "[oob]") {
    // From ../shared/captures/rxe/README.md: what the real client sent.
    const auto msg = bytes("0000:00001c:df63e0:00000000000000000000ffffc6120003");
    REQUIRE(msg.size() == kPingpongLen);
    PingpongDest d;
    REQUIRE(parse(msg, d) == OobError::ok);
    CHECK(d.lid == 0);
    CHECK(d.qpn == 0x1c);
    CHECK(d.psn == 0xdf63e0);
    CHECK(d.gid == hcaemu::pkt::Ip6{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 3});
    const auto again = format(d);
    CHECK(std::vector<uint8_t>(again.begin(), again.end()) == msg);
}

TEST_CASE("perftest's 108-byte QP information, byte for byte", "[oob]") {
    const auto msg = bytes("0000:0001:00001d:fe9cb6:00000e69:000056134b7dc000:00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:03:00000000:");
    REQUIRE(msg.size() == kPerftestQpInfoLen);
    PerftestQpInfo q;
    REQUIRE(parse(msg, q) == OobError::ok);
    CHECK(q.out_reads == 1);
    CHECK(q.qpn == 0x1d);
    CHECK(q.psn == 0xfe9cb6);
    CHECK(q.rkey == 0xe69);
    CHECK(q.vaddr == 0x56134b7dc000ull);
    CHECK(q.gid[10] == 0xff);
    CHECK(q.gid[15] == 3);
    CHECK(q.srqn == 0);
    const auto again = format(q);
    CHECK(std::vector<uint8_t>(again.begin(), again.end()) == msg);
}

TEST_CASE("hostile or malformed messages get a typed error and change nothing", "[oob]") {
    const auto good = bytes("0000:00001c:df63e0:00000000000000000000ffffc6120003");
    PingpongDest d;
    d.qpn = 77;
    for (size_t n = 0; n < good.size(); ++n)
        CHECK(parse(std::span<const uint8_t>(good.data(), n), d) == OobError::bad_length);
    auto x = good;
    x.back() = 'x';
    CHECK(parse(x, d) == OobError::no_terminator);
    x = good;
    x[4] = '-';
    CHECK(parse(x, d) == OobError::bad_separator);
    x = good;
    x[7] = 'g';
    CHECK(parse(x, d) == OobError::bad_hex);
    x = good;
    x[30] = ' ';
    CHECK(parse(x, d) == OobError::bad_hex);
    CHECK(d.qpn == 77);  // untouched by every failed parse
    // every single-byte change of the perftest message is either still valid hex or refused
    const auto p = bytes("0000:0001:00001d:fe9cb6:00000e69:000056134b7dc000:00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:03:00000000:");
    for (size_t i = 0; i < p.size(); ++i)
        for (int c : {0, int(':'), int('z'), int('0'), 0xff}) {
            auto y = p;
            y[i] = uint8_t(c);
            PerftestQpInfo q;
            const OobError e = parse(y, q);
            const bool hex_pos = p[i] != ':' && p[i] != 0;
            const bool hex_char = (c >= '0' && c <= '9');
            INFO("byte " << i << " <- " << c);
            CHECK((e == OobError::ok) == (c == p[i] || (hex_pos && hex_char)));
        }
}

TEST_CASE("every out-of-band message in the capture of the real tools parses and re-formats exactly", "[oob][captures]") {
    const char* env = std::getenv("HCAEMU_CAPTURES");
    const std::string path = std::string(env && *env ? env : "../shared/captures/rxe") + "/oob_exchange_tcp18515.pcap";
    if (!std::filesystem::exists(path)) {
        WARN("SKIP: " << path << " not found");
        return;
    }
    hcaemu::port::PcapReader r(path);
    REQUIRE(r.ok());
    hcaemu::port::PcapFrame f;
    size_t pingpong = 0, perftest = 0;
    while (r.next(f)) {
        // Ethernet, IPv4, TCP: the payload after the TCP header
        const uint8_t* d = f.data.data();
        if (f.data.size() < 54 || hcaemu::pkt::load_be16(d + 12) != 0x0800 || d[23] != 6) continue;
        const size_t ihl = size_t(d[14] & 0xF) * 4;
        const size_t ip_len = hcaemu::pkt::load_be16(d + 16);
        const size_t tcp = 14 + ihl;
        const size_t doff = size_t(d[tcp + 12] >> 4) * 4;
        const size_t plen = ip_len - ihl - doff;
        std::span<const uint8_t> pl(d + tcp + doff, plen);
        if (plen == kPingpongLen) {
            PingpongDest x;
            REQUIRE(parse(pl, x) == OobError::ok);
            const auto y = format(x);
            CHECK(std::memcmp(y.data(), pl.data(), plen) == 0);
            ++pingpong;
        } else if (plen == kPerftestQpInfoLen) {
            PerftestQpInfo x;
            REQUIRE(parse(pl, x) == OobError::ok);
            const auto y = format(x);
            CHECK(std::memcmp(y.data(), pl.data(), plen) == 0);
            ++perftest;
        }
    }
    CHECK(pingpong == 2);   // one ibv_rc_pingpong run: client and server
    CHECK(perftest >= 16);  // two perftest runs: 4 handshakes each way at least
}

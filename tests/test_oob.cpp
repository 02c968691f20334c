// The out-of-band messages of ibv_rc_pingpong and perftest: the exact bytes, strict parsing, and
// every such message in the reference capture of the real tools.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "dpdk_port/pcap_file.hpp"
#include "packet/bytes.hpp"
#include "tools/hcaemu/oob.hpp"
#include "tools/hcaemu/perf.hpp"

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

namespace {
// The QP both perftest samples below describe (lid 0, one outstanding read, QPN 0x1d, ...).
void check_sample(const PerftestQpInfo& q, uint32_t srqn) {
    CHECK(q.lid == 0);
    CHECK(q.out_reads == 1);
    CHECK(q.qpn == 0x1d);
    CHECK(q.psn == 0xfe9cb6);
    CHECK(q.rkey == 0xe69);
    CHECK(q.vaddr == 0x56134b7dc000ull);
    CHECK(q.gid[10] == 0xff);
    CHECK(q.gid[15] == 3);
    CHECK(q.srqn == srqn);
}
}  // namespace

TEST_CASE("perftest's 108-byte QP information, byte for byte", "[oob]") {
    const auto msg = bytes("0000:0001:00001d:fe9cb6:00000e69:000056134b7dc000:00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:03:00000000:");
    REQUIRE(msg.size() == kPerftestQpInfoLen);
    PerftestQpInfo q;
    REQUIRE(parse(msg, q) == OobError::ok);
    check_sample(q, 0);
    const auto again = format(q);
    CHECK(std::vector<uint8_t>(again.begin(), again.end()) == msg);
}

// perftest -R: struct pingpong_dest as rdma_write_keys sends it (big-endian integers, 4 bytes of
// padding before vaddr, srqn and gid_index last).
TEST_CASE("perftest -R's 56-byte QP information, byte for byte", "[oob]") {
    std::array<uint8_t, kPerftestCmDestLen> msg{};
    const uint8_t head[] = {0, 0, 0, 0,   0, 0, 0, 1,   0, 0, 0, 0x1d,   0, 0xfe, 0x9c, 0xb6,  0, 0, 0x0e, 0x69,
                            0xAA, 0xBB, 0xCC, 0xDD,  // padding: whatever perftest's stack held
                            0, 0, 0x56, 0x13, 0x4b, 0x7d, 0xc0, 0};
    std::memcpy(msg.data(), head, sizeof head);
    const uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 3};
    std::memcpy(msg.data() + 32, gid, 16);
    msg[51] = 7;  // srqn
    msg[55] = 1;  // gid_index
    PerftestQpInfo q;
    REQUIRE(parse_cm(msg, q) == OobError::ok);
    check_sample(q, 7);
    auto again = format_cm(q);
    // ours: zero padding and gid_index
    auto want = msg;
    std::memset(want.data() + 20, 0, 4);
    want[55] = 0;
    CHECK(again == want);
    PerftestQpInfo keep = q;
    CHECK(parse_cm(std::span<const uint8_t>(msg.data(), 55), q) == OobError::bad_length);
    msg[8] = 1;  // QPN 0x0100001d: above 24 bits
    CHECK(parse_cm(msg, q) == OobError::bad_value);
    msg[8] = 0;
    msg[12] = 1;  // PSN 0x01fe9cb6: above 24 bits
    CHECK(parse_cm(msg, q) == OobError::bad_value);
    CHECK(q == keep);
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
    size_t pingpong = 0, perftest = 0, versions = 0, sys = 0, mtus = 0, results = 0, dones = 0;
    std::vector<std::vector<uint8_t>> keep;
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
        } else if (plen == kPerftestVersionLen) {
            char v[kPerftestVersionLen];
            REQUIRE(parse_version(pl, v) == OobError::ok);
            CHECK(std::string(v) == "6.06");
            const auto y = format_version(v);
            CHECK(std::memcmp(y.data(), pl.data(), plen) == 0);
            ++versions;
        } else if (plen == kPerftestSysLen) {
            uint32_t v = 0;
            REQUIRE(parse_sys(pl, v) == OobError::ok);
            CHECK((v == 4096 || v == 64));  // the cycle buffer, the cache line
            const auto y = format_sys(v);
            CHECK(std::memcmp(y.data(), pl.data(), plen) == 0);
            ++sys;
        } else if (plen == kPerftestMtuLen) {
            uint8_t m = 0;
            REQUIRE(parse_mtu(pl, m) == OobError::ok);
            CHECK(m == 3);  // IBV_MTU_1024
            const auto y = format_mtu(m);
            CHECK(std::memcmp(y.data(), pl.data(), plen) == 0);
            ++mtus;
        } else if (plen == kPerftestResultLen) {
            uint64_t v = 0;
            REQUIRE(parse_u64(pl, v) == OobError::ok);
            const auto y = format_u64(v);
            CHECK(std::memcmp(y.data(), pl.data(), plen) == 0);
            if (hcaemu::pkt::load_be16(d + tcp + 2) == 18515) {  // towards the server: the client's
                keep.emplace_back(pl.begin(), pl.end());
            }
            ++results;
        } else if (plen == kPerftestDoneLen) {
            CHECK(parse_done(pl) == OobError::ok);
            const auto y = format_done();
            CHECK(std::memcmp(y.data(), pl.data(), plen) == 0);
            ++dones;
        }
    }
    CHECK(pingpong == 2);   // one ibv_rc_pingpong run: client and server
    CHECK(perftest == 20);  // two perftest runs: 5 handshakes each way each
    CHECK(versions == 4);
    CHECK(sys == 8);
    CHECK(mtus == 4);
    CHECK(results == 20);
    CHECK(dones == 5);      // ibv_rc_pingpong's client, both ends of both perftest runs

    // The first run was `ib_write_bw -s 64 -n 5`: its client's five results, printed our way, are
    // the line the real tool printed (tool-output/oob_exchange_tcp18515-1.client).
    REQUIRE(keep.size() == 10);
    hcaemu::tools::perf::BwReport w;
    REQUIRE(parse_u64(keep[0], w.size) == OobError::ok);
    REQUIRE(parse_u64(keep[1], w.iters) == OobError::ok);
    REQUIRE(parse_double(keep[2], w.bw_peak) == OobError::ok);
    REQUIRE(parse_double(keep[3], w.bw_avg) == OobError::ok);
    REQUIRE(parse_double(keep[4], w.msg_rate) == OobError::ok);
    CHECK(w.size == 64);
    CHECK(w.iters == 5);
    CHECK(hcaemu::tools::perf::bw_line(w, false) ==
          " 64         5                0.05               0.05   \t\t   0.000750\n");
}

TEST_CASE("perftest's version, system data, MTU, results and done: exact bytes, strict parsing", "[oob]") {
    const auto v = format_version("6.06");
    CHECK(std::vector<uint8_t>(v.begin(), v.end()) ==
          std::vector<uint8_t>{'6', '.', '0', '6', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
    char out[kPerftestVersionLen] = {'x'};
    auto bad = v;
    CHECK(parse_version(std::span<const uint8_t>(v.data(), 15), out) == OobError::bad_length);
    bad[15] = '1';
    CHECK(parse_version(bad, out) == OobError::no_terminator);
    bad = v;
    bad[8] = 'x';  // text after the terminator
    CHECK(parse_version(bad, out) == OobError::bad_value);
    bad = v;
    bad[0] = 'v';
    CHECK(parse_version(bad, out) == OobError::bad_value);
    bad = {};
    CHECK(parse_version(bad, out) == OobError::bad_value);  // empty
    CHECK(out[0] == 'x');                                   // untouched by every failed parse
    REQUIRE(parse_version(format_version("5.60"), out) == OobError::ok);
    CHECK(std::string(out) == "5.60");

    CHECK(format_sys(4096) == std::array<uint8_t, 4>{0, 0, 0x10, 0});
    uint32_t n = 7;
    CHECK(parse_sys(format_sys(0), n) == OobError::bad_value);
    CHECK(parse_sys(format_sys((1u << 30) + 1), n) == OobError::bad_value);
    CHECK(n == 7);
    CHECK(parse_sys(std::span<const uint8_t>(format_sys(64).data(), 3), n) == OobError::bad_length);

    CHECK(format_mtu(3) == std::array<uint8_t, 2>{'3', 0});
    uint8_t m = 9;
    const std::array<uint8_t, 2> m6{'6', 0}, m0{'0', 0}, mx{'3', 'x'};
    CHECK(parse_mtu(m6, m) == OobError::bad_value);
    CHECK(parse_mtu(m0, m) == OobError::bad_value);
    CHECK(parse_mtu(mx, m) == OobError::no_terminator);
    CHECK(m == 9);
    for (uint8_t i = 1; i <= 5; ++i) {
        REQUIRE(parse_mtu(format_mtu(i), m) == OobError::ok);
        CHECK(m == i);
    }

    CHECK(format_u64(0x0102030405060708ull) == std::array<uint8_t, 8>{1, 2, 3, 4, 5, 6, 7, 8});
    CHECK(format_double(1.0) == std::array<uint8_t, 8>{0x3f, 0xf0, 0, 0, 0, 0, 0, 0});
    double d = 0;
    REQUIRE(parse_double(format_double(-2.5), d) == OobError::ok);
    CHECK(d == -2.5);
    CHECK(parse_double(std::span<const uint8_t>(format_double(1).data(), 7), d) == OobError::bad_length);

    const std::array<uint8_t, 5> done{'d', 'o', 'n', 'e', 0}, dona{'d', 'o', 'n', 'a', 0}, done_x{'d', 'o', 'n', 'e', 'x'};
    CHECK(format_done() == done);
    CHECK(parse_done(done) == OobError::ok);
    CHECK(parse_done(dona) == OobError::bad_value);
    CHECK(parse_done(done_x) == OobError::no_terminator);
}

namespace {
// perftest's own loop over every (post, signaled completion) pair, as the reference.
double peak_by_pairs(const std::vector<uint64_t>& tp, const std::vector<uint64_t>& tc, uint32_t cq_mod) {
    const size_t n = tp.size();
    double best = double(tc[n - 1] - tp[0]) / double(n);
    for (size_t i = 0; i < n; ++i)
        for (size_t j = i; j < n; ++j)
            if (j % cq_mod == cq_mod - 1 || j == n - 1) best = std::min(best, double(tc[j] - tp[i]) / double(j - i + 1));
    return best;
}
}  // namespace

TEST_CASE("perf results: the peak by the upper hull equals perftest's loop over every pair", "[perf]") {
    using namespace hcaemu::tools::perf;
    uint64_t seed = 12345;
    auto rnd = [&](uint64_t m) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        return (seed >> 33) % m;
    };
    for (int round = 0; round < 3000; ++round) {
        const size_t n = 1 + rnd(round < 2000 ? 40 : 400);
        const uint32_t cq_mod = uint32_t(1 + rnd(round % 3 == 0 ? 1 : 12));
        std::vector<uint64_t> tp(n), tc(n);
        uint64_t t = 1'000'000 + rnd(1000);
        for (size_t i = 0; i < n; ++i) {
            t += rnd(4) == 0 ? rnd(5000) : rnd(50);  // bursts and gaps, equal stamps too
            tp[i] = t;
        }
        uint64_t c = tp[0];
        for (size_t i = 0; i < n; ++i) {
            c = std::max(c, tp[i]) + (rnd(5) == 0 ? rnd(8000) : rnd(100));
            tc[i] = c;
        }
        const double want = peak_by_pairs(tp, tc, cq_mod), got = peak_ns_per_msg(tp, tc, cq_mod);
        INFO("round " << round << " n " << n << " cq_mod " << cq_mod);
        REQUIRE(got == want);  // the same pair's quotient, so the same double
    }
    // One million messages (the pairs would take n^2 / 100 = 10^10 steps): posts 200 ns apart but
    // for a run of 100 posted 10 ns apart, each done 1000 ns after its post. The peak is that
    // run, from post 500000 to the signaled completion 500099: (990 + 1000) / 100 ns.
    const size_t n = 1'000'000;
    std::vector<uint64_t> tp(n), tc(n);
    uint64_t t = 0;
    for (size_t i = 0; i < n; ++i) {
        t += i > 500000 && i < 500100 ? 10 : 200;
        tp[i] = t;
        tc[i] = t + 1000;
    }
    CHECK(peak_ns_per_msg(tp, tc, 100) == 1990.0 / 100.0);
}

TEST_CASE("perf results: perftest's arithmetic on known timestamps", "[perf]") {
    using namespace hcaemu::tools::perf;
    // ten 1000-byte WRITEs posted every 100 ns, a completion every 5th (CQ moderation 5)
    std::vector<uint64_t> tp(10), tc(10, 0);
    for (size_t i = 0; i < 10; ++i) tp[i] = i * 100;
    tc[4] = 1000;
    tc[9] = 3000;
    const BwReport r = compute_bw(tp, tc, 1000, 5, false);
    CHECK(r.size == 1000);
    CHECK(r.iters == 10);
    // the best run: posts 0..4 done at 1000 ns, 200 ns a message
    CHECK(r.bw_peak == Approx(1000 * 1e9 / (200 * 1048576.0)));
    CHECK(r.bw_avg == Approx(1000 * 10 * 1e9 / (3000 * 1048576.0)));
    CHECK(r.msg_rate == Approx(10 * 1e9 / (3000 * 1e6)));
    const BwReport g = compute_bw(tp, tc, 1000, 5, true);
    CHECK(g.bw_peak == Approx(40.0));  // 8000 bits in 200 ns
    CHECK(bw_line(r, false) == " 1000       10               4768.37            3178.91\t\t   3.333333\n");
    CHECK(bw_header(true).find("BW peak[Gb/sec]") != std::string::npos);

    // eight ping-pong posts: one-way gaps 5, 10, 5, 10, 5, 10, 55 us
    const std::vector<uint64_t> lp{0, 10000, 30000, 40000, 60000, 70000, 90000, 200000};
    const LatReport l = compute_lat(lp, 2, true);
    CHECK(l.iters == 8);
    CHECK(l.t_min == Approx(5));
    CHECK(l.t_typical == Approx(5));  // the median of 5 5 5 10 10 (the two largest left out)
    CHECK(l.t_avg == Approx(7));
    CHECK(l.t_stdev == Approx(std::sqrt(6.0)));
    CHECK(l.t_max == Approx(10));     // perftest's index: the first of the two left out
    CHECK(l.p99 == Approx(10));
    CHECK(l.p99_9 == Approx(10));
    const LatReport one_way = compute_lat(lp, 2, false);  // READ, atomics: not halved
    CHECK(one_way.t_avg == Approx(14));
    CHECK(lat_line(l).rfind(" 2       8          5.00           10.00        5.00", 0) == 0);
    CHECK(lat_duration_line(8, 1000, 2'000'000, false) == " 8             1000            2.00           500000.00\n");
}

TEST_CASE("perf's data pattern: no 256-byte chunk of an 8 MiB buffer repeats elsewhere in it", "[perf]") {
    // --check and `--dump` compare what arrived with this pattern (or with the wire): a packet
    // placed at the wrong offset must not carry the very bytes of the right one. 256 B: the
    // smallest MTU; 8 MiB: -a's largest message.
    using hcaemu::tools::perf::pattern_byte;
    constexpr size_t kChunk = 256, kLen = size_t(8) << 20;
    std::vector<std::string> chunks;
    chunks.reserve(kLen / kChunk);
    std::string c(kChunk, '\0');
    for (size_t off = 0; off < kLen; off += kChunk) {
        for (size_t i = 0; i < kChunk; ++i) c[i] = char(pattern_byte(off + i));
        chunks.push_back(c);
    }
    std::sort(chunks.begin(), chunks.end());
    CHECK(std::adjacent_find(chunks.begin(), chunks.end()) == chunks.end());
}

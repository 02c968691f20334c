// The conformance monitor (dpdk_port/conform.hpp): a clean RC conversation names nothing; the same
// conversation with exactly one fault names exactly that rule, at that frame and PSN; the rxe
// reference captures name nothing but their documented deviations (docs/conform.md).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <new>
#include <cstring>
#include <filesystem>
#include <functional>
#include <vector>

#include "dpdk_port/conform.hpp"
#include "dpdk_port/pcap_file.hpp"
#include "packet/build.hpp"
#include "packet/bytes.hpp"
#include "packet/icrc.hpp"
#include "packet/parse.hpp"

// Allocations counted while g_count is set: the monitor's per-frame path must make none.
namespace {
bool g_count = false;
size_t g_allocs = 0;
}  // namespace
// malloc/free under operator new/delete, as a whole: GCC cannot see that every delete pairs with
// this new.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t n) {
    if (g_count) ++g_allocs;
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void* operator new[](size_t n) { return ::operator new(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept {
    if (g_count) ++g_allocs;
    return std::malloc(n ? n : 1);
}
void* operator new[](size_t n, const std::nothrow_t& t) noexcept { return ::operator new(n, t); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
#pragma GCC diagnostic pop

using namespace hcaemu;
using port::ConfRule;
using port::Violation;
namespace op = pkt::op;

namespace {

constexpr uint32_t kIpA = 0xC6120002, kIpB = 0xC6120003;  // 198.18.0.2 (requester), 198.18.0.3
constexpr uint32_t kQpA = 0x11, kQpB = 0x12;

struct Fr {
    std::vector<uint8_t> b;
    uint64_t ts = 0;
};

// One RC frame. from_a: A -> B (to QP B), else B -> A (to QP A).
Fr rc(bool from_a, uint8_t opcode, uint32_t psn, uint32_t payload, uint64_t ts_us,
      const std::function<void(pkt::Headers&)>& tweak = {}) {
    pkt::Headers h;
    h.eth.ethertype = pkt::kEthTypeIpv4;
    h.eth.src = {2, 0, 0, 0, 0, uint8_t(from_a ? 2 : 3)};
    h.eth.dst = {2, 0, 0, 0, 0, uint8_t(from_a ? 3 : 2)};
    h.ip4.src = from_a ? kIpA : kIpB;
    h.ip4.dst = from_a ? kIpB : kIpA;
    h.udp.sport = from_a ? 0xC011 : 0xC012;
    h.bth.opcode = opcode;
    h.bth.psn = psn;
    h.bth.dest_qp = from_a ? kQpB : kQpA;
    h.aeth.syndrome = pkt::kAethCreditInvalid;
    h.reth.rkey = 0x1234;
    h.reth.va = 0x10000;
    h.atomic.va = 0x20000;
    if (tweak) tweak(h);
    std::vector<uint8_t> pl(payload, 0xA5);
    Fr f;
    f.b.resize(9000);
    size_t len = 0;
    pkt::BuildOptions bo;
    bo.pad_to_min = false;
    REQUIRE(pkt::build(h, pl, f.b, len, bo) == pkt::BuildError::ok);
    f.b.resize(len);
    f.ts = ts_us * 1000;
    return f;
}

// The IPv4 checksum and the ICRC again, after a test changed bytes.
void refresh(std::vector<uint8_t>& f) {
    uint8_t* ip = f.data() + pkt::kEthLen;
    pkt::store_be16(ip + 10, 0);
    pkt::store_be16(ip + 10, pkt::ipv4_header_checksum(ip));
    const uint32_t c = pkt::icrc(ip, f.size() - pkt::kEthLen - 4, false);
    std::memcpy(f.data() + f.size() - 4, &c, 4);  // little-endian, as stored
}

pkt::Aeth aeth(pkt::AethType t, uint8_t v, uint32_t msn) { return {pkt::aeth_syndrome(t, v), msn}; }

// A clean conversation: WRITE of 3 packets, SEND Only, READ of 2 packets, FetchAdd; each answered.
std::vector<Fr> clean() {
    std::vector<Fr> v;
    auto reth = [](uint32_t len) { return [len](pkt::Headers& h) { h.reth.dma_len = len; }; };
    auto ack = [](uint32_t msn) { return [msn](pkt::Headers& h) { h.aeth = aeth(pkt::AethType::ack, 31, msn); }; };
    v.push_back(rc(true, op::write_first, 100, 1024, 10, reth(2112)));                    // 1
    v.push_back(rc(true, op::write_middle, 101, 1024, 11));                               // 2
    v.push_back(rc(true, op::write_last, 102, 64, 12, [](pkt::Headers& h) { h.bth.ack_req = true; }));  // 3
    v.push_back(rc(false, op::acknowledge, 102, 0, 20, ack(1)));                          // 4
    v.push_back(rc(true, op::send_only, 103, 64, 30));                                    // 5
    v.push_back(rc(false, op::acknowledge, 103, 0, 40, ack(2)));                          // 6
    v.push_back(rc(true, op::read_request, 104, 0, 50, reth(2048)));                      // 7
    v.push_back(rc(false, op::read_response_first, 104, 1024, 60, ack(3)));               // 8
    v.push_back(rc(false, op::read_response_last, 105, 1024, 61, ack(3)));                // 9
    v.push_back(rc(true, op::fetch_add, 106, 0, 70));                                     // 10
    v.push_back(rc(false, op::atomic_acknowledge, 106, 0, 80, ack(4)));                   // 11
    return v;
}

std::vector<Violation> run(const std::vector<Fr>& frames, const port::ConformConfig& cfg = {}) {
    port::ConformMonitor mon(cfg);
    std::vector<Violation> out;
    mon.set_sink([](void* ctx, const Violation& x) { static_cast<std::vector<Violation>*>(ctx)->push_back(x); }, &out);
    uint64_t n = 0;
    for (const Fr& f : frames) mon.frame(f.b, f.ts, ++n);
    uint64_t sum = 0;
    for (size_t i = 0; i < port::kConfRuleCount; ++i) sum += mon.count(ConfRule(i));
    CHECK(sum == out.size());
    return out;
}

// Exactly one violation: this rule, this frame, this PSN.
void one(const std::vector<Fr>& frames, ConfRule rule, uint64_t frame, uint32_t psn, const port::ConformConfig& cfg = {}) {
    const auto vs = run(frames, cfg);
    for (const Violation& v : vs) UNSCOPED_INFO(port::describe(v, pkt::Lang::en));
    REQUIRE(vs.size() == 1);
    CHECK(port::info(vs[0].rule).id == std::string(port::info(rule).id));
    CHECK(vs[0].frame == frame);
    CHECK(vs[0].psn == psn);
}

}  // namespace

TEST_CASE("conform: a clean conversation names nothing", "[conform]") {
    CHECK(run(clean()).empty());
}

TEST_CASE("conform: no allocation per frame, violations included", "[conform]") {
    auto v = clean();
    v.push_back(rc(false, op::acknowledge, 106 + 4096, 0, 90, [](pkt::Headers& h) { h.aeth = aeth(pkt::AethType::ack, 31, 4); }));
    v[4].b[v[4].b.size() - 1] ^= 0xFF;  // and a bad ICRC
    port::ConformMonitor mon;
    g_allocs = 0;
    g_count = true;
    uint64_t n = 0;
    for (int round = 0; round < 2; ++round) {
        mon.reset();
        for (const Fr& f : v) mon.frame(f.b, f.ts, ++n);
    }
    g_count = false;
    CHECK(g_allocs == 0);
    CHECK(mon.stats().violations == 2);
}

TEST_CASE("conform: per-packet rules", "[conform]") {
    SECTION("icrc") {
        auto v = clean();
        v[4].b[v[4].b.size() - 1] ^= 0xFF;
        one(v, ConfRule::icrc, 5, 103);
    }
    SECTION("bth.tver") {
        auto v = clean();
        v[4] = rc(true, op::send_only, 103, 64, 30, [](pkt::Headers& h) { h.bth.tver = 1; });
        v.erase(v.begin() + 5);  // the responder dropped it: no ACK (and the frame changes no state)
        one(v, ConfRule::tver, 5, 103);
    }
    SECTION("bth.reserved") {
        auto v = clean();
        v[4] = rc(true, op::send_only, 103, 64, 30, [](pkt::Headers& h) { h.bth.resv7 = 1; });
        one(v, ConfRule::bth_reserved, 5, 103);
    }
    SECTION("bth.pkey: changed") {
        auto v = clean();
        v[4] = rc(true, op::send_only, 103, 64, 30, [](pkt::Headers& h) { h.bth.pkey = 0x8001; });
        one(v, ConfRule::pkey, 5, 103);
    }
    SECTION("udp.sport") {
        auto v = clean();
        v[4] = rc(true, op::send_only, 103, 64, 30, [](pkt::Headers& h) { h.udp.sport = 0xC099; });
        one(v, ConfRule::udp_sport, 5, 103);
    }
    SECTION("len.mtu: a Middle shorter than the path MTU") {
        auto v = clean();
        v[1] = rc(true, op::write_middle, 101, 512, 11);
        one(v, ConfRule::mtu, 2, 101);
    }
    SECTION("bth.padcnt: a data area not in whole words") {
        auto v = clean();
        auto& f = v[4].b;  // SEND Only, 64 bytes: 65 bytes with PadCnt 0
        f = rc(true, op::send_only, 103, 65, 30).b;  // PadCnt 3, 68 bytes
        f.resize(f.size() - 3);                      // the pad bytes gone, PadCnt 0
        uint8_t* ip = f.data() + pkt::kEthLen;
        pkt::store_be16(ip + 2, uint16_t(pkt::load_be16(ip + 2) - 3));
        pkt::store_be16(ip + 24, uint16_t(pkt::load_be16(ip + 24) - 3));
        ip[28 + 1] &= 0xCF;
        refresh(f);
        one(v, ConfRule::padcnt, 5, 103);
    }
}

TEST_CASE("conform: rules across packets", "[conform]") {
    SECTION("psn.opcode_seq: a First inside a message") {
        auto v = clean();
        v[1] = rc(true, op::write_first, 101, 1024, 11, [](pkt::Headers& h) { h.reth.dma_len = 1088; });
        one(v, ConfRule::opcode_seq, 2, 101);
    }
    SECTION("psn.window: a request 2^23 + 10 PSNs ahead") {
        auto v = clean();
        v.push_back(rc(true, op::send_only, (106 + (1u << 23) + 10) & 0xFFFFFF, 64, 90));
        one(v, ConfRule::psn_window, 12, (106 + (1u << 23) + 10) & 0xFFFFFF);
    }
    SECTION("resp.unsolicited: an ACK for a PSN never sent") {
        auto v = clean();
        v.push_back(rc(false, op::acknowledge, 106 + 4096, 0, 90, [](pkt::Headers& h) { h.aeth = aeth(pkt::AethType::ack, 31, 4); }));
        one(v, ConfRule::resp_unsolicited, 12, 106 + 4096);
    }
    SECTION("resp.opcode: READ data for a SEND") {
        auto v = clean();
        v[5] = rc(false, op::read_response_only, 103, 64, 40, [](pkt::Headers& h) { h.aeth = aeth(pkt::AethType::ack, 31, 2); });
        one(v, ConfRule::resp_opcode, 6, 103);
    }
    SECTION("read.opcode: a Middle where the Last is due") {
        auto v = clean();
        v[8] = rc(false, op::read_response_middle, 105, 1024, 61);
        one(v, ConfRule::read_opcode, 9, 105);
    }
    SECTION("read.length: a Last too short") {
        auto v = clean();
        v[8] = rc(false, op::read_response_last, 105, 1000, 61, [](pkt::Headers& h) { h.aeth = aeth(pkt::AethType::ack, 31, 3); });
        one(v, ConfRule::read_length, 9, 105);
    }
    SECTION("atomic.resp: an atomic ACK for a SEND") {
        auto v = clean();
        v[5] = rc(false, op::atomic_acknowledge, 103, 0, 40, [](pkt::Headers& h) { h.aeth = aeth(pkt::AethType::ack, 31, 2); });
        one(v, ConfRule::atomic_resp, 6, 103);
    }
    SECTION("aeth.syndrome: a reserved NAK code") {
        auto v = clean();
        v[5] = rc(false, op::acknowledge, 103, 0, 40, [](pkt::Headers& h) { h.aeth = aeth(pkt::AethType::nak, 7, 2); });
        one(v, ConfRule::aeth_syndrome, 6, 103);
    }
    SECTION("aeth.msn: MSN goes back") {
        auto v = clean();
        v[5] = rc(false, op::acknowledge, 103, 0, 40, [](pkt::Headers& h) { h.aeth = aeth(pkt::AethType::ack, 31, 0); });
        one(v, ConfRule::aeth_msn, 6, 103);
    }
    SECTION("cnp.pacing: two CNPs 10 µs apart") {
        auto v = clean();
        v.push_back(rc(false, op::cnp, 0, 0, 100));
        v.push_back(rc(false, op::cnp, 0, 0, 110));
        one(v, ConfRule::cnp_pacing, 13, 0);
    }
    SECTION("cnp.pacing: 46 µs apart is within the capture's 5 µs slack, 44 µs is not") {
        auto v = clean();
        v.push_back(rc(false, op::cnp, 0, 0, 100));
        v.push_back(rc(false, op::cnp, 0, 0, 146));
        CHECK(run(v).empty());
        v.push_back(rc(false, op::cnp, 0, 0, 190));
        one(v, ConfRule::cnp_pacing, 14, 0);
    }
}

// A capture stamps a received frame when its poll returns (PcapWriter::note_late): CNPs 42 us
// apart by their stamps, the first stamped up to 100 us after it arrived, may have been 142 us
// apart. Only an interval shorter however the stamps lie is a violation.
TEST_CASE("conform: cnp.pacing judges from when the previous CNP may have arrived", "[conform]") {
    auto v = clean();
    v.push_back(rc(false, op::cnp, 0, 0, 200));
    v.push_back(rc(false, op::cnp, 0, 0, 242));
    auto judge = [&](uint64_t late_first_ns, uint64_t late_second_ns) {
        port::ConformMonitor mon;
        std::vector<Violation> out;
        mon.set_sink([](void* ctx, const Violation& x) { static_cast<std::vector<Violation>*>(ctx)->push_back(x); }, &out);
        uint64_t n = 0;
        for (const Fr& f : v) {
            ++n;
            mon.frame(f.b, f.ts, n, n == 12 ? late_first_ns : n == 13 ? late_second_ns : 0);
        }
        return out;
    };
    CHECK(judge(100'000, 0).empty());
    CHECK(judge(5'000, 0).empty());      // 47 us at most: within the 5 us slack
    REQUIRE(judge(2'000, 0).size() == 1);  // 44 us at most
    CHECK(judge(2'000, 0)[0].rule == ConfRule::cnp_pacing);
    CHECK(judge(2'000, 0)[0].a == 44);
    REQUIRE(judge(0, 100'000).size() == 1);  // the later one's lateness makes it no longer
    CHECK(judge(0, 0)[0].frame == 13);

    // Offline: the same from the capture's notes.
    const auto dir = std::filesystem::temp_directory_path() / ("conform_test_l" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "late.pcap").string();
    auto offline = [&](uint64_t late_first_ns) {
        {
            port::PcapWriter w(path);
            REQUIRE(w.ok());
            REQUIRE(w.enable_notes());
            for (const Fr& f : v) {
                w.write(f.b, f.ts);
                if (w.frames() == 12 && late_first_ns) w.note_late(12, late_first_ns);
            }
        }
        port::ConformMonitor mon;
        std::vector<Violation> vs;
        std::string err;
        REQUIRE(port::conform_pcap(path, mon, vs, err));
        return vs.size();
    };
    CHECK(offline(100'000) == 0);
    CHECK(offline(0) == 1);
    std::map<uint64_t, uint64_t> late;
    CHECK(port::read_notes(path, &late).empty());  // the injection's notes: none
    CHECK(late == std::map<uint64_t, uint64_t>{});  // offline(0) wrote none
    std::filesystem::remove_all(dir);
}

namespace {

// A WRITE of 3 packets answered by `answer` at PSN 101, then what the requester does.
std::vector<Fr> retx_case(pkt::Aeth answer, const std::vector<std::pair<uint32_t, uint64_t>>& resend) {
    std::vector<Fr> v;
    v.push_back(rc(true, op::write_first, 100, 1024, 10, [](pkt::Headers& h) { h.reth.dma_len = 3072; }));
    v.push_back(rc(true, op::write_middle, 101, 1024, 11));
    v.push_back(rc(true, op::write_last, 102, 1024, 12));
    v.push_back(rc(false, op::acknowledge, 101, 0, 20, [answer](pkt::Headers& h) { h.aeth = answer; }));
    for (auto [psn, ts] : resend)
        v.push_back(rc(true, psn == 101 ? op::write_middle : op::write_last, psn, 1024, ts));
    return v;
}

}  // namespace

TEST_CASE("conform: retransmission", "[conform]") {
    const pkt::Aeth nak = aeth(pkt::AethType::nak, 0, 0);
    SECTION("from the NAK's PSN: clean") { CHECK(run(retx_case(nak, {{101, 30}, {102, 31}})).empty()); }
    SECTION("retx.psn: past the NAK's PSN") { one(retx_case(nak, {{102, 30}}), ConfRule::retx_psn, 5, 102); }
    SECTION("retx.rnr_timer: RNR timer 14 (1.28 ms) not waited") {
        const pkt::Aeth rnr = aeth(pkt::AethType::rnr_nak, 14, 0);
        CHECK(run(retx_case(rnr, {{101, 20 + 1300}})).empty());
        one(retx_case(rnr, {{101, 20 + 100}}), ConfRule::rnr_timer, 5, 101);
    }
    SECTION("retx.psn: a timeout retransmission past the oldest unacknowledged") {
        // ACK 100 (the NAK case's answer replaced), then a restart at 102: 101 skipped.
        auto v = retx_case(aeth(pkt::AethType::ack, 31, 0), {});
        v[3] = rc(false, op::acknowledge, 100, 0, 20, [](pkt::Headers& h) { h.aeth = aeth(pkt::AethType::ack, 31, 0); });
        v.push_back(rc(true, op::write_last, 102, 1024, 5000));
        one(v, ConfRule::retx_psn, 5, 102);
    }
    SECTION("retx.count: retry_cnt 1, the second retry of PSN 101") {
        port::ConformConfig cfg;
        cfg.retry_cnt = 1;
        auto v = retx_case(aeth(pkt::AethType::ack, 31, 0), {});
        v[3] = rc(false, op::acknowledge, 100, 0, 20, [](pkt::Headers& h) { h.aeth = aeth(pkt::AethType::ack, 31, 0); });
        v.push_back(rc(true, op::write_middle, 101, 1024, 5000));
        v.push_back(rc(true, op::write_last, 102, 1024, 5001));
        CHECK(run(v, cfg).empty());
        v.push_back(rc(true, op::write_middle, 101, 1024, 10000));
        one(v, ConfRule::retry_count, 7, 101, cfg);
    }
}

namespace {

// A SEND of 4 packets (PSN 100..103, as rxe sends 4 KiB at MTU 1024) never acknowledged, sent again
// whole `retries` times, 68 ms apart (timeouts). With `acks`, B's ACK of each transmission is in
// the capture too, after it (a capture taken above injection: the withheld ACKs are its frames).
std::vector<Fr> send_retried(uint32_t retries, bool acks) {
    std::vector<Fr> v;
    static constexpr uint8_t kOps[4] = {op::send_first, op::send_middle, op::send_middle, op::send_last};
    for (uint32_t r = 0; r <= retries; ++r) {
        const uint64_t t = 10 + uint64_t(r) * 68000;
        for (uint32_t i = 0; i < 4; ++i) v.push_back(rc(true, kOps[i], 100 + i, 1024, t + i));
        if (acks)
            v.push_back(rc(false, op::acknowledge, 103, 0, t + 10,
                           [](pkt::Headers& h) { h.aeth = aeth(pkt::AethType::ack, 31, 1); }));
    }
    return v;
}

}  // namespace

// IBTA 9.7.5.2: retry_cnt 7 allows 7 retries; the 8th is one too many, named once.
TEST_CASE("conform: retx.count, a SEND retried after timeouts with no ACK", "[conform]") {
    SECTION("7 retries: none") { CHECK(run(send_retried(7, false)).empty()); }
    SECTION("8 retries: one, at the 8th retry's first packet") {
        one(send_retried(8, false), ConfRule::retry_count, 4 + 7 * 4 + 1, 100);
    }
    SECTION("20 retries (rxe: retry_cnt 7 is for ever): still one, at the 8th") {
        const auto vs = run(send_retried(20, false));
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].rule == ConfRule::retry_count);
        CHECK(vs[0].frame == 4 + 7 * 4 + 1);
        CHECK(vs[0].a == 8);
        CHECK(vs[0].b == 7);
    }
    SECTION("retry_cnt 0: the first retry") {
        port::ConformConfig cfg;
        cfg.retry_cnt = 0;
        one(send_retried(3, false), ConfRule::retry_count, 5, 100, cfg);
    }
}

// A capture taken above event injection (the probe's): every ACK of the responder is in it, noted
// "not sent" (ack-withhold). The requester never saw one: its retries count.
TEST_CASE("conform: offline reader, ACKs withheld by injection are not on the wire", "[conform]") {
    const auto dir = std::filesystem::temp_directory_path() / ("conform_test_w" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "withheld.pcap").string();
    auto write = [&](uint32_t retries) {
        port::PcapWriter w(path);
        REQUIRE(w.ok());
        REQUIRE(w.enable_notes());
        for (const Fr& f : send_retried(retries, true)) {
            w.write(f.b, f.ts);
            if (f.b[pkt::kEthLen + 28] == op::acknowledge)
                w.note(w.frames(), 1, "ack-withhold dir=tx op=ack count=all", "dropped: not sent");
        }
    };
    port::ConformMonitor mon;
    std::vector<Violation> vs;
    std::string err;
    write(7);
    REQUIRE(port::conform_pcap(path, mon, vs, err));
    CHECK(vs.empty());
    CHECK(mon.stats().frames == 8 * 4);  // the 8 ACKs skipped
    write(10);
    port::ConformMonitor mon2;
    REQUIRE(port::conform_pcap(path, mon2, vs, err));
    for (const Violation& v : vs) UNSCOPED_INFO(port::describe(v, pkt::Lang::en));
    REQUIRE(vs.size() == 1);
    CHECK(vs[0].rule == ConfRule::retry_count);
    CHECK(vs[0].frame == 8 * 5 + 1);  // the capture's numbering, ACK frames included
    CHECK(vs[0].psn == 100);
    // Without the notes the ACKs count: each acknowledges PSN 103, no retry is one too many.
    std::filesystem::remove(port::notes_path(path));
    port::ConformMonitor mon3;
    vs.clear();
    REQUIRE(port::conform_pcap(path, mon3, vs, err));
    CHECK(vs.empty());
    std::filesystem::remove_all(dir);
}

TEST_CASE("conform: offline reader, a capture file", "[conform]") {
    const auto dir = std::filesystem::temp_directory_path() / ("conform_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "ghost.pcap").string();
    {
        port::PcapWriter w(path);
        REQUIRE(w.ok());
        auto v = clean();
        v.push_back(rc(false, op::acknowledge, 106 + 4096, 0, 90, [](pkt::Headers& h) { h.aeth = aeth(pkt::AethType::ack, 31, 4); }));
        for (const Fr& f : v) w.write(f.b, f.ts);
    }
    port::ConformMonitor mon;
    std::vector<Violation> vs;
    std::string err;
    REQUIRE(port::conform_pcap(path, mon, vs, err));
    REQUIRE(vs.size() == 1);
    CHECK(vs[0].rule == ConfRule::resp_unsolicited);
    CHECK(vs[0].frame == 12);
    CHECK(vs[0].qp == kQpA);
    CHECK(mon.stats().frames == 12);
    CHECK(port::describe(vs[0], pkt::Lang::en) ==
          "frame 12 198.18.0.3 -> 198.18.0.2 QP 0x000011 PSN 4202: a response for a request never sent: the "
          "requester's last PSN is 106 [resp.unsolicited, IBTA 9.7.5.2 (a response for a PSN never sent), error]");
    CHECK(port::to_json(vs[0], pkt::Lang::zh).find("\"rule\":\"resp.unsolicited\"") != std::string::npos);
    // Bad input: a typed error, no crash.
    CHECK_FALSE(port::conform_pcap((dir / "missing.pcap").string(), mon, vs, err));
    CHECK(!err.empty());
    std::filesystem::remove_all(dir);
}

// Every rxe reference capture: nothing, except the deviations docs/conform.md lists.
TEST_CASE("conform: the rxe reference captures", "[conform]") {
    const char* dir = std::getenv("HCAEMU_CAPTURES");
    REQUIRE(dir != nullptr);  // meson sets it
    size_t files = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
        if (e.path().extension() != ".pcap") continue;
        ++files;
        port::ConformMonitor mon;
        std::vector<Violation> vs;
        std::string err;
        INFO(e.path().filename().string());
        REQUIRE(port::conform_pcap(e.path().string(), mon, vs, err));
        for (const Violation& v : vs) UNSCOPED_INFO(port::describe(v, pkt::Lang::en));
        if (e.path().filename() == "loss5_write_send_read.pcap") {
            // Documented: netem dropped the retransmitted PSN 2892353 before the capture point, so
            // the restart appears to begin one PSN late (docs/conform.md, "rxe captures").
            REQUIRE(vs.size() == 1);
            CHECK(vs[0].rule == ConfRule::retx_psn);
            CHECK(vs[0].frame == 218);
            CHECK(vs[0].psn == 2892354);
        } else {
            CHECK(vs.empty());
        }
    }
    CHECK(files >= 8);
}

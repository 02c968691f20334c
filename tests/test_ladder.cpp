// The ladder model (tools/ladder) on captures made here over the in-memory wire (SimPair): exact
// lanes, arrows and labels, a loss ending in a cross and its retransmission, NAKs, RNR NAKs, READ
// responses tied to their request, the summary and the filters; bad input; the rxe captures.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "dpdk_port/pcap_file.hpp"
#include "packet/build.hpp"
#include "packet/parse.hpp"
#include "tools/ladder/ladder.hpp"
#include "tools/hcaemu/sim_pair.hpp"

using namespace hcaemu;
namespace fs = std::filesystem;
using ladder::Arrow;
using ladder::Ladder;

namespace {

std::string tmp_path(const std::string& name) {
    static const fs::path dir = [] {
        fs::path d = fs::temp_directory_path() / ("hcaemu_ladder_test." + std::to_string(getpid()));
        fs::create_directories(d);
        return d;
    }();
    return (dir / name).string();
}

std::string qp_hex(uint32_t q) {
    char b[16];
    std::snprintf(b, sizeof b, "0x%06x", q);
    return b;
}

// Two HCAs on the in-memory wire; every frame sent goes to a pcap, the wire's drops to a list,
// as `hcaemu sim --ladder` does.
struct Bench {
    explicit Bench(const std::string& name, tools::SimConfig c = {}) : p(c), path(tmp_path(name)), pcap(path) {
        REQUIRE(pcap.ok());
        p.wire.set_tap([this](int, const uint8_t* f, uint32_t len, uint64_t t, port::Event ev) {
            if (ev == port::Event::sent) {
                pcap.write({f, len}, t);
                ++frames;
            }
            if (ev == port::Event::lost) drops.push_back({frames, ladder::DropReason::lost});
        });
    }
    tools::SimPair p;
    std::string path;
    port::PcapWriter pcap;
    uint64_t frames = 0;
    std::vector<ladder::Drop> drops;
    std::vector<Wc> cqes[2];

    Status post(WrOpcode op, uint32_t len, uint64_t wr_id) {
        Sge sge{p.side[0].mr.addr(), len, p.side[0].mr.lkey()};
        SendWr w;
        w.wr_id = wr_id;
        w.sg_list = &sge;
        w.num_sge = 1;
        w.opcode = op;
        w.send_flags = send_flag::signaled;
        w.rdma = {p.side[1].mr.addr() + 65536, p.side[1].mr.rkey()};
        w.atomic = {p.side[1].mr.addr() + 65536, 0, 1, p.side[1].mr.rkey()};
        const SendWr* bad = nullptr;
        return p.side[0].qp.post_send(&w, &bad);
    }
    Status post_recv(uint32_t len) {
        Sge sge{p.side[1].mr.addr(), len, p.side[1].mr.lkey()};
        RecvWr r;
        r.wr_id = 9;
        r.sg_list = &sge;
        r.num_sge = 1;
        const RecvWr* bad = nullptr;
        return p.side[1].qp.post_recv(&r, &bad);
    }
    bool wait(size_t a) {
        return p.run_until([&] {
            Wc wc[8];
            for (int i = 0; i < 2; ++i)
                for (int n; (n = p.side[i].cq.poll(wc)) > 0;) cqes[i].insert(cqes[i].end(), wc, wc + n);
            return cqes[0].size() >= a;
        });
    }
    Ladder ladder(const ladder::Options& o = {}) {
        pcap.flush();
        ladder::Builder b;
        std::string err;
        REQUIRE(ladder::read_pcap(path, b, err));
        for (const auto& d : drops) b.drop(d);
        return b.build(o);
    }
    std::string a_lane() const { return "198.18.0.1 QP " + qp_hex(p.side[0].qp.qpn()); }
    std::string b_lane() const { return "198.18.0.2 QP " + qp_hex(p.side[1].qp.qpn()); }
};

std::string dump(const Ladder& l) {
    std::string s;
    for (const Arrow& a : l.arrows)
        s += std::to_string(a.frame) + " " + std::to_string(a.from) + "->" + std::to_string(a.to) + " " + a.label + " | " + a.note + "\n";
    return s;
}

size_t count(const std::string& hay, const std::string& needle) {
    size_t n = 0;
    for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
    return n;
}

}  // namespace

TEST_CASE("ladder: a 3000-byte WRITE, exact lanes, arrows and labels", "[ladder]") {
    Bench b("write.pcap");
    REQUIRE(b.post(WrOpcode::rdma_write, 3000, 1) == Status::ok);
    REQUIRE(b.wait(1));
    const Ladder l = b.ladder();
    INFO(dump(l));
    REQUIRE(l.lanes.size() == 2);
    CHECK(l.lanes[0].name == b.a_lane());
    CHECK(l.lanes[1].name == b.b_lane());
    REQUIRE(l.arrows.size() == 4);
    CHECK(l.arrows[0].label == "RDMA WRITE First PSN 0x000100 len 1024");
    CHECK(l.arrows[1].label == "RDMA WRITE Middle PSN 0x000101 len 1024");
    CHECK(l.arrows[2].label == "RDMA WRITE Last PSN 0x000102 len 952");
    CHECK(l.arrows[3].label == "ACK PSN 0x000102 MSN 1");
    CHECK(l.arrows[3].note == "acks PSN 0x000100..0x000102");
    CHECK(l.arrows[3].answers == 2);
    for (int i = 0; i < 3; ++i) CHECK((l.arrows[size_t(i)].from == 0 && l.arrows[size_t(i)].to == 1 && l.arrows[size_t(i)].request));
    CHECK((l.arrows[3].from == 1 && l.arrows[3].to == 0 && !l.arrows[3].request));
    CHECK(l.arrows[3].syndrome == ladder::Syndrome::ack);
    for (const Arrow& a : l.arrows) CHECK((!a.retx && !a.dup && !a.lost && !a.malformed));
    CHECK(l.stats.frames == 4);
    CHECK(l.stats.roce == 4);
    CHECK(l.stats.skipped == 0);

    const std::string svg = ladder::render_svg(l, {"t"});
    CHECK(count(svg, "<g class=\"arrow ") == 4);
    CHECK(count(svg, "RDMA WRITE Middle PSN 0x000101 len 1024</text>") == 1);
    CHECK(svg.find("<script") == std::string::npos);
    CHECK(svg.find("href") == std::string::npos);

    ladder::Options sum;
    sum.summary = true;
    const Ladder s = b.ladder(sum);
    INFO(dump(s));
    REQUIRE(s.arrows.size() == 2);
    CHECK(s.arrows[0].label == "RDMA WRITE PSN 0x000100..0x000102 3 pkts len 3000");
    CHECK(s.arrows[0].packets == 3);
    CHECK(s.arrows[1].label == "ACK PSN 0x000102 MSN 1");
    CHECK(s.arrows[1].answers == 0);
    CHECK(s.stats.shown == 4);
}

TEST_CASE("ladder: a WRITE Middle lost on the wire ends in a cross; the NAK and the retransmission are marked", "[ladder]") {
    Bench b("loss.pcap");
    b.p.wire.set_filter(0, [](const uint8_t*, uint32_t, uint64_t seq) { return seq == 1 ? port::Action::drop : port::Action::pass; });
    REQUIRE(b.post(WrOpcode::rdma_write, 3000, 1) == Status::ok);
    REQUIRE(b.wait(1));
    const Ladder l = b.ladder();
    INFO(dump(l));
    REQUIRE(b.drops.size() == 1);
    CHECK(b.drops[0].frame == 2);
    REQUIRE(l.arrows.size() == 7);
    CHECK(l.arrows[1].label == "RDMA WRITE Middle PSN 0x000101 len 1024");
    CHECK(l.arrows[1].lost);
    CHECK(l.arrows[1].note == "lost on the wire");
    CHECK(l.arrows[3].label == "NAK PSN 0x000101 MSN 0 PSN sequence error");
    CHECK(l.arrows[3].syndrome == ladder::Syndrome::nak);
    CHECK(l.arrows[3].note == "acks PSN 0x000100..0x000100, resend from PSN 0x000101");
    CHECK(l.arrows[4].label == "RDMA WRITE Middle PSN 0x000101 len 1024");
    CHECK((l.arrows[4].retx && !l.arrows[4].dup && !l.arrows[4].lost));
    CHECK(l.arrows[4].note == "retx");
    CHECK((l.arrows[5].retx && l.arrows[5].note == "retx"));
    CHECK(l.arrows[6].label == "ACK PSN 0x000102 MSN 1");
    CHECK(l.arrows[6].note == "acks PSN 0x000101..0x000102");
    CHECK(l.arrows[6].answers == 5);  // the retransmitted Last
    CHECK(l.stats.lost == 1);

    const std::string svg = ladder::render_svg(l, {"t"});
    CHECK(count(svg, "<g class=\"arrow ") == 7);
    CHECK(count(svg, "<g class=\"arrow req lost\"") == 1);
    CHECK(count(svg, "<g class=\"arrow resp nak\"") == 1);
    CHECK(count(svg, "<g class=\"arrow req retx\"") == 2);
    CHECK(count(svg, "stroke=\"#d50000\"") == 2 + 2);  // the lost arrow's cross and the legend's

    ladder::Options sum;
    sum.summary = true;
    const Ladder s = b.ladder(sum);
    INFO(dump(s));
    REQUIRE(s.arrows.size() == 6);  // First | Middle (lost) | Last | NAK | Middle..Last retx | ACK
    CHECK(s.arrows[4].label == "RDMA WRITE Middle..Last PSN 0x000101..0x000102 2 pkts len 1976");
    CHECK(s.arrows[4].retx);
}

TEST_CASE("ladder: a SEND with no receive WQE posted: RNR NAK, then the SEND again", "[ladder]") {
    Bench b("rnr.pcap");
    REQUIRE(b.post(WrOpcode::send, 64, 1) == Status::ok);
    REQUIRE(b.p.run_until([&] { return b.p.side[1].dev->counters().get(Counter::send_rnr_err) == 1; }));
    REQUIRE(b.post_recv(64) == Status::ok);
    REQUIRE(b.wait(1));
    const Ladder l = b.ladder();
    INFO(dump(l));
    REQUIRE(l.arrows.size() == 4);
    CHECK(l.arrows[0].label == "SEND Only PSN 0x000100 len 64");
    CHECK(l.arrows[1].label == "RNR NAK PSN 0x000100 MSN 0 timer 0.01 ms");
    CHECK(l.arrows[1].syndrome == ladder::Syndrome::rnr_nak);
    CHECK(l.arrows[1].note == "retry PSN 0x000100 in 0.01 ms");
    CHECK(l.arrows[1].answers == 0);
    CHECK(l.arrows[2].label == "SEND Only PSN 0x000100 len 64");
    CHECK(l.arrows[2].retx);
    CHECK(l.arrows[3].label == "ACK PSN 0x000100 MSN 1");
    CHECK(l.arrows[3].note == "acks PSN 0x000100");
    CHECK(l.arrows[3].answers == 2);
    const std::string svg = ladder::render_svg(l, {"t"});
    CHECK(count(svg, "<g class=\"arrow resp rnr\"") == 1);
    CHECK(count(svg, "stroke=\"#e65100\"") == 3);  // the RNR NAK, its tie to the SEND, the legend's
}

TEST_CASE("ladder: READ responses and atomic ACKs answer their request; --frames and --qp", "[ladder]") {
    Bench b("read.pcap");
    REQUIRE(b.post(WrOpcode::rdma_read, 2100, 1) == Status::ok);
    REQUIRE(b.post(WrOpcode::atomic_fetch_and_add, 8, 2) == Status::ok);
    REQUIRE(b.wait(2));
    const Ladder l = b.ladder();
    INFO(dump(l));
    REQUIRE(l.arrows.size() == 6);
    CHECK(l.arrows[0].label == "RDMA READ Request PSN 0x000100 DMA len 2100");
    CHECK(l.arrows[1].label == "FetchAdd PSN 0x000103");
    CHECK(l.arrows[2].label == "RDMA READ response First PSN 0x000100 len 1024 MSN 1");
    CHECK(l.arrows[3].label == "RDMA READ response Middle PSN 0x000101 len 1024");
    CHECK(l.arrows[4].label == "RDMA READ response Last PSN 0x000102 len 52 MSN 1");
    for (int i = 2; i < 5; ++i) {
        CHECK(l.arrows[size_t(i)].note == "answers READ PSN 0x000100");
        CHECK(l.arrows[size_t(i)].answers == 0);
    }
    CHECK(l.arrows[5].label == "ATOMIC Acknowledge PSN 0x000103 MSN 2");
    CHECK(l.arrows[5].note == "answers FetchAdd PSN 0x000103");
    CHECK(l.arrows[5].answers == 1);

    ladder::Options o;
    o.first_frame = 3;
    o.last_frame = 4;
    const Ladder f = b.ladder(o);
    REQUIRE(f.arrows.size() == 2);
    CHECK(f.arrows[0].frame == 3);
    CHECK(f.arrows[0].answers == -1);  // the READ request is outside the range
    CHECK(f.arrows[0].note == "answers READ PSN 0x000100");

    o = {};
    o.qp_filter = true;
    o.qp = b.p.side[1].qp.qpn();
    CHECK(b.ladder(o).arrows.size() == 6);
    o.qp = 0x777;
    CHECK(b.ladder(o).arrows.empty());

    ladder::Options sum;
    sum.summary = true;
    const Ladder s = b.ladder(sum);
    INFO(dump(s));
    REQUIRE(s.arrows.size() == 4);
    CHECK(s.arrows[2].label == "RDMA READ response PSN 0x000100..0x000102 3 pkts len 2100 MSN 1");
    CHECK(s.arrows[2].answers == 0);
    CHECK(s.arrows[3].answers == 1);
}

namespace {

// A frame from `src` to `dst` (198.18.0.x) with this opcode, DestQP and PSN.
std::vector<uint8_t> frame(uint8_t src, uint8_t dst, uint8_t opcode, uint32_t dqp, uint32_t psn, uint16_t sport,
                           uint16_t ip_id = 0, uint32_t payload = 0) {
    pkt::Headers h;
    h.eth.ethertype = pkt::kEthTypeIpv4;
    h.ip4.src = 0xC6120000u | src;
    h.ip4.dst = 0xC6120000u | dst;
    h.ip4.id = ip_id;
    h.udp.sport = sport;
    h.bth.opcode = opcode;
    h.bth.dest_qp = dqp;
    h.bth.psn = psn;
    h.aeth.syndrome = pkt::kAethCreditInvalid;
    std::vector<uint8_t> pay(payload, 0xAB), out(2048);
    size_t len = 0;
    REQUIRE(pkt::build(h, pay, out, len) == pkt::BuildError::ok);
    out.resize(len);
    return out;
}

void write_pcap(const std::string& path, const std::vector<std::vector<uint8_t>>& frames) {
    port::PcapWriter w(path);
    REQUIRE(w.ok());
    uint64_t t = 1'000'000'000;
    for (const auto& f : frames) w.write(f, t += 1000);
}

}  // namespace

TEST_CASE("ladder: two connections between the same hosts are paired by UDP source port; copies are dup", "[ladder]") {
    using namespace pkt::op;
    ladder::Builder b;
    // QP 0x11 <-> 0x21 (source port 0xC001) and QP 0x12 <-> 0x22 (0xC002), interleaved.
    const auto s1 = frame(1, 2, send_only, 0x21, 0x10, 0xC001, 1, 8);
    b.add(s1, 1000);
    b.add(frame(1, 2, send_only, 0x22, 0x50, 0xC002, 2, 8), 2000);
    b.add(frame(2, 1, acknowledge, 0x12, 0x50, 0xC002, 3), 3000);
    b.add(frame(2, 1, acknowledge, 0x11, 0x10, 0xC001, 4), 4000);
    b.add(s1, 5000);                                                  // a byte-identical copy
    b.add(frame(1, 2, send_only, 0x21, 0x10, 0xC001, 5, 8), 2'005'000);  // resent: a new IP ID
    const Ladder l = b.build({});
    INFO(dump(l));
    REQUIRE(l.lanes.size() == 4);
    CHECK(l.lanes[0].name == "198.18.0.1 QP 0x000011");
    CHECK(l.lanes[1].name == "198.18.0.1 QP 0x000012");
    CHECK(l.lanes[2].name == "198.18.0.2 QP 0x000021");
    CHECK(l.lanes[3].name == "198.18.0.2 QP 0x000022");
    REQUIRE(l.arrows.size() == 6);
    CHECK((l.arrows[0].from == 0 && l.arrows[0].to == 2));
    CHECK((l.arrows[1].from == 1 && l.arrows[1].to == 3));
    CHECK((l.arrows[2].from == 3 && l.arrows[2].to == 1 && l.arrows[2].answers == 1));
    CHECK((l.arrows[3].from == 2 && l.arrows[3].to == 0 && l.arrows[3].answers == 0));
    CHECK((l.arrows[4].dup && l.arrows[4].retx && l.arrows[4].note == "dup"));
    CHECK((l.arrows[5].retx && !l.arrows[5].dup && l.arrows[5].note == "retx"));
    // 2 ms of silence before the last frame: one gap of its length.
    REQUIRE(l.gaps.size() == 1);
    CHECK(l.gaps[0].before == 5);
    CHECK(l.gaps[0].ns == 2'000'000);
    const std::string svg = ladder::render_svg(l, {"t"});
    CHECK(count(svg, "<g class=\"gap\">") == 1);
    CHECK(svg.find("\u2026 2 ms \u2026") != std::string::npos);
    CHECK(count(svg, "<g class=\"arrow req retx dup\"") == 1);
    CHECK(count(svg, "<g class=\"lane\">") == 4);

    // Only one direction seen: the sender's QP is unknown.
    ladder::Builder one;
    one.add(frame(1, 2, send_only, 0x21, 0x10, 0xC001), 0);
    const Ladder u = one.build({});
    REQUIRE(u.lanes.size() == 2);
    CHECK(u.lanes[0].name == "198.18.0.1 QP ?");
}

TEST_CASE("ladder: bad input gives a clear error, never a crash", "[ladder]") {
    std::string err;
    ladder::Builder b;
    SECTION("a file that is not a pcap") {
        const std::string p = tmp_path("not.pcap");
        std::ofstream(p) << "this is not a capture\n";
        CHECK_FALSE(ladder::read_pcap(p, b, err));
        CHECK(!err.empty());
        CHECK(ladder::write_ladder(p, {}, tmp_path("x.svg"), {}, err) == ladder::WriteResult::bad_input);
        CHECK_FALSE(fs::exists(tmp_path("x.svg")));
    }
    SECTION("a missing file") {
        CHECK_FALSE(ladder::read_pcap(tmp_path("missing.pcap"), b, err));
        CHECK(!err.empty());
    }
    SECTION("a truncated pcap: an error naming the frames read") {
        const std::string p = tmp_path("cut.pcap");
        write_pcap(p, {frame(1, 2, pkt::op::send_only, 0x21, 1, 0xC001, 1, 100), frame(1, 2, pkt::op::send_only, 0x21, 2, 0xC001, 2, 100)});
        fs::resize_file(p, fs::file_size(p) - 50);
        CHECK_FALSE(ladder::read_pcap(p, b, err));
        INFO(err);
        CHECK(err.find("read error after 1 frames") != std::string::npos);
        CHECK(ladder::write_ladder(p, {}, tmp_path("cut.svg"), {}, err) == ladder::WriteResult::bad_input);
        CHECK_FALSE(fs::exists(tmp_path("cut.svg")));
    }
    SECTION("an empty capture") {
        const std::string p = tmp_path("empty.pcap");
        write_pcap(p, {});
        CHECK(ladder::read_pcap(p, b, err));
        CHECK(ladder::write_ladder(p, {}, tmp_path("empty.svg"), {}, err) == ladder::WriteResult::nothing_to_draw);
        CHECK(err.find("no RoCE v2 frame to draw (0 frames") != std::string::npos);
        CHECK_FALSE(fs::exists(tmp_path("empty.svg")));
    }
    SECTION("non-RoCE frames are skipped and counted; a frame cut in its BTH is counted; a bad ICRC is drawn, marked") {
        std::vector<uint8_t> arp(60, 0);
        arp[12] = 0x08;
        arp[13] = 0x06;
        auto other_udp = frame(1, 2, pkt::op::send_only, 0x21, 1, 0xC001);
        other_udp[14 + 20 + 3] = 0x00;  // UDP destination port 0x12b7 (4791) -> 0x1200
        auto cut = frame(1, 2, pkt::op::send_only, 0x21, 1, 0xC001);
        cut.resize(14 + 20 + 8 + 6);  // 6 bytes of BTH; the IP and UDP lengths made to match
        cut[16] = 0;
        cut[17] = uint8_t(20 + 8 + 6);
        cut[14 + 20 + 4] = 0;
        cut[14 + 20 + 5] = 8 + 6;
        cut[24] = cut[25] = 0;
        const uint16_t ck = pkt::ipv4_header_checksum(cut.data() + 14);
        cut[24] = uint8_t(ck >> 8);
        cut[25] = uint8_t(ck);
        auto bad = frame(1, 2, pkt::op::send_only, 0x21, 7, 0xC001, 9, 16);
        bad[bad.size() - 1] ^= 0xFF;  // the ICRC
        const std::string p = tmp_path("mixed.pcap");
        write_pcap(p, {arp, other_udp, cut, bad, frame(2, 1, pkt::op::acknowledge, 0x11, 7, 0xC001)});
        const std::string out = tmp_path("mixed.svg");
        ladder::Ladder l;
        REQUIRE(ladder::write_ladder(p, {}, out, {}, err, &l) == ladder::WriteResult::ok);
        INFO(dump(l));
        CHECK(l.stats.frames == 5);
        CHECK(l.stats.skipped == 2);
        CHECK(l.stats.malformed == 1);
        CHECK(l.stats.roce == 2);
        REQUIRE(l.arrows.size() == 2);
        CHECK(l.arrows[0].malformed);
        CHECK(l.arrows[0].error == pkt::ParseError::bad_icrc);
        CHECK(l.arrows[0].note == "bad ICRC");
        CHECK(fs::exists(out));
    }
    SECTION("bad output names") {
        const std::string p = tmp_path("ok.pcap");
        write_pcap(p, {frame(1, 2, pkt::op::send_only, 0x21, 1, 0xC001)});
        CHECK(ladder::write_ladder(p, {}, tmp_path("ok.png"), {}, err) == ladder::WriteResult::bad_input);
        CHECK(ladder::write_ladder(p, {}, "/nonexistent-dir/x.svg", {}, err) == ladder::WriteResult::write_failed);
        ladder::Options o;
        o.first_frame = 5;
        CHECK(ladder::write_ladder(p, {}, tmp_path("ok.svg"), o, err) == ladder::WriteResult::nothing_to_draw);
    }
}

TEST_CASE("ladder: every RoCE v2 frame of every rxe capture becomes an arrow", "[ladder][captures]") {
    const char* env = std::getenv("HCAEMU_CAPTURES");
    const std::string dir = env && *env ? env : "../shared/captures/rxe";
    if (!fs::is_directory(dir)) {
        WARN("rxe captures not found at " << dir << " (set HCAEMU_CAPTURES): skipped");
        return;
    }
    size_t files = 0;
    for (const auto& e : fs::directory_iterator(dir)) {
        if (e.path().extension() != ".pcap") continue;
        ++files;
        INFO(e.path().string());
        // The count by the packet layer alone: UDP/4791 frames.
        uint64_t roce = 0;
        {
            port::PcapReader r(e.path().string());
            REQUIRE(r.ok());
            port::PcapFrame f;
            while (r.next(f)) {
                pkt::Packet p;
                const pkt::ParseError pe = pkt::parse(f.data, p);
                roce += pkt::decoded_udp(pe) && pe != pkt::ParseError::bad_udp_length && p.h.udp.dport == pkt::kRoceV2Port;
            }
        }
        ladder::Builder b;
        std::string err;
        REQUIRE(ladder::read_pcap(e.path().string(), b, err));
        const Ladder l = b.build({});
        CHECK(l.arrows.size() == roce);
        CHECK(l.stats.roce == roce);
        const std::string svg = ladder::render_svg(l, {e.path().filename().string()});
        CHECK(count(svg, "<g class=\"arrow ") == roce);
        if (e.path().filename() == "loss5_write_send_read.pcap") {
            // The README's figures: 9 NAKs (PSN sequence error); retransmissions marked.
            size_t naks = 0, retx = 0;
            for (const Arrow& a : l.arrows) {
                naks += a.syndrome == ladder::Syndrome::nak;
                retx += a.retx;
            }
            CHECK(naks == 9);
            CHECK(retx > 0);
            CHECK(l.lanes.size() == 6);
            ladder::Options s;
            s.summary = true;
            CHECK(b.build(s).arrows.size() < l.arrows.size());
        }
    }
    CHECK(files >= 7);
}

// The packet layer on real RoCE v2 traffic: Linux Soft-RoCE captures in ../shared/captures/rxe.
// Exits 77 (meson's SKIP) with a message when the captures are not there.
#include <catch2/catch.hpp>

#include "catch_run.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "dpdk_port/pcap_file.hpp"
#include "packet/build.hpp"
#include "packet/icrc.hpp"
#include "packet/parse.hpp"

using namespace hcaemu::pkt;
namespace fs = std::filesystem;

namespace {

std::string g_dir;

struct Frame {
    std::vector<uint8_t> bytes;
};

std::vector<std::string> capture_files() {
    std::vector<std::string> v;
    for (const auto& e : fs::directory_iterator(g_dir))
        if (e.path().extension() == ".pcap") v.push_back(e.path().string());
    std::sort(v.begin(), v.end());
    return v;
}

std::vector<Frame> read_all(const std::string& path) {
    hcaemu::port::PcapReader r(path);
    REQUIRE(r.ok());
    std::vector<Frame> v;
    hcaemu::port::PcapFrame f;
    while (r.next(f)) {
        REQUIRE(f.orig_len == f.data.size());  // captured with -s 0
        v.push_back({{f.data.begin(), f.data.end()}});
    }
    REQUIRE(r.error().empty());
    return v;
}

// RoCE v2 frames are the UDP/4791 ones; the captures also hold TCP (the out-of-band exchange).
bool is_roce_udp(const std::vector<uint8_t>& f) {
    Packet p;
    const ParseError e = parse(f, p);
    return e != ParseError::not_ip && e != ParseError::not_udp && e != ParseError::not_roce_port;
}

}  // namespace

TEST_CASE("every RoCE v2 frame of every capture parses, with a good ICRC under every CRC variant", "[captures]") {
    size_t total = 0;
    const CrcImpl saved = crc_impl();
    for (const auto& path : capture_files()) {
        size_t n = 0;
        for (const auto& fr : read_all(path)) {
            if (!is_roce_udp(fr.bytes)) continue;
            for (size_t c = 0; c < kCrcImplCount; ++c) {
                if (!crc_impl_available(CrcImpl(c))) continue;
                set_crc_impl(CrcImpl(c));
                Packet p;
                INFO(path << " frame " << n << " crc " << kCrcImplName[c]);
                REQUIRE(parse(fr.bytes, p) == ParseError::ok);
            }
            ++n;
        }
        set_crc_impl(saved);
        INFO(path);
        if (path.find("oob_exchange") == std::string::npos) CHECK(n > 0);
        total += n;
    }
    CHECK(total >= 1000);  // 1017 RoCE frames in the set described by the captures' README
}

TEST_CASE("rebuilding every captured frame from its parsed fields gives identical bytes", "[captures]") {
    for (const auto& path : capture_files()) {
        size_t i = 0;
        for (const auto& fr : read_all(path)) {
            ++i;
            if (!is_roce_udp(fr.bytes)) continue;
            Packet p;
            REQUIRE(parse(fr.bytes, p) == ParseError::ok);
            std::vector<uint8_t> out(fr.bytes.size() + 64);
            size_t len = 0;
            BuildOptions bo;
            bo.udp_checksum = p.h.udp.checksum != 0 ? UdpCsum::compute : UdpCsum::zero;
            INFO(path << " frame " << i);
            REQUIRE(build(p.h, p.payload(), out, len, bo) == BuildError::ok);
            out.resize(len);
            REQUIRE(out == fr.bytes);
        }
    }
}

TEST_CASE("the UDP source port is Linux's flow-label hash of the connection's two QPNs", "[captures]") {
    // A frame from host A to QP qb carries the port of the pair (qa, qb), where qa is one of A's
    // QPs: the DestQPs of the frames sent to A. host_python_peer's host side picks its own port.
    size_t checked = 0;
    for (const auto& path : capture_files()) {
        if (path.find("host_python_peer") != std::string::npos) continue;
        std::map<uint32_t, std::set<uint32_t>> qps_of;  // IPv4 address -> its QPNs
        std::vector<Packet> pkts;
        const auto frames = read_all(path);
        for (const auto& fr : frames) {
            Packet p;
            if (parse(fr.bytes, p) != ParseError::ok) continue;
            qps_of[p.h.ip4.dst].insert(p.h.bth.dest_qp);
            pkts.push_back(p);
        }
        for (const Packet& p : pkts) {
            size_t match = 0;
            for (uint32_t qa : qps_of[p.h.ip4.src]) {
                match += udp_sport_for_flow(0, qa, p.h.bth.dest_qp) == p.h.udp.sport;
                CHECK(udp_sport_for_flow(0, qa, p.h.bth.dest_qp) == udp_sport_for_flow(0, p.h.bth.dest_qp, qa));
            }
            INFO(path << " sport " << p.h.udp.sport << " DestQP " << p.h.bth.dest_qp);
            CHECK(match >= 1);
            ++checked;
        }
    }
    CHECK(checked >= 1000);
}

TEST_CASE("every single-bit flip and truncation of captured frames gives a typed error", "[captures][robust]") {
    size_t frames = 0;
    for (const auto& path : capture_files()) {
        size_t per_file = 0;
        for (const auto& fr : read_all(path)) {
            Packet p0;
            if (parse(fr.bytes, p0) != ParseError::ok) continue;
            if (++per_file > 60) break;  // the loss capture repeats the same shapes 800 times
            ++frames;
            for (size_t i = 12; i < p0.len; ++i) {  // from the EtherType on: MACs are the FCS's job
                if (i == size_t(p0.bth_off) + 4) continue;  // FECN/BECN/resv6: variant by design
                for (int bit = 0; bit < 8; ++bit) {
                    auto f = fr.bytes;
                    f[i] ^= uint8_t(1u << bit);
                    Packet p;
                    INFO(path << " byte " << i << " bit " << bit);
                    REQUIRE(parse(f, p) != ParseError::ok);
                }
            }
            for (size_t n = 0; n < p0.len; ++n) {
                std::vector<uint8_t> f(fr.bytes.begin(), fr.bytes.begin() + long(n));
                Packet p;
                REQUIRE(parse(f, p) != ParseError::ok);
            }
        }
    }
    CHECK(frames >= 200);
}

int main(int argc, char** argv) {
    const char* env = std::getenv("HCAEMU_CAPTURES");
    g_dir = env && *env ? env : "../shared/captures/rxe";
    std::error_code ec;
    if (!fs::is_directory(g_dir, ec)) {
        std::printf("SKIP: Linux rxe reference captures not found at '%s' (set HCAEMU_CAPTURES)\n", g_dir.c_str());
        return 77;
    }
    std::printf("captures: %s\n", g_dir.c_str());
    return run_catch(argc, argv);
}

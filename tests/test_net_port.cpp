// NetPort: ARP (RFC 826) and IPv6 neighbour discovery (RFC 4861) answered and resolved byte for
// byte, the RoCE-only receive filter with its counters, malformed ARP/ND dropped and counted, pcap
// capture of every frame exactly once, and two HCAs that find each other by ARP and by ND.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "dpdk_port/mem_wire.hpp"
#include "dpdk_port/net_port.hpp"
#include "dpdk_port/pcap_file.hpp"
#include "packet/build.hpp"
#include "packet/headers.hpp"

using namespace hcaemu;
using namespace hcaemu::port;
using Bytes = std::vector<uint8_t>;

namespace {

constexpr uint32_t kIpA = 0xC6120001;  // 198.18.0.1, the NetPort's
constexpr uint32_t kIpB = 0xC6120002;  // 198.18.0.2, the raw peer's
const pkt::Mac kMacA{0x02, 0, 0, 0, 0, 0x01};
const pkt::Mac kMacB{0x02, 0, 0, 0, 0, 0x02};
const pkt::Ip6 kIp6A{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a};
const pkt::Ip6 kIp6B{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0b};

WireConfig wire_config() {
    WireConfig c;
    c.latency_ns = 1000;
    c.pool_frames = 64;
    c.rx_ring = 64;
    return c;
}

NetConfig net_config() {
    NetConfig n;
    n.ip4 = kIpA;
    n.ip6 = kIp6A;
    return n;
}

// End 0 behind a NetPort, end 1 driven raw by the test.
struct Bench {
    VirtualClock clock;
    MemWire wire{wire_config(), clock};
    NetPort net{wire.end(0), clock, net_config()};
    Port& peer = wire.end(1);

    void peer_send(const Bytes& b) {
        Frame f;
        REQUIRE(peer.alloc(f));
        std::memcpy(f.data, b.data(), b.size());
        f.len = uint32_t(b.size());
        REQUIRE(peer.tx_burst(&f, 1) == 1);
    }
    // Everything the peer has received after the wire's latency.
    std::vector<Bytes> peer_recv() {
        clock.advance(10'000);
        std::vector<Bytes> out;
        Frame fs[16];
        for (uint16_t n; (n = peer.rx_burst(fs, 16)) != 0;)
            for (uint16_t i = 0; i < n; ++i) {
                out.emplace_back(fs[i].data, fs[i].data + fs[i].len);
                peer.free(fs[i]);
            }
        return out;
    }
    // Frames the NetPort returns (RoCE v2 for us), after the wire's latency.
    std::vector<Bytes> net_recv() {
        clock.advance(10'000);
        std::vector<Bytes> out;
        Frame fs[16];
        const uint16_t n = net.rx_burst(fs, 16);
        for (uint16_t i = 0; i < n; ++i) {
            out.emplace_back(fs[i].data, fs[i].data + fs[i].len);
            net.free(fs[i]);
        }
        return out;
    }
};

void put16(Bytes& b, uint16_t v) { b.push_back(uint8_t(v >> 8)); b.push_back(uint8_t(v)); }
void put32(Bytes& b, uint32_t v) { put16(b, uint16_t(v >> 16)); put16(b, uint16_t(v)); }
template <class A> void put(Bytes& b, const A& a) { b.insert(b.end(), a.begin(), a.end()); }

// An ARP frame written field by field from RFC 826, padded to 60 bytes.
Bytes arp(const pkt::Mac& eth_dst, const pkt::Mac& eth_src, uint16_t op, const pkt::Mac& sha, uint32_t spa,
          const pkt::Mac& tha, uint32_t tpa) {
    Bytes b;
    put(b, eth_dst);
    put(b, eth_src);
    put16(b, 0x0806);
    put16(b, 1);       // htype Ethernet
    put16(b, 0x0800);  // ptype IPv4
    b.push_back(6);
    b.push_back(4);
    put16(b, op);
    put(b, sha);
    put32(b, spa);
    put(b, tha);
    put32(b, tpa);
    b.resize(60, 0);
    return b;
}

const pkt::Mac kBcast{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
const pkt::Mac kZero{};

}  // namespace

TEST_CASE("ARP request for our IP gets a byte-exact reply and teaches the sender") {
    Bench b;
    b.peer_send(arp(kBcast, kMacB, 1, kMacB, kIpB, kZero, kIpA));
    CHECK(b.net_recv().empty());
    const auto got = b.peer_recv();
    REQUIRE(got.size() == 1);
    CHECK(got[0] == arp(kMacB, kMacA, 2, kMacA, kIpA, kMacB, kIpB));
    CHECK(b.net.net_stats().arp_rx_requests == 1);
    CHECK(b.net.net_stats().arp_tx_replies == 1);
    CHECK(b.net.net_stats().rx_dropped_not_roce == 0);
    CHECK(b.net.net_stats().rx_dropped_bad == 0);
    pkt::Mac m{};
    CHECK(b.net.resolve(pkt::ipv4_mapped_gid(kIpB), m) == NeighborState::reachable);
    CHECK(m == kMacB);
    CHECK(b.net.net_stats().arp_tx_requests == 0);  // learned from the request: nothing asked
}

TEST_CASE("ARP request for another IP: no reply, counted, nothing learned") {
    Bench b;
    b.peer_send(arp(kBcast, kMacB, 1, kMacB, kIpB, kZero, 0xC6120063));
    CHECK(b.net_recv().empty());
    CHECK(b.peer_recv().empty());
    CHECK(b.net.net_stats().arp_rx_not_ours == 1);
    CHECK(b.net.net_stats().arp_rx_requests == 0);
    CHECK(b.net.net_stats().arp_tx_replies == 0);
    CHECK(b.net.state(pkt::ipv4_mapped_gid(kIpB)) == NeighborState::unknown);
}

TEST_CASE("resolve() sends a byte-exact ARP request; the reply makes the entry reachable") {
    Bench b;
    pkt::Mac m{};
    const pkt::Ip6 gid = pkt::ipv4_mapped_gid(kIpB);
    CHECK(b.net.resolve(gid, m) == NeighborState::resolving);
    CHECK_FALSE(b.net.neighbor(gid, m));  // still resolving: no second request
    auto got = b.peer_recv();
    REQUIRE(got.size() == 1);
    CHECK(got[0] == arp(kBcast, kMacA, 1, kMacA, kIpA, kZero, kIpB));
    b.peer_send(arp(kMacA, kMacB, 2, kMacB, kIpB, kMacA, kIpA));
    CHECK(b.net_recv().empty());
    CHECK(b.net.net_stats().arp_rx_replies == 1);
    CHECK(b.net.resolve(gid, m) == NeighborState::reachable);
    CHECK(m == kMacB);
    CHECK(b.net.net_stats().arp_tx_requests == 1);
    CHECK(b.net.net_stats().resolve_reachable == 1);
}

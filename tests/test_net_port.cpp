// NetPort: ARP (RFC 826) and IPv6 neighbour discovery (RFC 4861) answered and resolved byte for
// byte, the RoCE-only receive filter with its counters, malformed ARP/ND dropped and counted, pcap
// capture of every frame exactly once, and two HCAs that find each other by ARP and by ND.
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <algorithm>
#include <vector>

#include "dpdk_port/mem_wire.hpp"
#include "dpdk_port/net_port.hpp"
#include "dpdk_port/pcap_file.hpp"
#include "packet/build.hpp"
#include "packet/bytes.hpp"
#include "packet/headers.hpp"
#include "packet/parse.hpp"
#include "tools/hcaemu/sim_pair.hpp"
#include "transport/hca.hpp"

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
    explicit Bench(const NetConfig& nc = net_config()) : net{wire.end(0), clock, nc} {}
    VirtualClock clock;
    MemWire wire{wire_config(), clock};
    NetPort net;
    Port& peer = wire.end(1);

    // The times end 0 sends ARP frames at, from watch_arp() on (the wire's tap).
    std::vector<uint64_t> arp_sent;
    void watch_arp() {
        wire.set_tap([this](int dir, const uint8_t* f, uint32_t, uint64_t t, Event ev) {
            if (dir == 0 && ev == Event::sent && pkt::load_be16(f + 12) == 0x0806) arp_sent.push_back(t);
        });
    }
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

TEST_CASE("no answer: exactly `tries` ARP requests, retry_ns apart, then failed; a later call starts over") {
    Bench b;
    b.watch_arp();
    const std::vector<uint64_t>& sent_at = b.arp_sent;
    const NetConfig cfg = net_config();
    const pkt::Ip6 gid = pkt::ipv4_mapped_gid(kIpB);
    pkt::Mac m{};
    const uint64_t t0 = b.clock.now_ns();
    REQUIRE(b.net.resolve(gid, m) == NeighborState::resolving);
    // Step in small increments, polling as an engine loop would, well past the last deadline.
    Frame fs[8];
    for (uint32_t i = 0; i < cfg.tries * 10 + 5; ++i) {
        b.clock.advance(cfg.retry_ns / 10);
        CHECK(b.net.rx_burst(fs, 8) == 0);
    }
    REQUIRE(sent_at.size() == cfg.tries);
    for (uint32_t i = 0; i < cfg.tries; ++i) CHECK(sent_at[i] == t0 + i * cfg.retry_ns);
    CHECK(b.net.state(gid) == NeighborState::failed);
    CHECK(b.net.net_stats().resolve_failed == 1);
    CHECK(b.net.net_stats().arp_tx_requests == cfg.tries);
    CHECK(b.net.next_due_ns() == UINT64_MAX);
    // Failed is held for retry_ns after the failure, then a call starts a new round.
    const uint64_t failed_at = t0 + cfg.tries * cfg.retry_ns;
    b.clock.set(failed_at + cfg.retry_ns - 1);
    CHECK(b.net.resolve(gid, m) == NeighborState::failed);
    CHECK(sent_at.size() == cfg.tries);
    b.clock.set(failed_at + cfg.retry_ns);
    CHECK(b.net.resolve(gid, m) == NeighborState::resolving);
    CHECK(sent_at.size() == cfg.tries + 1);
    CHECK(b.net.net_stats().resolve_started == 2);
}

TEST_CASE("a request the port refused (no buffer) is no try: sent again after unsent_retry_ns; the round still ends") {
    Bench b;
    b.watch_arp();
    const std::vector<uint64_t>& sent_at = b.arp_sent;
    const NetConfig cfg = net_config();
    REQUIRE(cfg.unsent_retry_ns * 10 < cfg.retry_ns);
    const pkt::Ip6 gid = pkt::ipv4_mapped_gid(kIpB);
    std::vector<Frame> held;  // end 0's whole pool: every request is refused
    for (Frame f; b.wire.end(0).alloc(f);) held.push_back(f);
    REQUIRE(held.size() == wire_config().pool_frames);
    pkt::Mac m{};
    const uint64_t t0 = b.clock.now_ns();
    REQUIRE(b.net.resolve(gid, m) == NeighborState::resolving);
    CHECK(b.net.net_stats().tx_no_buffer == 1);
    CHECK(b.net.next_due_ns() == t0 + cfg.unsent_retry_ns);
    Frame fs[8];
    SECTION("the buffers come back: the next poll after unsent_retry_ns sends, then retry_ns apart, `tries` in all") {
        for (int i = 0; i < 4; ++i) {  // 4 refused tries at 1 ms, 2 ms, 3 ms, 4 ms
            b.clock.advance(cfg.unsent_retry_ns);
            CHECK(b.net.rx_burst(fs, 8) == 0);
        }
        CHECK(b.net.net_stats().tx_no_buffer == 5);
        CHECK(b.net.net_stats().arp_tx_requests == 0);
        for (Frame& f : held) b.wire.end(0).free(f);
        const uint64_t t1 = t0 + 5 * cfg.unsent_retry_ns;
        b.clock.set(t1);
        CHECK(b.net.rx_burst(fs, 8) == 0);
        REQUIRE(sent_at == std::vector<uint64_t>{t1});
        for (uint32_t i = 0; i < cfg.tries * 10 + 5; ++i) {
            b.clock.advance(cfg.retry_ns / 10);
            CHECK(b.net.rx_burst(fs, 8) == 0);
        }
        REQUIRE(sent_at.size() == cfg.tries);
        for (uint32_t i = 0; i < cfg.tries; ++i) CHECK(sent_at[i] == t1 + i * cfg.retry_ns);
        CHECK(b.net.net_stats().arp_tx_requests == cfg.tries);
        CHECK(b.net.net_stats().tx_no_buffer == 5);
        CHECK(b.net.state(gid) == NeighborState::failed);
        CHECK(b.net.net_stats().resolve_failed == 1);
    }
    SECTION("never sent: failed tries x retry_ns after the round began, one refusal every unsent_retry_ns") {
        const uint64_t end = t0 + cfg.tries * cfg.retry_ns;
        while (b.clock.now_ns() + cfg.unsent_retry_ns < end) {
            b.clock.advance(cfg.unsent_retry_ns);
            CHECK(b.net.rx_burst(fs, 8) == 0);
        }
        CHECK(b.net.state(gid) == NeighborState::resolving);
        CHECK(b.net.net_stats().tx_no_buffer == cfg.tries * cfg.retry_ns / cfg.unsent_retry_ns);
        b.clock.set(end);
        CHECK(b.net.rx_burst(fs, 8) == 0);
        CHECK(b.net.state(gid) == NeighborState::failed);
        CHECK(b.net.net_stats().resolve_failed == 1);
        CHECK(b.net.net_stats().arp_tx_requests == 0);
        CHECK(sent_at.empty());
        CHECK(b.net.next_due_ns() == UINT64_MAX);
        for (Frame& f : held) b.wire.end(0).free(f);
    }
}

namespace {

// An independent ICMPv6 checksum: the pseudo-header (RFC 8200 8.1) laid out as bytes, summed as
// 16-bit words in 64 bits, folded at the end.
uint16_t ref_checksum(const pkt::Ip6& src, const pkt::Ip6& dst, const Bytes& msg) {
    Bytes all;
    put(all, src);
    put(all, dst);
    put32(all, uint32_t(msg.size()));
    put32(all, 58);
    all.insert(all.end(), msg.begin(), msg.end());
    if (all.size() % 2) all.push_back(0);
    uint64_t s = 0;
    for (size_t i = 0; i < all.size(); i += 2) s += uint64_t(all[i]) << 8 | all[i + 1];
    while (s >> 16) s = (s & 0xFFFF) + (s >> 16);
    return uint16_t(~s & 0xFFFF);
}

// An NS (135) or NA (136) frame written field by field from RFC 4861 4.3/4.4, one link-layer
// address option (1 source, 2 target) unless `opt_mac` is null.
Bytes nd(const pkt::Mac& eth_dst, const pkt::Mac& eth_src, const pkt::Ip6& src, const pkt::Ip6& dst, uint8_t type,
         uint8_t flags, const pkt::Ip6& target, const pkt::Mac* opt_mac, uint8_t hop = 255, bool good_csum = true) {
    Bytes msg{type, 0, 0, 0, flags, 0, 0, 0};
    put(msg, target);
    if (opt_mac) {
        msg.push_back(type == 135 ? 1 : 2);
        msg.push_back(1);
        put(msg, *opt_mac);
    }
    uint16_t c = ref_checksum(src, dst, msg);
    if (!good_csum) c ^= 0x0100;
    msg[2] = uint8_t(c >> 8);
    msg[3] = uint8_t(c);
    Bytes b;
    put(b, eth_dst);
    put(b, eth_src);
    put16(b, 0x86DD);
    b.insert(b.end(), {0x60, 0, 0, 0});
    put16(b, uint16_t(msg.size()));
    b.push_back(58);
    b.push_back(hop);
    put(b, src);
    put(b, dst);
    b.insert(b.end(), msg.begin(), msg.end());
    return b;
}

const pkt::Ip6 kSnA{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 0x0a};  // solicited-node of kIp6A
const pkt::Ip6 kSnB{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 0x0b};
const pkt::Mac kSnMacA{0x33, 0x33, 0xff, 0, 0, 0x0a};
const pkt::Mac kSnMacB{0x33, 0x33, 0xff, 0, 0, 0x0b};

}  // namespace

TEST_CASE("IPv6 NS for our address gets a byte-exact NA; the checksum matches an independent sum") {
    Bench b;
    CHECK(solicited_node(kIp6A) == kSnA);
    CHECK(multicast_mac(kSnA) == kSnMacA);
    b.peer_send(nd(kSnMacA, kMacB, kIp6B, kSnA, 135, 0, kIp6A, &kMacB));
    CHECK(b.net_recv().empty());
    const auto got = b.peer_recv();
    REQUIRE(got.size() == 1);
    CHECK(got[0] == nd(kMacB, kMacA, kIp6A, kIp6B, 136, 0x60, kIp6A, &kMacA));  // Solicited, Override
    // The library's checksum over the NA it sent, against the reference.
    const Bytes msg(got[0].begin() + 54, got[0].end());
    Bytes zeroed = msg;
    zeroed[2] = zeroed[3] = 0;
    CHECK(icmp6_checksum(kIp6A, kIp6B, zeroed.data(), uint32_t(zeroed.size())) == ref_checksum(kIp6A, kIp6B, zeroed));
    CHECK(icmp6_checksum(kIp6A, kIp6B, msg.data(), uint32_t(msg.size())) == 0);
    CHECK(b.net.net_stats().nd_rx_ns == 1);
    CHECK(b.net.net_stats().nd_tx_na == 1);
    pkt::Mac m{};
    CHECK(b.net.resolve(kIp6B, m) == NeighborState::reachable);
    CHECK(m == kMacB);
}

TEST_CASE("IPv6 NS for our link-local address is answered from it") {
    Bench b;
    const pkt::Ip6 ll = link_local_of(kMacA);
    CHECK(ll == pkt::Ip6{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0, 0, 0xff, 0xfe, 0, 0, 0x01});
    const pkt::Ip6 ll_b = link_local_of(kMacB);
    const pkt::Ip6 sn = solicited_node(ll);
    b.peer_send(nd(multicast_mac(sn), kMacB, ll_b, sn, 135, 0, ll, &kMacB));
    CHECK(b.net_recv().empty());
    const auto got = b.peer_recv();
    REQUIRE(got.size() == 1);
    CHECK(got[0] == nd(kMacB, kMacA, ll, ll_b, 136, 0x60, ll, &kMacA));
}

TEST_CASE("an IPv4-only port still owns its link-local GID: loopback, NS answered, peers' link-local resolved") {
    NetConfig nc;
    nc.ip4 = kIpA;  // no IPv6 address; GID 0 is still fe80::EUI-64, which rdma-core's tests use
    Bench b(nc);
    const pkt::Ip6 ll = link_local_of(kMacA), ll_b = link_local_of(kMacB);
    pkt::Mac m{};
    CHECK(b.net.resolve(ll, m) == NeighborState::reachable);
    CHECK(m == kMacA);
    CHECK(b.peer_recv().empty());
    const pkt::Ip6 sn = solicited_node(ll);
    b.peer_send(nd(multicast_mac(sn), kMacB, ll_b, sn, 135, 0, ll, &kMacB));
    CHECK(b.net_recv().empty());
    auto got = b.peer_recv();
    REQUIRE(got.size() == 1);
    CHECK(got[0] == nd(kMacB, kMacA, ll, ll_b, 136, 0x60, ll, &kMacA));
    // The NS taught us B; a third link-local address is asked for from ours.
    CHECK(b.net.resolve(ll_b, m) == NeighborState::reachable);
    const pkt::Ip6 ll_c = link_local_of(pkt::Mac{0x02, 0, 0, 0, 0, 0x0c});
    CHECK(b.net.resolve(ll_c, m) == NeighborState::resolving);
    CHECK(b.net.net_stats().nd_tx_ns == 1);
    CHECK(b.net.net_stats().tx_no_buffer == 0);
    got = b.peer_recv();
    REQUIRE(got.size() == 1);
    CHECK(got[0] == nd(multicast_mac(solicited_node(ll_c)), kMacA, ll, solicited_node(ll_c), 135, 0, ll_c, &kMacA));
    // A global IPv6 peer still needs an own global address.
    CHECK(b.net.resolve(kIp6B, m) == NeighborState::failed);
    CHECK(b.net.net_stats().resolve_no_address == 1);
}

TEST_CASE("resolve() of an IPv6 GID sends a byte-exact NS; the NA makes it reachable") {
    Bench b;
    pkt::Mac m{};
    CHECK(b.net.resolve(kIp6B, m) == NeighborState::resolving);
    auto got = b.peer_recv();
    REQUIRE(got.size() == 1);
    CHECK(got[0] == nd(kSnMacB, kMacA, kIp6A, kSnB, 135, 0, kIp6B, &kMacA));
    b.peer_send(nd(kMacA, kMacB, kIp6B, kIp6A, 136, 0x60, kIp6B, &kMacB));
    CHECK(b.net_recv().empty());
    CHECK(b.net.net_stats().nd_rx_na == 1);
    CHECK(b.net.resolve(kIp6B, m) == NeighborState::reachable);
    CHECK(m == kMacB);
    CHECK(b.net.net_stats().nd_tx_ns == 1);
}

TEST_CASE("a duplicate address detection NS (from ::) is answered to all nodes, unsolicited (RFC 4861 7.2.4)") {
    Bench b;
    b.peer_send(nd(kSnMacA, kMacB, pkt::Ip6{}, kSnA, 135, 0, kIp6A, nullptr));
    CHECK(b.net_recv().empty());
    const pkt::Ip6 all_nodes{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    const auto got = b.peer_recv();
    REQUIRE(got.size() == 1);
    CHECK(got[0] == nd(multicast_mac(all_nodes), kMacA, kIp6A, all_nodes, 136, 0x20, kIp6A, &kMacA));
    CHECK(b.net.net_stats().nd_rx_ns == 1);
    CHECK(b.net.state(pkt::Ip6{}) == NeighborState::unknown);  // nothing learnt from ::
}

TEST_CASE("malformed ARP and ND are dropped and counted, never answered") {
    Bench b;
    SECTION("ICMPv6 checksum wrong") {
        b.peer_send(nd(kSnMacA, kMacB, kIp6B, kSnA, 135, 0, kIp6A, &kMacB, 255, false));
        CHECK(b.net_recv().empty());
        CHECK(b.net.net_stats().bad_nd_checksum == 1);
    }
    SECTION("hop limit 64") {
        b.peer_send(nd(kSnMacA, kMacB, kIp6B, kSnA, 135, 0, kIp6A, &kMacB, 64));
        CHECK(b.net_recv().empty());
        CHECK(b.net.net_stats().bad_nd_hop_limit == 1);
    }
    SECTION("NS cut short") {
        Bytes f = nd(kSnMacA, kMacB, kIp6B, kSnA, 135, 0, kIp6A, &kMacB);
        f.resize(f.size() - 10);
        b.peer_send(f);
        CHECK(b.net_recv().empty());
        CHECK(b.net.net_stats().bad_truncated == 1);
    }
    SECTION("option of length 0") {
        Bytes f = nd(kSnMacA, kMacB, kIp6B, kSnA, 135, 0, kIp6A, &kMacB);
        f[54 + 25] = 0;  // the option's length
        const Bytes msg(f.begin() + 54, f.end());
        Bytes z = msg;
        z[2] = z[3] = 0;
        const uint16_t c = ref_checksum(kIp6B, kSnA, z);
        f[56] = uint8_t(c >> 8);
        f[57] = uint8_t(c);
        b.peer_send(f);
        CHECK(b.net_recv().empty());
        CHECK(b.net.net_stats().bad_nd_format == 1);
    }
    SECTION("NS from :: to a unicast address (RFC 4861 7.1.1: only to the solicited-node address)") {
        b.peer_send(nd(kMacA, kMacB, pkt::Ip6{}, kIp6A, 135, 0, kIp6A, nullptr));
        CHECK(b.net_recv().empty());
        CHECK(b.net.net_stats().bad_nd_format == 1);
        CHECK(b.net.net_stats().nd_tx_na == 0);
    }
    SECTION("ARP cut short") {
        Bytes f = arp(kBcast, kMacB, 1, kMacB, kIpB, kZero, kIpA);
        f.resize(14 + 27);
        b.peer_send(f);
        CHECK(b.net_recv().empty());
        CHECK(b.net.net_stats().bad_truncated == 1);
    }
    SECTION("ARP with hlen 8") {
        Bytes f = arp(kBcast, kMacB, 1, kMacB, kIpB, kZero, kIpA);
        f[14 + 4] = 8;
        b.peer_send(f);
        CHECK(b.net_recv().empty());
        CHECK(b.net.net_stats().bad_arp_format == 1);
    }
    SECTION("ARP opcode 3") {
        b.peer_send(arp(kBcast, kMacB, 3, kMacB, kIpB, kZero, kIpA));
        CHECK(b.net_recv().empty());
        CHECK(b.net.net_stats().bad_arp_format == 1);
    }
    CHECK(b.net.net_stats().rx_dropped_bad == 1);
    CHECK(b.net.net_stats().rx_dropped_not_roce == 0);
    CHECK(b.peer_recv().empty());
    CHECK(b.net.state(kIp6B) == NeighborState::unknown);
    CHECK(b.net.state(pkt::ipv4_mapped_gid(kIpB)) == NeighborState::unknown);
}

namespace {

// An IPv4 frame from B to `dst_ip` at `dst_mac` carrying `proto` to `dport` (UDP layout for TCP too:
// the ports are where the filter looks).
Bytes ip4_frame(const pkt::Mac& dst_mac, uint32_t dst_ip, uint8_t proto, uint16_t dport) {
    Bytes b;
    put(b, dst_mac);
    put(b, kMacB);
    put16(b, 0x0800);
    b.insert(b.end(), {0x45, 0, 0, 48, 0, 0, 0x40, 0, 64, proto, 0, 0});
    put32(b, kIpB);
    put32(b, dst_ip);
    put16(b, 0xC000);
    put16(b, dport);
    b.resize(14 + 48, 0x5a);
    return b;
}

// A real RoCE v2 frame (an RC SEND_ONLY) from B to A, built by the packet layer.
Bytes roce_frame(bool ipv6, uint32_t dst_ip = kIpA, const pkt::Mac& dst_mac = kMacA) {
    pkt::Headers h;
    h.eth.dst = dst_mac;
    h.eth.src = kMacB;
    h.ipv6 = ipv6;
    h.eth.ethertype = ipv6 ? pkt::kEthTypeIpv6 : pkt::kEthTypeIpv4;
    h.ip4.src = kIpB;
    h.ip4.dst = dst_ip;
    h.ip6.src = kIp6B;
    h.ip6.dst = kIp6A;
    h.bth.opcode = 0x04;  // RC SEND_ONLY
    h.bth.dest_qp = 0x11;
    const uint8_t payload[5] = {1, 2, 3, 4, 5};
    Bytes out(200);
    size_t n = 0;
    REQUIRE(pkt::build(h, payload, out, n) == pkt::BuildError::ok);
    out.resize(n);
    return out;
}

}  // namespace

TEST_CASE("only RoCE v2 for our MAC and IP comes back, unchanged; the rest is dropped and counted") {
    Bench b;
    const Bytes r4 = roce_frame(false), r6 = roce_frame(true);
    Bytes lldp(60, 0);
    std::copy(kMacA.begin(), kMacA.end(), lldp.begin());
    lldp[12] = 0x88;
    lldp[13] = 0xcc;
    b.peer_send(ip4_frame(kMacA, kIpA, 17, 53));    // UDP, not 4791
    b.peer_send(r4);
    b.peer_send(ip4_frame(kMacA, kIpA, 6, 4791));   // TCP to 4791
    b.peer_send(lldp);                              // unknown ethertype
    b.peer_send(roce_frame(false, 0xC6120063));     // RoCE to another IP
    b.peer_send(roce_frame(false, kIpA, kBcast));   // RoCE to broadcast
    b.peer_send(r6);
    const auto got = b.net_recv();
    REQUIRE(got.size() == 2);
    CHECK(got[0] == r4);
    CHECK(got[1] == r6);
    const NetStats& s = b.net.net_stats();
    CHECK(s.rx_roce == 2);
    CHECK(s.drop_not_udp_4791 == 2);
    CHECK(s.drop_ethertype == 1);
    CHECK(s.drop_other_ip == 1);
    CHECK(s.drop_other_mac == 1);
    CHECK(s.rx_dropped_not_roce == 5);
    CHECK(s.rx_dropped_bad == 0);
    CHECK(b.wire.pool_free(0) == b.wire.pool_frames());  // every dropped frame went back
}

namespace {

// Takes at most `take` frames per tx_burst: the refusal a full DPDK queue gives.
class StingyPort final : public Port {
public:
    explicit StingyPort(Port& in) : in_(in) {}
    uint16_t take = 1;
    bool alloc(Frame& f) override { return in_.alloc(f); }
    uint16_t tx_burst(Frame* f, uint16_t n) override { return in_.tx_burst(f, std::min(n, take)); }
    uint16_t rx_burst(Frame* f, uint16_t n) override { return in_.rx_burst(f, n); }
    void free(Frame& f) override { in_.free(f); }
    pkt::Mac mac() const override { return in_.mac(); }
    uint32_t mtu() const override { return in_.mtu(); }
    PortStats stats() const override { return in_.stats(); }

private:
    Port& in_;
};

}  // namespace

TEST_CASE("capture: every frame received and sent exactly once, refused frames when finally taken") {
    VirtualClock clock(5'000'000'000);
    MemWire wire(wire_config(), clock);
    StingyPort stingy(wire.end(0));
    NetPort net(stingy, clock, net_config());
    Port& peer = wire.end(1);
    const std::string path = "net_port_capture.pcap";
    std::vector<std::pair<Bytes, uint64_t>> expect;  // what the capture must hold, in order
    {
        PcapWriter w(path);
        REQUIRE(w.ok());
        net.set_capture(&w);
        auto peer_send = [&](const Bytes& b) {
            Frame f;
            REQUIRE(peer.alloc(f));
            std::memcpy(f.data, b.data(), b.size());
            f.len = uint32_t(b.size());
            REQUIRE(peer.tx_burst(&f, 1) == 1);
        };
        // Received: an ARP request (answered: the reply is captured too), RoCE, UDP 53.
        const Bytes req = arp(kBcast, kMacB, 1, kMacB, kIpB, kZero, kIpA), r4 = roce_frame(false),
                    udp = ip4_frame(kMacA, kIpA, 17, 53);
        peer_send(req);
        peer_send(r4);
        peer_send(udp);
        clock.advance(10'000);
        Frame fs[8];
        REQUIRE(net.rx_burst(fs, 8) == 1);
        net.free(fs[0]);
        const uint64_t t1 = clock.now_ns();
        expect = {{req, t1}, {arp(kMacB, kMacA, 2, kMacA, kIpA, kMacB, kIpB), t1}, {r4, t1}, {udp, t1}};
        // Sent: three frames offered, the inner port takes one per call; the caller offers the
        // rest again, one microsecond later each time.
        Frame out[3];
        for (int i = 0; i < 3; ++i) {
            REQUIRE(net.alloc(out[i]));
            const Bytes b = roce_frame(false, kIpB, kMacB);
            std::memcpy(out[i].data, b.data(), b.size());
            out[i].data[b.size() - 5] = uint8_t(i);  // tell them apart
            out[i].len = uint32_t(b.size());
        }
        Bytes copies[3];
        for (int i = 0; i < 3; ++i) copies[i].assign(out[i].data, out[i].data + out[i].len);
        uint16_t done = 0;
        for (int turn = 0; done < 3 && turn < 10; ++turn) {
            clock.advance(1000);
            const uint16_t k = net.tx_burst(out + done, uint16_t(3 - done));
            for (uint16_t i = 0; i < k; ++i) expect.push_back({copies[done + i], clock.now_ns()});
            done = uint16_t(done + k);
        }
        REQUIRE(done == 3);
        // Taken all at once when the inner port takes everything.
        stingy.take = 32;
        Frame two[2];
        for (int i = 0; i < 2; ++i) {
            REQUIRE(net.alloc(two[i]));
            Bytes b = roce_frame(false, kIpB, kMacB);  // to the peer: frames to us would loop back
            b[b.size() - 5] = uint8_t(10 + i);
            std::memcpy(two[i].data, b.data(), b.size());
            two[i].len = uint32_t(b.size());
            expect.push_back({b, clock.now_ns()});
        }
        REQUIRE(net.tx_burst(two, 2) == 2);
        net.set_capture(nullptr);
        // Not captured any more.
        peer_send(req);
        clock.advance(10'000);
        CHECK(net.rx_burst(fs, 8) == 0);
    }
    PcapReader r(path);
    REQUIRE(r.ok());
    PcapFrame pf;
    size_t i = 0;
    while (r.next(pf)) {
        REQUIRE(i < expect.size());
        CHECK(Bytes(pf.data.begin(), pf.data.end()) == expect[i].first);
        CHECK(pf.ts_ns / 1000 == expect[i].second / 1000);  // pcap keeps microseconds
        ++i;
    }
    CHECK(i == expect.size());
    std::remove(path.c_str());
}

// The capture stamps a received frame when its poll returns; the frame arrived after the last
// poll that left the ring empty. Where that is more than kLateNoteNs earlier, a note says so.
TEST_CASE("capture: a frame stamped late (the poll came late) is noted with how late it may be") {
    VirtualClock clock(5'000'000'000);
    MemWire wire(wire_config(), clock);
    NetPort net(wire.end(0), clock, net_config());
    Port& peer = wire.end(1);
    const std::string path = "net_port_late.pcap";
    auto peer_send = [&](uint8_t tag) {
        Frame f;
        REQUIRE(peer.alloc(f));
        Bytes b = roce_frame(false);
        b[b.size() - 5] = tag;
        std::memcpy(f.data, b.data(), b.size());
        f.len = uint32_t(b.size());
        REQUIRE(peer.tx_burst(&f, 1) == 1);
    };
    Frame fs[8];
    auto take = [&](uint16_t want) {
        REQUIRE(net.rx_burst(fs, 8) == want);
        for (uint16_t i = 0; i < want; ++i) net.free(fs[i]);
    };
    {
        PcapWriter w(path);
        REQUIRE(w.ok());
        REQUIRE(w.enable_notes());
        net.set_capture(&w);
        clock.advance(1'000);
        take(0);  // the ring empty at 5'000'001'000
        peer_send(1);
        clock.advance(50'000);  // the next poll comes 50 us later: frame 1 waited up to that
        take(1);
        peer_send(2);
        clock.advance(1'500);  // polled 1.5 us after the last: within a turn, no note
        take(1);
        peer_send(3);
        peer_send(4);
        clock.advance(3'000);
        take(2);  // frames 3 and 4: up to 3 us
        net.set_capture(nullptr);
    }
    std::map<uint64_t, uint64_t> late;
    CHECK(read_notes(path, &late).empty());  // no injection notes
    CHECK(late == std::map<uint64_t, uint64_t>{{1, 50'000}, {3, 3'000}, {4, 3'000}});
    PcapReader r(path);
    PcapFrame pf;
    uint64_t n = 0;
    while (r.next(pf)) ++n;
    CHECK(n == 4);
    std::remove(path.c_str());
    std::remove(notes_path(path).c_str());
}

namespace {

// Two HCAs on the in-memory wire, each behind a NetPort, with no static neighbours: each finds the
// other by ARP (IPv4-mapped GIDs) or ND (IPv6 GIDs).
struct NetHcaPair {
    struct Side {
        std::unique_ptr<NetPort> net;
        std::unique_ptr<Device> dev;
        std::unique_ptr<transport::Hca> hca;
        Pd pd;
        std::vector<uint8_t> mem;
        Mr mr;
        Cq cq;
        Qp qp;
        Gid gid{};
    };
    VirtualClock clock{1'000'000'000};
    MemWire wire{WireConfig{}, clock};
    Side s[2];
    tools::SimConfig cfg;
    size_t bcast_roce = 0, roce = 0;  // RoCE v2 frames sent to broadcast, all RoCE v2 frames sent

    explicit NetHcaPair(bool ipv6) {
        wire.set_tap([this](int, const uint8_t* f, uint32_t len, uint64_t, Event ev) {
            pkt::Packet p;
            if (ev != Event::sent || pkt::parse({f, len}, p) != pkt::ParseError::ok) return;
            ++roce;
            bcast_roce += p.h.eth.dst == kBcast;
        });
        const pkt::Ip6 g6[2] = {kIp6A, kIp6B};
        const uint32_t g4[2] = {kIpA, kIpB};
        for (int i = 0; i < 2; ++i) {
            Side& d = s[i];
            NetConfig nc;
            if (ipv6) nc.ip6 = g6[i];
            else nc.ip4 = g4[i];
            d.net = std::make_unique<NetPort>(wire.end(i), clock, nc);
            PortConfig pc;
            pc.mac = d.net->mac();
            if (ipv6) pc.ipv6[0] = g6[i];  // GID 1 either way (GID 0 is the link-local one)
            else pc.ipv4[0] = g4[i];
            d.gid = ipv6 ? g6[i] : pkt::ipv4_mapped_gid(g4[i]);
            d.dev = std::make_unique<Device>(DeviceAttr{}, pc);
            d.hca = std::make_unique<transport::Hca>(*d.dev, *d.net, clock);
            d.pd = std::move(d.dev->alloc_pd().value);
            d.mem.assign(1 << 16, 0);
            d.mr = std::move(d.dev->reg_mr(d.pd, d.mem.data(), d.mem.size(), access::local_write | access::remote_write).value);
            d.cq = std::move(d.dev->create_cq(64).value);
            QpInitAttr ia;
            ia.send_cq = ia.recv_cq = &d.cq;
            ia.qp_type = QpType::rc;
            ia.cap = {16, 16, 1, 1, 0};
            d.qp = std::move(d.dev->create_qp(d.pd, ia).value);
        }
        for (int i = 0; i < 2; ++i)
            REQUIRE(tools::connect_qp(s[i].qp, cfg, s[1 - i].qp.qpn(), s[1 - i].gid, cfg.sq_psn[i], cfg.sq_psn[1 - i], 1));
    }

    void write(uint64_t off, uint32_t len, uint64_t wr_id) {
        Sge sge{s[0].mr.addr() + off, len, s[0].mr.lkey()};
        SendWr w;
        w.wr_id = wr_id;
        w.sg_list = &sge;
        w.num_sge = 1;
        w.opcode = WrOpcode::rdma_write;
        w.send_flags = send_flag::signaled;
        w.rdma = {s[1].mr.addr() + off, s[1].mr.rkey()};
        const SendWr* bad = nullptr;
        REQUIRE(s[0].qp.post_send(&w, &bad) == Status::ok);
    }

    // Runs both loops in virtual time until side 0 has a completion (bounded in turns and time).
    bool wait_cqe(Wc& wc) {
        for (int n = 0; n < 1'000'000; ++n) {
            if (s[0].cq.poll({&wc, 1}) == 1) return true;
            if (s[0].hca->poll() + s[1].hca->poll()) continue;
            const uint64_t next = std::min({wire.next_delivery_ns(), s[0].hca->next_timer_ns(), s[1].hca->next_timer_ns(),
                                            s[0].net->next_due_ns(), s[1].net->next_due_ns()});
            if (next == UINT64_MAX || next > 60'000'000'000ull) return false;
            clock.set(std::max(next, clock.now_ns() + 1));
        }
        return false;
    }
};

void run_pair(bool ipv6) {
    NetHcaPair p(ipv6);
    // Modify to RTR asked for the peer already: one request each way is on the wire.
    CHECK(p.s[0].net->state(p.s[1].gid) == NeighborState::resolving);
    CHECK(p.s[1].net->state(p.s[0].gid) == NeighborState::resolving);
    for (size_t i = 0; i < 3000; ++i) p.s[0].mem[i] = uint8_t(i * 7 + 1);
    p.write(0, 3000, 1);  // 3 packets at MTU 1024, sent before the MAC is known
    Wc wc;
    REQUIRE(p.wait_cqe(wc));
    CHECK(wc.status == WcStatus::success);
    CHECK(wc.wr_id == 1);
    CHECK(std::equal(p.s[0].mem.begin(), p.s[0].mem.begin() + 3000, p.s[1].mem.begin()));
    for (int i = 0; i < 2; ++i) {
        const NetStats& st = p.s[i].net->net_stats();
        pkt::Mac m{};
        CHECK(p.s[i].net->resolve(p.s[1 - i].gid, m) == NeighborState::reachable);
        CHECK(m == p.s[1 - i].net->mac());
        CHECK((ipv6 ? st.nd_tx_ns : st.arp_tx_requests) == 1);
        CHECK((ipv6 ? st.nd_rx_ns : st.arp_rx_requests) == 1);
        CHECK((ipv6 ? st.nd_tx_na : st.arp_tx_replies) == 1);
        CHECK(st.rx_dropped_bad == 0);
        CHECK(st.resolve_failed == 0);
    }
    // The first packets went to broadcast while resolving; the receiver dropped them, and the
    // retransmission used the learned MAC.
    CHECK(p.bcast_roce == 3);
    CHECK(p.s[1].net->net_stats().drop_other_mac == 3);
    // Known now: a second WRITE sends no broadcast frame at all.
    const size_t before = p.roce;
    for (size_t i = 0; i < 3000; ++i) p.s[0].mem[4096 + i] = uint8_t(i * 3 + 2);
    p.write(4096, 3000, 2);
    REQUIRE(p.wait_cqe(wc));
    CHECK(wc.status == WcStatus::success);
    CHECK(std::equal(p.s[0].mem.begin() + 4096, p.s[0].mem.begin() + 4096 + 3000, p.s[1].mem.begin() + 4096));
    CHECK(p.roce > before);
    CHECK(p.bcast_roce == 3);
}

}  // namespace

TEST_CASE("two HCAs behind NetPorts, no static neighbours, find each other by ARP and run RC WRITE") {
    run_pair(false);
}

TEST_CASE("two HCAs behind NetPorts with IPv6 GIDs find each other by ND and run RC WRITE") {
    run_pair(true);
}

TEST_CASE("neighbour table: aging, static entries, gratuitous ARP, LRU eviction") {
    Bench b;
    const pkt::Ip6 gid = pkt::ipv4_mapped_gid(kIpB);
    const pkt::Mac kMacC{0x02, 0, 0, 0, 0, 0x0c};
    pkt::Mac m{};
    SECTION("a reachable entry older than reachable_ns is asked for again and used meanwhile (RFC 4861 7.3.3)") {
        b.peer_send(arp(kBcast, kMacB, 1, kMacB, kIpB, kZero, kIpA));
        b.net_recv();
        b.peer_recv();
        CHECK(b.net.resolve(gid, m) == NeighborState::reachable);
        b.clock.advance(net_config().reachable_ns);
        m = {};
        CHECK(b.net.resolve(gid, m) == NeighborState::reachable);
        CHECK(m == kMacB);
        CHECK(b.net.net_stats().resolve_stale == 1);
        auto got = b.peer_recv();
        REQUIRE(got.size() == 1);
        CHECK(got[0] == arp(kBcast, kMacA, 1, kMacA, kIpA, kZero, kIpB));
        // A second use while the question is out asks nothing more.
        CHECK(b.net.resolve(gid, m) == NeighborState::reachable);
        CHECK(b.peer_recv().empty());
        SECTION("the reply confirms it: nothing more is asked") {
            b.peer_send(arp(kMacA, kMacB, 2, kMacB, kIpB, kMacA, kIpA));
            b.net_recv();
            for (uint32_t i = 0; i < net_config().tries + 1; ++i) {
                b.clock.advance(net_config().retry_ns);
                CHECK(b.net.resolve(gid, m) == NeighborState::reachable);
            }
            CHECK(b.peer_recv().empty());
            CHECK(b.net.net_stats().resolve_failed == 0);
        }
        SECTION("no reply: `tries` requests in all, then failed") {
            for (uint32_t i = 1; i < net_config().tries; ++i) {
                b.clock.advance(net_config().retry_ns);
                b.net_recv();  // rx_burst runs the timers
                got = b.peer_recv();
                REQUIRE(got.size() == 1);
                CHECK(got[0] == arp(kBcast, kMacA, 1, kMacA, kIpA, kZero, kIpB));
            }
            b.clock.advance(net_config().retry_ns);
            b.net_recv();
            CHECK(b.net.state(gid) == NeighborState::failed);
            CHECK(b.net.net_stats().resolve_failed == 1);
            CHECK(b.net.resolve(gid, m) == NeighborState::failed);
        }
    }
    SECTION("gratuitous ARP updates a known entry and creates none") {
        b.peer_send(arp(kBcast, kMacC, 1, kMacC, 0xC6120007, kZero, 0xC6120007));
        b.net_recv();
        CHECK(b.net.state(pkt::ipv4_mapped_gid(0xC6120007)) == NeighborState::unknown);
        b.peer_send(arp(kBcast, kMacB, 1, kMacB, kIpB, kZero, kIpA));
        b.net_recv();
        b.peer_send(arp(kBcast, kMacC, 1, kMacC, kIpB, kZero, kIpB));  // B moved to MAC C
        b.net_recv();
        CHECK(b.net.net_stats().arp_rx_gratuitous == 2);
        CHECK(b.net.resolve(gid, m) == NeighborState::reachable);
        CHECK(m == kMacC);
        CHECK(b.peer_recv().size() == 1);  // only the reply to the one request for us
    }
    SECTION("static entries never age and ARP does not change them") {
        b.net.add_static(gid, kMacC);
        b.peer_send(arp(kBcast, kMacB, 1, kMacB, kIpB, kZero, kIpA));
        b.net_recv();
        b.clock.advance(10 * net_config().reachable_ns);
        CHECK(b.net.resolve(gid, m) == NeighborState::reachable);
        CHECK(m == kMacC);
        CHECK(b.net.net_stats().arp_tx_requests == 0);
    }
    SECTION("the table holds kNeighbors entries; the least recently used goes") {
        for (uint32_t i = 0; i < NetPort::kNeighbors; ++i) {
            b.net.add_static(pkt::ipv4_mapped_gid(0xC6130000 + i), kMacC);  // fills it with static ones
        }
        // Every entry static: the new one takes the first slot.
        CHECK(b.net.resolve(gid, m) == NeighborState::resolving);
        CHECK(b.net.net_stats().neighbor_evictions == 1);
        CHECK(b.net.state(pkt::ipv4_mapped_gid(0xC6130000)) == NeighborState::unknown);
        // A dynamic entry is chosen before static ones, the oldest use first.
        b.clock.advance(1000);
        const pkt::Ip6 other = pkt::ipv4_mapped_gid(0xC6140000);
        CHECK(b.net.resolve(other, m) == NeighborState::resolving);
        CHECK(b.net.net_stats().neighbor_evictions == 2);
        CHECK(b.net.state(gid) == NeighborState::unknown);
        CHECK(b.net.state(pkt::ipv4_mapped_gid(0xC6130001)) == NeighborState::reachable);
    }
}

TEST_CASE("no own address of the family: resolve fails at once, counted, nothing sent") {
    VirtualClock clock;
    MemWire wire(wire_config(), clock);
    NetConfig nc;
    nc.ip4 = kIpA;  // no IPv6
    NetPort net(wire.end(0), clock, nc);
    pkt::Mac m{};
    CHECK(net.resolve(kIp6B, m) == NeighborState::failed);
    CHECK(net.net_stats().resolve_no_address == 1);
    CHECK(net.net_stats().nd_tx_ns == 0);
    CHECK(wire.stats(0).sent == 0);
}

TEST_CASE("loopback: RoCE v2 to our own MAC and IP comes back through rx, unchanged, never on the wire; a full ring refuses") {
    VirtualClock clock(1'000'000'000);
    WireConfig wc = wire_config();
    wc.pool_frames = 256;
    wc.rx_ring = 256;
    MemWire wire(wc, clock);
    NetConfig nc = net_config();
    CHECK(nc.loopback_frames == 4096);  // the default: what bursts between a daemon's clients need
    nc.loopback_frames = 64;            // small enough to fill from this pool
    NetPort net(wire.end(0), clock, nc);
    Port& peer = wire.end(1);
    const std::string path = "net_port_loopback.pcap";
    PcapWriter w(path);
    REQUIRE(w.ok());
    net.set_capture(&w);
    // Our own address resolves to our MAC without a request on the wire.
    pkt::Mac m{};
    CHECK(net.resolve(pkt::ipv4_mapped_gid(kIpA), m) == NeighborState::reachable);
    CHECK(m == kMacA);
    CHECK(net.resolve(kIp6A, m) == NeighborState::reachable);
    CHECK(net.net_stats().arp_tx_requests == 0);
    CHECK(net.net_stats().nd_tx_ns == 0);

    // One burst: to us (IPv4), to the peer, to us (IPv6); order kept on each side.
    const Bytes self4 = roce_frame(false), self6 = roce_frame(true), other = roce_frame(false, kIpB, kMacB);
    Frame fs[3];
    for (int i = 0; i < 3; ++i) {
        const Bytes& b = i == 0 ? self4 : i == 1 ? other : self6;
        REQUIRE(net.alloc(fs[i]));
        std::memcpy(fs[i].data, b.data(), b.size());
        fs[i].len = uint32_t(b.size());
    }
    REQUIRE(net.tx_burst(fs, 3) == 3);
    CHECK(net.net_stats().loopback == 2);
    clock.advance(10'000);
    Frame got[8];
    uint16_t n = peer.rx_burst(got, 8);
    REQUIRE(n == 1);  // only the peer's frame crossed the wire
    CHECK(Bytes(got[0].data, got[0].data + got[0].len) == other);
    peer.free(got[0]);
    n = net.rx_burst(got, 8);
    REQUIRE(n == 2);
    CHECK(Bytes(got[0].data, got[0].data + got[0].len) == self4);
    CHECK(Bytes(got[1].data, got[1].data + got[1].len) == self6);
    net.free(got[0]);
    net.free(got[1]);
    CHECK(net.net_stats().rx_roce == 2);
    CHECK(net.rx_burst(got, 8) == 0);

    // A full ring (kLoop frames waiting) refuses the next one: the caller keeps it.
    constexpr uint32_t kLoop = 64;
    std::vector<Frame> many(kLoop + 1);
    for (auto& f : many) {
        REQUIRE(net.alloc(f));
        std::memcpy(f.data, self4.data(), self4.size());
        f.len = uint32_t(self4.size());
    }
    CHECK(net.tx_burst(many.data(), uint16_t(many.size())) == kLoop);
    CHECK(net.net_stats().loopback == 2 + kLoop);
    net.free(many.back());
    uint32_t back = 0;
    while ((n = net.rx_burst(got, 8)) != 0) {
        for (uint16_t i = 0; i < n; ++i) {
            CHECK(Bytes(got[i].data, got[i].data + got[i].len) == self4);
            net.free(got[i]);
        }
        back += n;
    }
    CHECK(back == kLoop);
    CHECK(wire.pool_free(0) == wire.pool_frames());  // every buffer went back
    net.set_capture(nullptr);
    w.flush();
    // Captured exactly once each: 3 + kLoopback frames sent, none again when received.
    PcapReader r(path);
    REQUIRE(r.ok());
    PcapFrame pf;
    size_t count = 0;
    while (r.next(pf)) ++count;
    CHECK(count == 3 + kLoop);
    std::remove(path.c_str());
}

TEST_CASE("NetStats: one name per field, in order") {
    NetStats s;
    for (size_t i = 0; i < kNetStatCount; ++i) s.*kNetStatFields[i] = i + 1;
    CHECK(s.arp_rx_requests == 1);
    CHECK(s.tx_no_buffer == kNetStatCount);
    CHECK(std::string(kNetStatNames[0]) == "arp_rx_requests");
    CHECK(std::string(kNetStatNames[kNetStatCount - 1]) == "tx_no_buffer");
    CHECK(sizeof(NetStats) == kNetStatCount * sizeof(uint64_t));
    CHECK(std::string(neighbor_state_name(NeighborState::resolving)) == "resolving");
}

// Run by tests/scripts/check_nd_scapy.py (hidden otherwise): ARP and ND both ways into the pcap
// named by HCAEMU_NET_PCAP, for scapy to decode and recompute.
TEST_CASE("write ARP and ND frames to a pcap for scapy", "[.scapy]") {
    const char* path = std::getenv("HCAEMU_NET_PCAP");
    REQUIRE(path);
    PcapWriter w(path);
    REQUIRE(w.ok());
    Bench b;
    b.net.set_capture(&w);
    pkt::Mac m{};
    b.peer_send(arp(kBcast, kMacB, 1, kMacB, kIpB, kZero, kIpA));  // request in, reply out
    b.net_recv();
    b.net.resolve(pkt::ipv4_mapped_gid(0xC6120003), m);            // request out
    b.peer_send(nd(kSnMacA, kMacB, kIp6B, kSnA, 135, 0, kIp6A, &kMacB));  // NS in, NA out
    b.net_recv();
    const pkt::Ip6 c6{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0x56};
    b.net.resolve(c6, m);                                           // NS out
    const pkt::Ip6 ll = link_local_of(kMacA), ll_b = link_local_of(kMacB), sn = solicited_node(ll);
    b.peer_send(nd(multicast_mac(sn), kMacB, ll_b, sn, 135, 0, ll, &kMacB));  // link-local NS in, NA out
    b.net_recv();
    b.net.set_capture(nullptr);
    w.flush();
    CHECK(b.net.net_stats().arp_tx_replies == 1);
    CHECK(b.net.net_stats().nd_tx_na == 2);
    CHECK(b.net.net_stats().nd_tx_ns == 1);
}

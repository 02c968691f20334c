#include "dpdk_port/net_port.hpp"

#include <algorithm>
#include <cstring>

#include "packet/bytes.hpp"

namespace hcaemu::port {

namespace {

constexpr pkt::Mac kBroadcast{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
constexpr uint8_t kIcmp6 = 58;
constexpr uint8_t kNs = 135, kNa = 136;  // RFC 4861 4.3, 4.4
constexpr uint8_t kOptSlla = 1, kOptTlla = 2;  // RFC 4861 4.6.1
constexpr uint32_t kArpLen = 28;  // RFC 826 for Ethernet/IPv4
constexpr uint32_t kNsLen = 24;   // ICMPv6 NS/NA without options

pkt::Mac load_mac(const uint8_t* p) {
    pkt::Mac m;
    std::memcpy(m.data(), p, 6);
    return m;
}
pkt::Ip6 load_ip6(const uint8_t* p) {
    pkt::Ip6 a;
    std::memcpy(a.data(), p, 16);
    return a;
}
bool is_multicast(const pkt::Mac& m) { return m[0] & 1; }

uint32_t sum16(const uint8_t* p, uint32_t len, uint32_t s) {
    for (uint32_t i = 0; i + 1 < len; i += 2) s += uint32_t(p[i] << 8 | p[i + 1]);
    if (len & 1) s += uint32_t(p[len - 1] << 8);
    return s;
}

// Ethernet header; returns the bytes written (14).
uint32_t put_eth(uint8_t* p, const pkt::Mac& dst, const pkt::Mac& src, uint16_t type) {
    std::memcpy(p, dst.data(), 6);
    std::memcpy(p + 6, src.data(), 6);
    pkt::store_be16(p + 12, type);
    return uint32_t(pkt::kEthLen);
}

// IPv6 header for an ND message of `plen` bytes, hop limit 255 (RFC 4861 7.1).
void put_ip6_nd(uint8_t* p, const pkt::Ip6& src, const pkt::Ip6& dst, uint16_t plen) {
    p[0] = 0x60;
    p[1] = p[2] = p[3] = 0;
    pkt::store_be16(p + 4, plen);
    p[6] = kIcmp6;
    p[7] = 255;
    std::memcpy(p + 8, src.data(), 16);
    std::memcpy(p + 24, dst.data(), 16);
}

}  // namespace

uint16_t icmp6_checksum(const pkt::Ip6& src, const pkt::Ip6& dst, const uint8_t* icmp, uint32_t len) {
    uint32_t s = sum16(src.data(), 16, 0);
    s = sum16(dst.data(), 16, s);
    s += len >> 16;
    s += len & 0xFFFF;
    s += kIcmp6;
    s = sum16(icmp, len, s);
    while (s >> 16) s = (s & 0xFFFF) + (s >> 16);
    return uint16_t(~s);
}

pkt::Ip6 solicited_node(const pkt::Ip6& a) {
    return {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, a[13], a[14], a[15]};
}

pkt::Mac multicast_mac(const pkt::Ip6& a) { return {0x33, 0x33, a[12], a[13], a[14], a[15]}; }

pkt::Ip6 link_local_of(const pkt::Mac& m) {
    return {0xfe, 0x80, 0, 0, 0, 0, 0, 0, uint8_t(m[0] ^ 0x02), m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]};
}

NetPort::NetPort(Port& inner, const Clock& clock, const NetConfig& cfg)
    : inner_(inner), clock_(clock), cfg_(cfg), mac_(inner.mac()), ll_(link_local_of(mac_)),
      loop_(std::max<uint32_t>(cfg.loopback_frames, 1)) {
    if (cfg_.tries == 0) cfg_.tries = 1;
}

NetPort::~NetPort() {
    while (loop_head_ != loop_tail_) inner_.free(loop_[loop_head_++ % loop_.size()]);
}

void NetPort::set_capture(PcapWriter* w) {
    cap_ = w;
    drained_ns_ = clock_.now_ns();  // what waited before is taken as arrived now
    if (w && !stage_) {
        stage_cap_ = inner_.mtu() + uint32_t(pkt::kEthLen + pkt::kVlanLen);
        stage_ = std::make_unique<uint8_t[]>(size_t(stage_cap_) * kCaptureBurst);
    }
}

void NetPort::capture(const uint8_t* p, uint32_t len) {
    if (cap_) cap_->write({p, len}, clock_.now_ns());
}

// A received frame arrived after the last poll that emptied the ring: its stamp (the poll's) may
// be up to `late` after it. Noted beyond a poll loop's usual turn.
void NetPort::capture_rx(const Frame& f, uint64_t stamp, uint64_t late) {
    if (!cap_) return;
    cap_->write({f.data, f.len}, stamp);
    if (late > kLateNoteNs) cap_->note_late(cap_->frames(), late);
}

uint16_t NetPort::tx_burst(Frame* frames, uint16_t n) {
    uint16_t done = 0;
    while (done < n) {
        uint16_t run = 0;
        while (done + run < n && !is_roce_for_us(frames[done + run].data, frames[done + run].len)) ++run;
        if (run) {
            const uint16_t t = tx_inner(frames + done, run);
            done = uint16_t(done + t);
            if (t < run) return done;
            continue;
        }
        // To ourselves: the buffer moves to the loopback ring, no copy.
        if (loop_tail_ - loop_head_ == loop_.size()) return done;
        capture(frames[done].data, frames[done].len);
        loop_[loop_tail_++ % loop_.size()] = frames[done];
        ++st_.loopback;
        ++done;
    }
    return done;
}

uint16_t NetPort::tx_inner(Frame* frames, uint16_t n) {
    if (!cap_) return inner_.tx_burst(frames, n);
    // Copy first: a frame the inner port takes is the wire's from then on.
    uint16_t done = 0;
    while (done < n) {
        const uint16_t k = std::min<uint16_t>(uint16_t(n - done), kCaptureBurst);
        for (uint16_t i = 0; i < k; ++i) {
            const Frame& f = frames[done + i];
            stage_len_[i] = std::min(f.len, stage_cap_);
            std::memcpy(&stage_[size_t(i) * stage_cap_], f.data, stage_len_[i]);
        }
        const uint16_t t = inner_.tx_burst(frames + done, k);
        for (uint16_t i = 0; i < t; ++i) capture(&stage_[size_t(i) * stage_cap_], stage_len_[i]);
        done = uint16_t(done + t);
        if (t < k) break;
    }
    return done;
}

uint16_t NetPort::rx_burst(Frame* frames, uint16_t n) {
    run_timers();
    uint16_t keep = 0;
    while (keep < n && loop_head_ != loop_tail_) {  // looped frames first (captured when sent)
        frames[keep++] = loop_[loop_head_++ % loop_.size()];
        ++st_.rx_roce;
    }
    const uint16_t want = uint16_t(n - keep);
    const uint64_t polled = cap_ ? clock_.now_ns() : 0;
    const uint16_t in = inner_.rx_burst(frames + keep, want);
    const uint16_t got = uint16_t(keep + in);
    uint64_t stamp = 0, late = 0;
    if (cap_ && in) {
        stamp = clock_.now_ns();
        late = stamp - drained_ns_;
    }
    if (cap_ && in < want) drained_ns_ = polled;
    for (uint16_t i = keep; i < got; ++i) {
        Frame& f = frames[i];
        capture_rx(f, stamp, late);
        if (is_roce_for_us(f.data, f.len)) {
            ++st_.rx_roce;
            if (keep != i) frames[keep] = f;
            ++keep;
        } else {
            handle(f);
            inner_.free(f);
        }
    }
    return keep;
}

void NetPort::bad(uint64_t NetStats::* reason) {
    ++(st_.*reason);
    ++st_.rx_dropped_bad;
}

void NetPort::not_roce(uint64_t NetStats::* reason) {
    ++(st_.*reason);
    ++st_.rx_dropped_not_roce;
}

// The link-local address is ours with or without --ip's IPv6 address: GID 0 lists it (as Linux
// lists fe80:: on every RoCE netdev), so peers and our own QPs may use it.
bool NetPort::ours6(const pkt::Ip6& a) const { return a == ll_ || (cfg_.ip6 && a == *cfg_.ip6); }

// RoCE v2: UDP to port 4791 (IBTA Annex A17) in IPv4 or IPv6, to our MAC and our address. Frames
// that are not are counted here when they are not ARP/ND either (handle() does those).
bool NetPort::is_roce_for_us(const uint8_t* p, uint32_t len) {
    if (len < pkt::kEthLen) return false;
    uint32_t off = uint32_t(pkt::kEthLen);
    uint16_t type = pkt::load_be16(p + 12);
    bool tagged = false;
    if (type == pkt::kEthTypeVlan) {
        if (len < pkt::kEthLen + pkt::kVlanLen) return false;
        type = pkt::load_be16(p + 16);
        off += uint32_t(pkt::kVlanLen);
        tagged = true;
    }
    const pkt::Mac dst = load_mac(p);
    if (type == pkt::kEthTypeIpv4) {
        if (len < off + pkt::kIpv4Len + pkt::kUdpLen) return false;
        const uint8_t* ip = p + off;
        const uint32_t ihl = uint32_t(ip[0] & 0xF) * 4;
        if ((ip[0] >> 4) != 4 || ip[9] != pkt::kIpProtoUdp || ihl < pkt::kIpv4Len || len < off + ihl + pkt::kUdpLen ||
            pkt::load_be16(ip + ihl + 2) != pkt::kRoceV2Port)
            return false;
        if (dst != mac_) return false;
        if (!cfg_.ip4 || pkt::load_be32(ip + 16) != *cfg_.ip4) return false;
        return true;
    }
    if (type == pkt::kEthTypeIpv6) {
        if (len < off + pkt::kIpv6Len) return false;
        const uint8_t* ip = p + off;
        if ((ip[0] >> 4) != 6 || ip[6] != pkt::kIpProtoUdp) return false;
        if (len < off + pkt::kIpv6Len + pkt::kUdpLen || pkt::load_be16(ip + pkt::kIpv6Len + 2) != pkt::kRoceV2Port)
            return false;
        if (dst != mac_) return false;
        if (!ours6(load_ip6(ip + 24))) return false;
        return true;
    }
    (void)tagged;
    return false;
}

void NetPort::handle(Frame& f) {
    const uint8_t* p = f.data;
    const uint32_t len = f.len;
    if (len < pkt::kEthLen) return bad(&NetStats::bad_truncated);
    const pkt::Mac dst = load_mac(p);
    const uint16_t type = pkt::load_be16(p + 12);
    if (type == pkt::kEthTypeArp) {
        if (dst != mac_ && dst != kBroadcast) return not_roce(&NetStats::drop_other_mac);
        return rx_arp(p + pkt::kEthLen, len - uint32_t(pkt::kEthLen));
    }
    uint32_t off = uint32_t(pkt::kEthLen);
    uint16_t inner_type = type;
    if (type == pkt::kEthTypeVlan && len >= pkt::kEthLen + pkt::kVlanLen) {
        inner_type = pkt::load_be16(p + 16);
        off += uint32_t(pkt::kVlanLen);
    }
    if (inner_type == pkt::kEthTypeIpv4) {
        if (len < off + pkt::kIpv4Len) return not_roce(&NetStats::drop_not_udp_4791);
        const uint8_t* ip = p + off;
        const uint32_t ihl = uint32_t(ip[0] & 0xF) * 4;
        const bool roce = ip[9] == pkt::kIpProtoUdp && ihl >= pkt::kIpv4Len && len >= off + ihl + pkt::kUdpLen &&
                          pkt::load_be16(ip + ihl + 2) == pkt::kRoceV2Port;
        if (!roce) return not_roce(&NetStats::drop_not_udp_4791);
        if (dst != mac_) return not_roce(&NetStats::drop_other_mac);
        return not_roce(&NetStats::drop_other_ip);
    }
    if (inner_type == pkt::kEthTypeIpv6) {
        if (len < off + pkt::kIpv6Len) return not_roce(&NetStats::drop_not_udp_4791);
        const uint8_t* ip = p + off;
        if (ip[6] == kIcmp6 && type != pkt::kEthTypeVlan) return rx_icmp6(p + off, len - off);
        const bool roce = ip[6] == pkt::kIpProtoUdp && len >= off + pkt::kIpv6Len + pkt::kUdpLen &&
                          pkt::load_be16(ip + pkt::kIpv6Len + 2) == pkt::kRoceV2Port;
        if (!roce) return not_roce(&NetStats::drop_not_udp_4791);
        if (dst != mac_) return not_roce(&NetStats::drop_other_mac);
        return not_roce(&NetStats::drop_other_ip);
    }
    return not_roce(&NetStats::drop_ethertype);
}

// RFC 826, "Packet Reception".
void NetPort::rx_arp(const uint8_t* a, uint32_t len) {
    if (len < kArpLen) return bad(&NetStats::bad_truncated);
    const uint16_t op = pkt::load_be16(a + 6);
    if (pkt::load_be16(a) != 1 || pkt::load_be16(a + 2) != pkt::kEthTypeIpv4 || a[4] != 6 || a[5] != 4 ||
        (op != 1 && op != 2))
        return bad(&NetStats::bad_arp_format);
    const pkt::Mac sha = load_mac(a + 8);
    const uint32_t spa = pkt::load_be32(a + 14);
    const uint32_t tpa = pkt::load_be32(a + 24);
    const bool for_us = cfg_.ip4 && tpa == *cfg_.ip4;
    // A sender without an address (an RFC 5227 probe) or with a multicast MAC teaches nothing.
    const bool learnable = spa != 0 && !is_multicast(sha) && !(cfg_.ip4 && spa == *cfg_.ip4);
    if (learnable) {
        // RFC 826: update the sender's entry if we have one; add it if the packet is for us.
        if (spa == tpa) ++st_.arp_rx_gratuitous;
        learn(pkt::ipv4_mapped_gid(spa), sha, for_us);
    }
    if (!for_us) {
        if (spa != tpa) ++st_.arp_rx_not_ours;
        return;
    }
    if (op == 2) {
        ++st_.arp_rx_replies;
        return;
    }
    ++st_.arp_rx_requests;
    if (send_arp(2, sha, sha, spa)) ++st_.arp_tx_replies;
}

// RFC 4861 7.1.1 (NS) and 7.1.2 (NA) validity checks, then 7.2.3 to 7.2.5.
void NetPort::rx_icmp6(const uint8_t* ip, uint32_t len) {
    const uint32_t plen = pkt::load_be16(ip + 4);
    if (len < pkt::kIpv6Len + plen || plen < 4) return bad(&NetStats::bad_truncated);
    const uint8_t* m = ip + pkt::kIpv6Len;
    const uint8_t type = m[0];
    if (type != kNs && type != kNa) return void(++st_.nd_rx_not_ours);
    if (plen < kNsLen) return bad(&NetStats::bad_truncated);
    if (ip[7] != 255) return bad(&NetStats::bad_nd_hop_limit);
    const pkt::Ip6 src = load_ip6(ip + 8);
    const pkt::Ip6 dst = load_ip6(ip + 24);
    if (icmp6_checksum(src, dst, m, plen) != 0) return bad(&NetStats::bad_nd_checksum);
    const pkt::Ip6 target = load_ip6(m + 8);
    if (m[1] != 0 || target[0] == 0xff) return bad(&NetStats::bad_nd_format);
    // Options: every one with a length > 0, all inside the message.
    const uint8_t* lla = nullptr;
    for (uint32_t o = kNsLen; o < plen;) {
        if (o + 2 > plen || m[o + 1] == 0 || o + m[o + 1] * 8u > plen) return bad(&NetStats::bad_nd_format);
        if (m[o] == (type == kNs ? kOptSlla : kOptTlla) && m[o + 1] == 1) lla = m + o + 2;
        o += m[o + 1] * 8u;
    }
    const bool unspecified = src == pkt::Ip6{};
    if (type == kNs) {
        // 7.1.1: an NS from :: (duplicate address detection) goes to the target's solicited-node
        // address and carries no source link-layer option.
        if (unspecified && (lla || dst != solicited_node(target))) return bad(&NetStats::bad_nd_format);
        if (!ours6(target)) return void(++st_.nd_rx_not_ours);
        ++st_.nd_rx_ns;
        if (!unspecified && lla) learn(src, load_mac(lla), true);
        // The answer goes to the solicitor, or to all nodes (ff02::1) for DAD, unsolicited (7.2.4).
        static constexpr pkt::Ip6 kAllNodes{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
        const pkt::Mac eth_dst = unspecified ? multicast_mac(kAllNodes) : lla ? load_mac(lla) : load_mac(ip - pkt::kEthLen + 6);
        if (send_na(target, unspecified ? kAllNodes : src, eth_dst, target, !unspecified)) ++st_.nd_tx_na;
        return;
    }
    // NA: solicited ones must not go to a multicast address (7.1.2).
    const bool solicited = m[4] & 0x40, override_flag = m[4] & 0x20;
    if (solicited && dst[0] == 0xff) return bad(&NetStats::bad_nd_format);
    Entry* e = find(target);
    if (!e || e->is_static) return void(++st_.nd_rx_not_ours);
    ++st_.nd_rx_na;
    if (!lla) {
        if (e->state == NeighborState::reachable && solicited) {
            e->confirmed_ns = clock_.now_ns();
            e->probing = false;
            recompute_due();
        }
        return;
    }
    // 7.2.5: a resolving entry takes the address; a known one changes only on override.
    if (e->state == NeighborState::reachable && !override_flag && load_mac(lla) != e->mac) return;
    learn(target, load_mac(lla), false);
}

NetPort::Entry* NetPort::find(const pkt::Ip6& ip) {
    for (auto& e : table_)
        if (e.used && e.ip == ip) return &e;
    return nullptr;
}

const NetPort::Entry* NetPort::find(const pkt::Ip6& ip) const {
    for (const auto& e : table_)
        if (e.used && e.ip == ip) return &e;
    return nullptr;
}

NetPort::Entry& NetPort::insert(const pkt::Ip6& ip) {
    Entry* victim = nullptr;
    for (auto& e : table_) {
        if (!e.used) {
            victim = &e;
            break;
        }
        if (!e.is_static && (!victim || e.used_ns < victim->used_ns)) victim = &e;
    }
    if (!victim) victim = &table_[0];  // every entry static: the first goes
    if (victim->used) ++st_.neighbor_evictions;
    *victim = Entry{};
    victim->ip = ip;
    victim->used = true;
    victim->used_ns = clock_.now_ns();
    return *victim;
}

void NetPort::learn(const pkt::Ip6& ip, const pkt::Mac& mac, bool create) {
    Entry* e = find(ip);
    if (!e) {
        if (!create) return;
        e = &insert(ip);
    }
    if (e->is_static) return;
    if (e->state == NeighborState::resolving) ++st_.resolve_reachable;
    e->mac = mac;
    e->state = NeighborState::reachable;
    e->confirmed_ns = clock_.now_ns();
    e->sent = 0;
    e->probing = false;
    recompute_due();
}

void NetPort::add_static(const pkt::Ip6& gid, const pkt::Mac& mac) {
    Entry* e = find(gid);
    if (!e) e = &insert(gid);
    e->mac = mac;
    e->state = NeighborState::reachable;
    e->is_static = true;
    recompute_due();
}

NeighborState NetPort::state(const pkt::Ip6& gid) const {
    const Entry* e = find(gid);
    return e ? e->state : NeighborState::unknown;
}

bool NetPort::ours(const pkt::Ip6& gid) const {
    if (pkt::is_ipv4_mapped(gid)) return cfg_.ip4 && pkt::ipv4_of_mapped(gid) == *cfg_.ip4;
    return ours6(gid);
}

NeighborState NetPort::resolve(const pkt::Ip6& gid, pkt::Mac& mac) {
    if (ours(gid)) {  // our own address: frames to it loop back (tx_burst)
        mac = mac_;
        return NeighborState::reachable;
    }
    const uint64_t now = clock_.now_ns();
    run_timers();
    Entry* e = find(gid);
    if (e) {
        e->used_ns = now;
        switch (e->state) {
        case NeighborState::reachable:
            if (!e->is_static && now - e->confirmed_ns >= cfg_.reachable_ns && !e->probing) {
                // RFC 4861 7.3.3: a stale entry is still used while it is verified.
                ++st_.resolve_stale;
                e->probing = true;
                start_round(*e);
                recompute_due();
            }
            mac = e->mac;
            return NeighborState::reachable;
        case NeighborState::resolving:
            return NeighborState::resolving;
        case NeighborState::failed:
            if (now < e->due_ns) return NeighborState::failed;
            break;  // held long enough: start over
        case NeighborState::unknown:
            break;
        }
    } else {
        e = &insert(gid);
    }
    if (pkt::is_ipv4_mapped(gid) ? !cfg_.ip4 : !cfg_.ip6 && !pkt::is_link_local(gid)) {
        ++st_.resolve_no_address;
        e->state = NeighborState::failed;
        e->due_ns = now + cfg_.retry_ns;
        return NeighborState::failed;
    }
    ++st_.resolve_started;
    e->state = NeighborState::resolving;
    start_round(*e);
    recompute_due();
    return NeighborState::resolving;
}

bool NetPort::neighbor(const pkt::Ip6& gid, pkt::Mac& mac) { return resolve(gid, mac) == NeighborState::reachable; }

void NetPort::start_round(Entry& e) {
    e.sent = 0;
    e.round_end_ns = clock_.now_ns() + uint64_t(cfg_.tries) * cfg_.retry_ns;
    send_request(e);
}

void NetPort::send_request(Entry& e) {
    const bool v4 = pkt::is_ipv4_mapped(e.ip);
    const bool out = v4 ? send_arp(1, kBroadcast, pkt::Mac{}, pkt::ipv4_of_mapped(e.ip)) : send_ns(e.ip);
    if (!out) {  // refused (a memif link not up yet): no try, again soon
        e.due_ns = clock_.now_ns() + cfg_.unsent_retry_ns;
        return;
    }
    ++e.sent;
    ++(v4 ? st_.arp_tx_requests : st_.nd_tx_ns);
    e.due_ns = clock_.now_ns() + cfg_.retry_ns;
}

void NetPort::run_timers() {
    if (next_due_ == UINT64_MAX) return;  // nothing resolving: no clock read on the data path
    const uint64_t now = clock_.now_ns();
    if (now < next_due_) return;
    for (auto& e : table_) {
        if (!waiting(e) || now < e.due_ns) continue;
        if (e.sent >= cfg_.tries || now >= e.round_end_ns) {
            e.state = NeighborState::failed;
            e.probing = false;
            e.due_ns = now + cfg_.retry_ns;
            ++st_.resolve_failed;
        } else {
            send_request(e);
        }
    }
    recompute_due();
}

void NetPort::recompute_due() {
    next_due_ = UINT64_MAX;
    for (const auto& e : table_)
        if (waiting(e)) next_due_ = std::min(next_due_, e.due_ns);
}

bool NetPort::send_own(Frame& f) {
    capture(f.data, f.len);
    if (inner_.tx_burst(&f, 1) == 1) return true;
    inner_.free(f);
    ++st_.tx_no_buffer;
    return false;
}

// RFC 826: op 1 request (broadcast, target hardware address unknown: zero), op 2 reply.
bool NetPort::send_arp(uint16_t op, const pkt::Mac& eth_dst, const pkt::Mac& tha, uint32_t tpa) {
    Frame f;
    if (!inner_.alloc(f)) return void(++st_.tx_no_buffer), false;
    if (f.cap < pkt::kMinFrameLen) return inner_.free(f), void(++st_.tx_no_buffer), false;
    uint8_t* p = f.data;
    std::memset(p, 0, pkt::kMinFrameLen);  // padded to the Ethernet minimum
    const uint32_t o = put_eth(p, eth_dst, mac_, pkt::kEthTypeArp);
    uint8_t* a = p + o;
    pkt::store_be16(a, 1);
    pkt::store_be16(a + 2, pkt::kEthTypeIpv4);
    a[4] = 6;
    a[5] = 4;
    pkt::store_be16(a + 6, op);
    std::memcpy(a + 8, mac_.data(), 6);
    pkt::store_be32(a + 14, *cfg_.ip4);
    std::memcpy(a + 18, tha.data(), 6);
    pkt::store_be32(a + 24, tpa);
    f.len = uint32_t(pkt::kMinFrameLen);
    return send_own(f);
}

// RFC 4861 4.3 (NS) and 4.4 (NA): a 24-byte message with one link-layer address option (ours:
// source for an NS, target for an NA), hop limit 255, checksum over the pseudo-header.
bool NetPort::send_nd(uint8_t type, uint8_t flags, const pkt::Ip6& src, const pkt::Ip6& dst,
                      const pkt::Mac& eth_dst, const pkt::Ip6& target) {
    Frame f;
    if (!inner_.alloc(f)) return void(++st_.tx_no_buffer), false;
    constexpr uint32_t kPlen = kNsLen + 8;
    constexpr uint32_t kLen = uint32_t(pkt::kEthLen + pkt::kIpv6Len) + kPlen;
    if (f.cap < kLen) return inner_.free(f), void(++st_.tx_no_buffer), false;
    uint8_t* p = f.data;
    const uint32_t o = put_eth(p, eth_dst, mac_, pkt::kEthTypeIpv6);
    put_ip6_nd(p + o, src, dst, uint16_t(kPlen));
    uint8_t* m = p + o + pkt::kIpv6Len;
    std::memset(m, 0, kPlen);
    m[0] = type;
    m[4] = flags;
    std::memcpy(m + 8, target.data(), 16);
    m[24] = type == kNs ? kOptSlla : kOptTlla;
    m[25] = 1;
    std::memcpy(m + 26, mac_.data(), 6);
    pkt::store_be16(m + 2, icmp6_checksum(src, dst, m, kPlen));
    f.len = kLen;
    return send_own(f);
}

// RFC 4861 4.3: to the solicited-node multicast address, from the address of the target's scope.
bool NetPort::send_ns(const pkt::Ip6& target) {
    const pkt::Ip6 dst = solicited_node(target);
    const pkt::Ip6 src = pkt::is_link_local(target) ? ll_ : *cfg_.ip6;
    return send_nd(kNs, 0, src, dst, multicast_mac(dst), target);
}

// RFC 4861 4.4: Router 0, Solicited as told, Override 1.
bool NetPort::send_na(const pkt::Ip6& src, const pkt::Ip6& dst, const pkt::Mac& eth_dst, const pkt::Ip6& target,
                      bool solicited) {
    return send_nd(kNa, uint8_t((solicited ? 0x40 : 0) | 0x20), src, dst, eth_dst, target);
}

}  // namespace hcaemu::port

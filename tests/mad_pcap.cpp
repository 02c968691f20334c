// Writes a pcap of GMPs for the decoder cross-check (scripts/check_mad_decoders.py): one RoCE v2 UD
// SEND Only to QP1 per CM attribute (tests/mad_samples.hpp), IPv4 then the REQ again over IPv6.
// With --malformed: frames each `hcaemu dissect --strict` must flag (one problem per frame).
//   mad_pcap OUT.pcap [--malformed]
#include <cstdio>
#include <cstring>
#include <string>

#include "dpdk_port/pcap_file.hpp"
#include "packet/build.hpp"
#include "packet/mad.hpp"
#include "tests/mad_samples.hpp"

using namespace hcaemu::pkt;

namespace {

Headers base(bool v6) {
    Headers h;
    h.eth.dst = {0x02, 0, 0, 0, 0, 2};
    h.eth.src = {0x02, 0, 0, 0, 0, 1};
    h.ipv6 = v6;
    h.eth.ethertype = v6 ? kEthTypeIpv6 : kEthTypeIpv4;
    h.ip4.src = 0xC6120001;  // 198.18.0.1
    h.ip4.dst = 0xC6120002;
    h.ip6.src = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    h.ip6.dst = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
    h.udp.sport = udp_sport_for_qpn(kGsiQpn);
    h.bth.psn = 0;
    return h;
}

bool write(hcaemu::port::PcapWriter& w, const Headers& h, const uint8_t* mad, size_t mad_len, uint64_t& ts) {
    uint8_t f[1024];
    size_t len = 0;
    Headers x = h;
    x.bth.opcode = op::ud | op::send_only;
    x.bth.dest_qp = kGsiQpn;
    x.deth.src_qp = kGsiQpn;
    if (x.deth.qkey == 0) x.deth.qkey = kGsiQkey;
    if (build(x, {mad, mad_len}, f, len) != BuildError::ok) return false;
    w.write({f, len}, ts);
    ts += 1000000;
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: mad_pcap OUT.pcap [--malformed]\n");
        return 2;
    }
    const bool bad = argc > 2 && std::strcmp(argv[2], "--malformed") == 0;
    hcaemu::port::PcapWriter w(argv[1]);
    if (!w.ok()) {
        std::fprintf(stderr, "mad_pcap: %s\n", w.error().c_str());
        return 2;
    }
    uint64_t ts = 1700000000ULL * 1000000000ULL;
    const auto samples = hcaemu::test::mad_samples();
    std::array<uint8_t, kMadLen> m;
    if (!bad) {
        for (const CmMad& s : samples) {
            build_cm(s, m);
            if (!write(w, base(false), m.data(), m.size(), ts)) return 1;
        }
        build_cm(samples[1], m);
        if (!write(w, base(true), m.data(), m.size(), ts)) return 1;
        return 0;
    }
    build_cm(samples[1], m);  // a REQ, then one fault per frame
    auto with = [&](size_t off, uint8_t v) {
        std::array<uint8_t, kMadLen> x = m;
        x[off] = v;
        return x;
    };
    const std::array<uint8_t, kMadLen> faults[] = {
        with(28, 0x01),  // reserved byte 4 of the REQ
        with(18, 0x80),  // header reserved bytes
        with(17, 0x19),  // LAP: unsupported
        with(17, 0x2F),  // unknown attribute
        with(2, 0x01),   // class version 1
        with(3, 0x01),   // a REQ as Get
    };
    for (const auto& x : faults)
        if (!write(w, base(false), x.data(), x.size(), ts)) return 1;
    Headers q = base(false);
    q.deth.qkey = 0x80010001;  // not the GSI's Q_Key
    if (!write(w, q, m.data(), m.size(), ts)) return 1;
    if (!write(w, base(false), m.data(), 200, ts)) return 1;  // a short MAD
    return 0;
}

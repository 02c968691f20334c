// libFuzzer target: pkt::parse and pkt::dissect of one frame (the input), and the build round trip.
// The input's last byte picks the language of the full and brief dissections and of the summary
// (bit 0: en or zh, packet/messages.hpp) and stays part of the frame, so the committed seeds (whole
// frames, the ICRC's last byte random) reach both languages and a mutation of that byte flips it.
// Invariants, beyond "no crash, no sanitizer report":
//  - a frame that parses (checks off) rebuilds (pkt::build) into a frame that parses with every
//    check on, to the same fields and payload;
//  - a frame that parses with every check on, whose PadCnt is the one build derives and whose pad
//    bytes are zero, rebuilds byte for byte (as test_captures checks on the rxe captures), apart
//    from the IPv4 and UDP checksum fields: 0x0000 and 0xFFFF are the same one's complement zero
//    (RFC 1071), both verify, build writes one of them.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "packet/build.hpp"
#include "packet/dissect.hpp"
#include "packet/parse.hpp"

using namespace hcaemu::pkt;

namespace {

[[noreturn]] void fail(const char* what) {
    fprintf(stderr, "fuzz_parse: invariant broken: %s\n", what);
    abort();
}

// The fields build computes (parse-only fields), set to what a fresh Headers holds.
Headers normalized(Headers h) {
    h.ip4.total_len = 0;
    h.ip4.checksum = 0;
    h.ip6.payload_len = 0;
    h.udp.length = 0;
    h.udp.checksum = 0;
    h.bth.pad_cnt = 0;
    return h;
}

void round_trip(std::span<const uint8_t> in) {
    Packet p;
    const ParseOptions off{.verify_icrc = false, .verify_ip_checksum = false, .verify_udp_checksum = false};
    if (parse(in, p, off) != ParseError::ok) return;
    static uint8_t out[70000];
    size_t len = 0;
    BuildOptions bo;
    bo.udp_checksum = p.h.udp.checksum != 0 ? UdpCsum::compute : UdpCsum::zero;
    const BuildError be = build(p.h, p.payload(), out, len, bo);
    if (be == BuildError::frame_too_long) {
        // Only when build's own pad makes the IP length overflow 16 bits.
        if (frame_len(*p.op, p.h.eth.vlan, p.h.ipv6, p.payload_len) - kEthLen - (p.h.eth.vlan ? kVlanLen : 0) -
                (p.h.ipv6 ? kIpv6Len : 0) <= 0xFFFF)
            fail("build: frame_too_long for a frame that fits");
        return;
    }
    if (be != BuildError::ok) fail("build refused a parsed frame");
    Packet q;
    if (parse({out, len}, q) != ParseError::ok) fail("a rebuilt frame does not parse with every check on");
    if (!(normalized(q.h) == normalized(p.h))) fail("a rebuilt frame parses to other fields");
    if (q.payload_len != p.payload_len || std::memcmp(q.payload().data(), p.payload().data(), p.payload_len) != 0)
        fail("a rebuilt frame carries another payload");

    // Byte for byte, for a frame that passes every check and pads as build does.
    Packet v;
    if (parse(in, v) != ParseError::ok) return;
    if (v.h.bth.pad_cnt != pad_for(v.payload_len)) return;
    for (uint32_t i = 0; i < v.h.bth.pad_cnt; ++i)
        if (in[v.payload_off + v.payload_len + i] != 0) return;
    if (len < v.len) fail("a rebuilt frame is shorter");
    static uint8_t a[70000], b[70000];
    std::memcpy(a, in.data(), v.len);
    std::memcpy(b, out, v.len);
    const size_t ip_ck = v.l3_off + 10, udp_ck = v.l4_off + 6;
    if (!v.h.ipv6) a[ip_ck] = a[ip_ck + 1] = b[ip_ck] = b[ip_ck + 1] = 0;
    a[udp_ck] = a[udp_ck + 1] = b[udp_ck] = b[udp_ck + 1] = 0;
    if (std::memcmp(a, b, v.len) != 0) fail("a valid frame does not rebuild byte for byte");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 65600) return -1;  // an Ethernet frame's IP length is 16 bits
    const std::span<const uint8_t> in(data, size);
    static std::string out;
    out.clear();
    Packet p;
    const ParseError e = parse(in, p);
    static_assert(kLangCount == 2, "pick the language from more than one bit");
    const Lang lang = size > 0 && (data[size - 1] & 1) != 0 ? Lang::zh : Lang::en;
    static DissectSummary sum;
    sum.add(p, e);
    for (DissectFormat f : {DissectFormat::full, DissectFormat::brief, DissectFormat::json}) {
        DissectOptions o;
        o.format = f;
        o.payload_bytes = 64;
        o.lang = lang;
        dissect(out, p, e, size, 1, 0.5, o);
    }
    // The same frame with the checks off: dissect then sees every field parse decoded.
    Packet p2;
    const ParseError e2 = parse(in, p2, ParseOptions{false, false, false});
    DissectOptions o2;
    o2.lang = lang;
    dissect(out, p2, e2, size, 2, 1.0, o2);
    round_trip(in);
    if (sum.frames % 100000 == 0) {
        out.clear();
        sum.print(out, DissectFormat::full, lang);
        sum.print(out, DissectFormat::json, lang);
    }
    return 0;
}

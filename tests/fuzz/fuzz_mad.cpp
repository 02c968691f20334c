// libFuzzer target: the MAD layer (packet/mad.hpp, packet/mad_dissect.hpp) on one input taken as a
// MAD of any length. Invariants, beyond "no crash, no sanitizer report":
//  - a MAD parse_cm accepts rebuilds (build_cm) into one it accepts again, to the same fields, with
//    no reserved bit of the attribute set (the header's are kept as given); when the input had none set, the rebuilt MAD is the input byte for byte;
//  - the input carried in a UD SEND Only to QP1 parses as RoCE v2, check_gmp agrees with parse_cm
//    and mad_reserved_set, and dissects in every format; the summary counts it as a GMP.
//  - the CMA header: parse_cma_hdr(build_cma_hdr(parse_cma_hdr(x))) gives the same header.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "packet/build.hpp"
#include "packet/mad.hpp"
#include "packet/mad_dissect.hpp"

using namespace hcaemu::pkt;

namespace {

[[noreturn]] void fail(const char* what) {
    fprintf(stderr, "fuzz_mad: invariant broken: %s\n", what);
    abort();
}

void round_trip(std::span<const uint8_t> in) {
    CmMad m;
    if (parse_cm(in, m) != MadError::ok) return;
    std::array<uint8_t, kMadLen> out;
    build_cm(m, out);
    CmMad again;
    if (parse_cm(out, again) != MadError::ok) fail("a rebuilt MAD does not parse");
    if (!(again == m)) fail("a rebuilt MAD parses to other fields");
    std::array<uint8_t, kMadLen> attr_only = out;  // build keeps the header's reserved bits as given
    attr_only[5] &= uint8_t(~mad_status::kReservedMask);
    attr_only[18] = attr_only[19] = 0;
    if (mad_reserved_set(attr_only) != 0) fail("build set a reserved bit of the attribute");
    const std::span<const uint8_t, kMadLen> fixed(in.data(), kMadLen);
    if (mad_reserved_set(fixed) == 0 && std::memcmp(out.data(), in.data(), kMadLen) != 0)
        fail("a MAD with no reserved bit set does not rebuild byte for byte");
}

void carried(std::span<const uint8_t> in, std::string& out) {
    Headers h;
    h.eth.ethertype = kEthTypeIpv4;
    h.ip4.src = 0xC6120001;
    h.ip4.dst = 0xC6120002;
    h.bth.opcode = op::ud | op::send_only;
    h.bth.dest_qp = kGsiQpn;
    h.deth.qkey = kGsiQkey;
    h.deth.src_qp = kGsiQpn;
    static uint8_t f[8192];
    size_t len = 0;
    if (build(h, in, f, len) != BuildError::ok) fail("build of a GSI frame");
    Packet p;
    const ParseError e = parse({f, len}, p);
    if (e != ParseError::ok) fail("a GSI frame does not parse");
    if (!is_gsi_frame(p, e)) fail("not seen as a GSI frame");
    const GmpCheck c = check_gmp(p);
    CmMad m;
    const MadError pe = parse_cm(in, m);
    if (in.size() == kMadLen) {
        if (c.error != pe) fail("check_gmp and parse_cm disagree");
        if (c.reserved_bytes != mad_reserved_set(std::span<const uint8_t, kMadLen>(in.data(), kMadLen)))
            fail("check_gmp and mad_reserved_set disagree");
    } else if (c.error != (in.size() < kMadLen ? MadError::mad_truncated : MadError::mad_too_long)) {
        fail("a MAD of the wrong length not reported");
    }
    for (DissectFormat fmt : {DissectFormat::full, DissectFormat::brief, DissectFormat::json}) {
        DissectOptions o;
        o.format = fmt;
        dissect(out, p, e, len, 1, 0.0, o);
    }
    static DissectSummary sum;
    const uint64_t before = sum.gmp;
    sum.add(p, e);
    if (sum.gmp != before + 1) fail("the summary did not count a GMP");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 4096) return -1;
    const std::span<const uint8_t> in(data, size);
    static std::string out;
    out.clear();
    MadHdr h;
    (void)parse_mad_hdr(in, h);
    round_trip(in);
    carried(in, out);
    CmaHdr c;
    if (parse_cma_hdr(in, c) == MadError::ok) {
        std::array<uint8_t, kCmaHdrLen> b;
        build_cma_hdr(c, b);
        CmaHdr d;
        if (parse_cma_hdr(b, d) != MadError::ok || !(d == c)) fail("CMA header round trip");
    }
    return 0;
}

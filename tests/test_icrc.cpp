// CRC32 variants against each other and the reference; the ICRC's masking rules.
#include <catch2/catch.hpp>

#include <cpuid.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "packet/build.hpp"
#include "packet/bytes.hpp"
#include "packet/icrc.hpp"
#include "packet/parse.hpp"

using namespace hcaemu::pkt;

namespace {

std::vector<CrcImpl> available_impls() {
    std::vector<CrcImpl> v;
    for (size_t i = 0; i < kCrcImplCount; ++i)
        if (crc_impl_available(CrcImpl(i))) v.push_back(CrcImpl(i));
    return v;
}

// Restores the active implementation when a test changes it.
struct ImplGuard {
    CrcImpl saved = crc_impl();
    ~ImplGuard() { set_crc_impl(saved); }
};

}  // namespace

TEST_CASE("every CRC32 variant gives the IEEE check value", "[crc]") {
    const uint8_t msg[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
    for (CrcImpl c : available_impls()) {
        INFO(kCrcImplName[size_t(c)]);
        CHECK(crc_impl_fn(c)(0, msg, 9) == 0xCBF43926u);  // the CRC-32/ISO-HDLC check value
        CHECK(crc_impl_fn(c)(0, msg, 0) == 0u);
    }
}

TEST_CASE("the portable variants are always there and an accelerated one is picked when the CPU has it", "[crc]") {
    CHECK(crc_impl_available(CrcImpl::bitwise));
    CHECK(crc_impl_available(CrcImpl::slice8));
    CHECK(crc_impl_available(CrcImpl::isal_base));  // linked ISA-L exports it
    if (__builtin_cpu_supports("pclmul")) {
        CHECK(crc_impl_available(CrcImpl::isal_by8));
        CHECK(crc_impl() != CrcImpl::slice8);
    }
    CHECK(crc_impl() != CrcImpl::bitwise);
}

TEST_CASE("CRC32 variants agree at every length, alignment and chaining split", "[crc]") {
    std::mt19937_64 rng(42);
    std::vector<uint8_t> buf(4096 + 64);
    for (auto& b : buf) b = uint8_t(rng());
    const auto impls = available_impls();
    const CrcFn ref = crc_impl_fn(CrcImpl::bitwise);
    for (size_t len = 0; len <= 2100; len += (len < 300 ? 1 : 97)) {
        const size_t align = len % 61;
        const uint32_t want = ref(0, buf.data() + align, len);
        const size_t split = len / 3;
        const uint32_t seed = uint32_t(rng());
        const uint32_t want_seeded = ref(seed, buf.data() + align, len);
        for (CrcImpl c : impls) {
            INFO(kCrcImplName[size_t(c)] << " len " << len);
            const CrcFn f = crc_impl_fn(c);
            REQUIRE(f(0, buf.data() + align, len) == want);
            REQUIRE(f(f(0, buf.data() + align, split), buf.data() + align + split, len - split) == want);
            REQUIRE(f(seed, buf.data() + align, len) == want_seeded);
        }
    }
    for (CrcImpl c : impls) CHECK(crc_impl_fn(c)(0, buf.data(), 4096) == ref(0, buf.data(), 4096));
}

TEST_CASE("crc32_copy copies exactly and gives the CRC at every length, alignment and split", "[crc]") {
    const auto impl = CrcCopyImpl(GENERATE(range(size_t(0), kCrcCopyImplCount)));
    INFO("crc32_copy by " << kCrcCopyImplName[size_t(impl)]);
    if (!crc_copy_impl_fn(impl)) {
        WARN("this CPU lacks " << kCrcCopyImplName[size_t(impl)] << ": not tested");
        return;
    }
    const CrcCopyImpl saved = crc_copy_impl();
    set_crc_copy_impl(impl);
    REQUIRE(crc_copy_impl() == impl);
    struct Restore {
        CrcCopyImpl i;
        ~Restore() { set_crc_copy_impl(i); }
    } restore{saved};
    std::mt19937_64 rng(9);
    std::vector<uint8_t> src(6000 + 64), dst(src.size() + 64);
    for (auto& b : src) b = uint8_t(rng());
    const CrcFn ref = crc_impl_fn(CrcImpl::bitwise);
    for (size_t len = 0; len <= 5000; len += (len < 300 ? 1 : 61)) {
        const size_t sa = len % 17, da = len % 13 + 1;  // both misaligned, differently
        const uint32_t seed = uint32_t(rng());
        std::fill(dst.begin(), dst.end(), uint8_t(0xA5));
        INFO("len " << len);
        REQUIRE(crc32_copy(seed, dst.data() + da, src.data() + sa, len) == ref(seed, src.data() + sa, len));
        REQUIRE(std::equal(src.begin() + long(sa), src.begin() + long(sa + len), dst.begin() + long(da)));
        REQUIRE(dst[da - 1] == 0xA5);  // nothing written outside [da, da + len)
        REQUIRE(dst[da + len] == 0xA5);
        // In pieces, as a gather over several SGEs calls it.
        const size_t cut1 = len / 3, cut2 = len - len / 5;
        uint32_t c = crc32_copy(0, dst.data(), src.data() + sa, cut1);
        c = crc32_copy(c, dst.data() + cut1, src.data() + sa + cut1, cut2 - cut1);
        c = crc32_copy(c, dst.data() + cut2, src.data() + sa + cut2, len - cut2);
        REQUIRE(c == ref(0, src.data() + sa, len));
    }
}

TEST_CASE("set_crc_impl switches the active variant and ignores unavailable ones", "[crc]") {
    ImplGuard g;
    set_crc_impl(CrcImpl::slice8);
    CHECK(crc_impl() == CrcImpl::slice8);
    set_crc_impl(CrcImpl::count);
    CHECK(crc_impl() == CrcImpl::slice8);
}

TEST_CASE("ICRC masks exactly the variant fields (IBTA A17.3.3)", "[crc][icrc]") {
    ImplGuard g;
    for (bool v6 : {false, true}) {
        Headers h;
        h.ipv6 = v6;
        h.bth.opcode = 0x04;  // RC SEND Only
        h.bth.dest_qp = 0x123456;
        h.bth.psn = 0xABCDEF;
        std::vector<uint8_t> pl(37, 0x5A), f(256);
        size_t len = 0;
        REQUIRE(build(h, pl, f, len) == BuildError::ok);
        const size_t l3 = kEthLen;
        const size_t ipl = v6 ? kIpv6Len : kIpv4Len;
        const size_t icrc_at = len - kIcrcLen;  // frame is above 60 bytes: no Ethernet padding
        const uint32_t base = icrc(f.data() + l3, icrc_at - l3, v6);
        REQUIRE(load_le32(f.data() + icrc_at) == base);

        // Bytes whose bits the ICRC ignores: the variant fields.
        std::vector<size_t> variant;
        if (v6) {
            variant = {l3 + 1, l3 + 2, l3 + 3, l3 + 7};  // TC low nibble + flow label, hop limit
        } else {
            variant = {l3 + 1, l3 + 8, l3 + 10, l3 + 11};  // TOS, TTL, header checksum
        }
        variant.push_back(l3 + ipl + 6);  // UDP checksum
        variant.push_back(l3 + ipl + 7);
        variant.push_back(l3 + ipl + kUdpLen + 4);  // BTH byte 4: FECN, BECN, resv6
        for (size_t at = l3; at < icrc_at; ++at) {
            for (int bit = 0; bit < 8; ++bit) {
                auto g2 = f;
                g2[at] ^= uint8_t(1u << bit);
                const bool is_variant = std::find(variant.begin(), variant.end(), at) != variant.end() ||
                                        (v6 && at == l3 && bit < 4);  // TC high nibble
                INFO("v6 " << v6 << " byte " << at << " bit " << bit);
                REQUIRE((icrc(g2.data() + l3, icrc_at - l3, v6) == base) == is_variant);
            }
        }
        // Every variant gives the same ICRC over real frames.
        for (size_t i = 0; i < kCrcImplCount; ++i) {
            if (!crc_impl_available(CrcImpl(i))) continue;
            set_crc_impl(CrcImpl(i));
            CHECK(icrc(f.data() + l3, icrc_at - l3, v6) == base);
        }
    }
}

TEST_CASE("ICRC equals the CRC of the masked packet on both sides of the one-copy size", "[crc][icrc]") {
    // icrc() copies packets up to 256 bytes whole and CRCs larger ones in two calls: both must
    // give the CRC-32 of 8 x 0xFF and the packet with its variant fields set to ones (IBTA A17.3.3).
    const CrcFn bitwise = crc_impl_fn(CrcImpl::bitwise);
    for (bool v6 : {false, true}) {
        for (size_t pl_len : {0u, 8u, 150u, 170u, 190u, 200u, 210u, 230u, 1024u}) {
            Headers h;
            h.ipv6 = v6;
            h.bth.opcode = 0x04;
            h.bth.dest_qp = 0x12;
            h.bth.psn = 77;
            std::vector<uint8_t> pl(pl_len), f(2048);
            for (size_t i = 0; i < pl_len; ++i) pl[i] = uint8_t(i * 13 + 1);
            size_t len = 0;
            REQUIRE(build(h, pl, f, len) == BuildError::ok);
            const size_t l3 = kEthLen;
            const size_t ipl = v6 ? kIpv6Len : kIpv4Len;
            // IP header to the end of the payload and its pad (a short frame has Ethernet padding after the ICRC)
            const size_t n = ipl + kUdpLen + kBthLen + (pl_len + 3) / 4 * 4;
            std::vector<uint8_t> m(8 + n, 0xFF);
            std::memcpy(m.data() + 8, f.data() + l3, n);
            uint8_t* ip = m.data() + 8;
            if (v6) {
                ip[0] |= 0x0F;
                ip[1] = ip[2] = ip[3] = ip[7] = 0xFF;
            } else {
                ip[1] = ip[8] = ip[10] = ip[11] = 0xFF;
            }
            ip[ipl + 6] = ip[ipl + 7] = ip[ipl + kUdpLen + 4] = 0xFF;
            INFO("v6 " << v6 << " payload " << pl_len << " ICRC over " << n << " bytes");
            CHECK(icrc(f.data() + l3, n, v6) == bitwise(0, m.data(), m.size()));
            CHECK(load_le32(f.data() + l3 + n) == bitwise(0, m.data(), m.size()));
        }
    }
}

namespace {

// XINUSE (XGETBV with ECX = 1): which register states are not in their initial state. Bit 2: the
// upper halves of ymm0-15, bit 6: of zmm0-15; either makes every later SSE instruction pay the
// SSE/AVX transition. 0 bits if the CPU cannot tell.
bool xinuse_known() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(0xD, 1, &a, &b, &c, &d) && (a & (1u << 2));
}
uint64_t xinuse() {
    uint32_t lo = 0, hi = 0;
    asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
    return (uint64_t(hi) << 32) | lo;
}

}  // namespace

TEST_CASE("The CRC leaves no upper vector state behind (the SSE/AVX transition)", "[crc]") {
    if (!xinuse_known()) {
        WARN("XGETBV(1) not supported: not checked");
        return;
    }
    ImplGuard g;
    std::vector<uint8_t> buf(1024, 0x5A);
    for (CrcImpl c : available_impls()) {
        set_crc_impl(c);
        const uint32_t v = crc32(0, buf.data(), buf.size());
        const uint64_t in_use = xinuse();
        INFO(kCrcImplName[size_t(c)] << " XINUSE " << std::hex << in_use << " crc " << v);
        CHECK((in_use & ((1u << 2) | (1u << 6))) == 0);
    }
    std::vector<uint8_t> dst(buf.size());
    const CrcCopyImpl saved = crc_copy_impl();
    for (size_t c = 0; c < kCrcCopyImplCount; ++c) {
        if (!crc_copy_impl_fn(CrcCopyImpl(c))) continue;
        set_crc_copy_impl(CrcCopyImpl(c));
        const uint32_t v = crc32_copy(0, dst.data(), buf.data(), buf.size());
        const uint64_t in_use = xinuse();
        INFO("crc32_copy by " << kCrcCopyImplName[c] << " XINUSE " << std::hex << in_use << " crc " << v);
        CHECK((in_use & ((1u << 2) | (1u << 6))) == 0);
    }
    set_crc_copy_impl(saved);
}

namespace {

// The bytes of a flow's header (from the IP header) that change from packet to packet, and the
// bits the ICRC masks (IBTA A17.3.3), written out independently of packet/icrc.cpp.
struct FlowBytes {
    size_t hl;
    std::vector<size_t> per_packet;
    std::vector<std::pair<size_t, uint8_t>> masked;  // offset, bits
};
FlowBytes flow_bytes(bool v6) {
    if (v6)
        return {60, {4, 5, 44, 45, 48, 49, 56, 57, 58, 59}, {{0, 0x0F}, {1, 0xFF}, {2, 0xFF}, {3, 0xFF}, {7, 0xFF}, {46, 0xFF}, {47, 0xFF}, {52, 0xFF}}};
    return {40, {2, 3, 4, 5, 24, 25, 28, 29, 36, 37, 38, 39}, {{1, 0xFF}, {8, 0xFF}, {10, 0xFF}, {11, 0xFF}, {26, 0xFF}, {27, 0xFF}, {32, 0xFF}}};
}

}  // namespace

TEST_CASE("a flow's ICRC equals the ICRC of every packet of the flow", "[crc][icrc]") {
    std::mt19937_64 rng(7);
    for (CrcImpl impl : available_impls()) {
        if (impl == CrcImpl::bitwise) continue;  // too slow for this many packets; the reference below
        ImplGuard g;
        set_crc_impl(impl);
        for (bool v6 : {false, true}) {
            const FlowBytes fb = flow_bytes(v6);
            std::vector<uint8_t> a(fb.hl + 300), b(a.size());
            for (auto& x : a) x = uint8_t(rng());
            IcrcFlow f;
            icrc_flow_init(f, a.data(), v6);
            REQUIRE(f.valid);
            REQUIRE(f.ipv6 == v6);
            for (int k = 0; k < 2000; ++k) {
                b = a;
                for (size_t p : fb.per_packet) b[p] = uint8_t(rng());
                for (auto [p, bits] : fb.masked) b[p] ^= uint8_t(rng()) & bits;
                for (size_t i = fb.hl; i < b.size(); ++i) b[i] = uint8_t(rng());
                const size_t len = fb.hl + size_t(rng() % 301);
                INFO(kCrcImplName[size_t(impl)] << " v6 " << v6 << " packet " << k << " len " << len);
                REQUIRE(icrc_flow_matches(f, b.data()));
                REQUIRE(icrc_flow(f, b.data(), len) == icrc(b.data(), len, v6));
                if (k % 500 == 0) {  // the same state from any packet of the flow
                    IcrcFlow f2;
                    icrc_flow_init(f2, b.data(), v6);
                    REQUIRE(f2.state == f.state);
                    REQUIRE(f2.fixed == f.fixed);
                }
            }
            // Against the bitwise reference too (icrc() itself is checked against it above).
            const CrcFn bitwise = crc_impl_fn(CrcImpl::bitwise);
            std::vector<uint8_t> m(8 + a.size(), 0xFF);
            std::memcpy(m.data() + 8, a.data(), a.size());
            for (auto [p, bits] : fb.masked) m[8 + p] |= bits;
            CHECK(icrc_flow(f, a.data(), a.size()) == bitwise(0, m.data(), m.size()));
            CHECK(icrc_flow(f, a.data(), fb.hl) == bitwise(0, m.data(), 8 + fb.hl));
            // The running value after a prefix (the headers), continued over the rest, in pieces.
            // (a rest of 33+ bytes from the vector kernel, a shorter one by table)
            for (size_t pre : {fb.hl, fb.hl + 4, fb.hl + 16, fb.hl + 28, fb.hl + 33, fb.hl + 90}) {
                INFO("prefix " << pre);
                uint32_t c = icrc_flow(f, a.data(), pre);
                CHECK(c == bitwise(0, m.data(), 8 + pre));
                std::vector<uint8_t> out(a.size());
                c = crc32_copy(c, out.data(), a.data() + pre, 200);
                c = crc32(c, a.data() + pre + 200, a.size() - pre - 200);
                CHECK(c == icrc_flow(f, a.data(), a.size()));
            }
        }
    }
}

TEST_CASE("a packet matches a flow exactly when its fixed header bits are the flow's", "[crc][icrc]") {
    std::mt19937_64 rng(11);
    for (bool v6 : {false, true}) {
        const FlowBytes fb = flow_bytes(v6);
        std::vector<uint8_t> a(fb.hl + 8);
        for (auto& x : a) x = uint8_t(rng());
        IcrcFlow f;
        icrc_flow_init(f, a.data(), v6);
        for (size_t at = 0; at < a.size(); ++at) {
            uint8_t free_bits = at >= fb.hl ? 0xFF : 0;  // the payload is not part of the flow
            if (std::find(fb.per_packet.begin(), fb.per_packet.end(), at) != fb.per_packet.end()) free_bits = 0xFF;
            for (auto [p, bits] : fb.masked)
                if (p == at) free_bits = bits;
            for (int bit = 0; bit < 8; ++bit) {
                std::vector<uint8_t> b = a;
                b[at] ^= uint8_t(1u << bit);
                INFO("v6 " << v6 << " byte " << at << " bit " << bit);
                REQUIRE(icrc_flow_matches(f, b.data()) == bool(free_bits & (1u << bit)));
            }
        }
    }
}

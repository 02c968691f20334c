#include "packet/icrc.hpp"

#include <cstring>

#include "packet/bytes.hpp"
#include "packet/headers.hpp"

#include <immintrin.h>
#include <isa-l/crc.h>

// ISA-L exports its per-architecture CRC kernels beside the dispatching crc32_gzip_refl without
// declaring them. They are declared here weak, so that an ISA-L without one of them still links;
// that variant is then unavailable. The strong reference to crc32_gzip_refl keeps the library linked.
extern "C" {
uint32_t crc32_gzip_refl_by8(uint32_t, const unsigned char*, uint64_t) __attribute__((weak));
uint32_t crc32_gzip_refl_by16_10(uint32_t, const unsigned char*, uint64_t) __attribute__((weak));
}

namespace hcaemu::pkt {

const std::array<const char*, kCrcImplCount> kCrcImplName = {
    "bitwise", "slice8", "isal_dispatch", "isal_base", "isal_by8", "isal_by16_10"};

namespace {

constexpr uint32_t kPoly = 0xEDB88320u;  // IEEE 802.3 polynomial, reflected

uint32_t crc_bitwise(uint32_t crc, const uint8_t* p, size_t n) {
    crc = ~crc;
    for (size_t i = 0; i < n; ++i) {
        crc ^= p[i];
        for (int b = 0; b < 8; ++b) crc = (crc >> 1) ^ (kPoly & (0u - (crc & 1u)));
    }
    return ~crc;
}

constexpr std::array<std::array<uint32_t, 256>, 8> make_slice8() {
    std::array<std::array<uint32_t, 256>, 8> t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int b = 0; b < 8; ++b) c = (c >> 1) ^ (kPoly & (0u - (c & 1u)));
        t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
        for (size_t s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
    return t;
}
constexpr auto kSlice8 = make_slice8();

uint32_t crc_slice8(uint32_t crc, const uint8_t* p, size_t n) {
    crc = ~crc;
    while (n >= 8) {
        uint32_t lo;
        uint32_t hi;
        std::memcpy(&lo, p, 4);
        std::memcpy(&hi, p + 4, 4);
        lo ^= crc;
        crc = kSlice8[7][lo & 0xFF] ^ kSlice8[6][(lo >> 8) & 0xFF] ^ kSlice8[5][(lo >> 16) & 0xFF] ^
              kSlice8[4][lo >> 24] ^ kSlice8[3][hi & 0xFF] ^ kSlice8[2][(hi >> 8) & 0xFF] ^
              kSlice8[1][(hi >> 16) & 0xFF] ^ kSlice8[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ kSlice8[0][(crc ^ *p++) & 0xFF];
    return ~crc;
}

// ISA-L's AVX-512 kernel returns with the vector registers' upper halves in use (no vzeroupper),
// and every SSE instruction after it (this project is built for baseline x86-64: memcpy of
// headers, the parser) then pays the SSE/AVX transition: the ICRC of a 1 KiB packet took 144 ns,
// 36 ns with this. Only called where the CPU has AVX (the kernels that need it are picked so).
__attribute__((target("avx"))) inline void clear_upper() { __builtin_ia32_vzeroupper(); }
// Static initialisers may run before libgcc's CPU detection: __builtin_cpu_init() first (GCC's manual).
bool g_has_avx = (__builtin_cpu_init(), __builtin_cpu_supports("avx"));

uint32_t crc_isal_dispatch(uint32_t crc, const uint8_t* p, size_t n) {
    crc = crc32_gzip_refl(crc, p, n);  // may run the AVX-512 kernel
    if (g_has_avx) clear_upper();
    return crc;
}
uint32_t crc_isal_base(uint32_t crc, const uint8_t* p, size_t n) { return crc32_gzip_refl_base(crc, const_cast<uint8_t*>(p), n); }  // reads only
uint32_t crc_isal_by8(uint32_t crc, const uint8_t* p, size_t n) { return crc32_gzip_refl_by8(crc, p, n); }
uint32_t crc_isal_by16(uint32_t crc, const uint8_t* p, size_t n) {
    crc = crc32_gzip_refl_by16_10(crc, p, n);
    clear_upper();  // available() checked AVX-512
    return crc;
}

bool available(CrcImpl impl) {
    switch (impl) {
    case CrcImpl::bitwise:
    case CrcImpl::slice8: return true;
    case CrcImpl::isal_dispatch:
    case CrcImpl::isal_base: return true;
    case CrcImpl::isal_by8:
        return crc32_gzip_refl_by8 != nullptr && __builtin_cpu_supports("pclmul") &&
               __builtin_cpu_supports("sse4.1");
    case CrcImpl::isal_by16_10:
        // __builtin_cpu_supports checks that the OS saves the AVX-512 state too.
        return crc32_gzip_refl_by16_10 != nullptr && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("vpclmulqdq");
    case CrcImpl::count: break;
    }
    return false;
}

CrcImpl pick_fastest() {
    // The fastest kernel this CPU runs; ISA-L's own dispatcher where its kernels are not exported.
    __builtin_cpu_init();  // called from a static initialiser (g_impl)
    for (CrcImpl c : {CrcImpl::isal_by16_10, CrcImpl::isal_by8, CrcImpl::isal_dispatch})
        if (available(c)) return c;
    return CrcImpl::isal_dispatch;
}

CrcImpl g_impl = pick_fastest();
CrcFn g_fn = crc_impl_fn(g_impl);

// The fields the ICRC masks to ones (IBTA A17.3.3), in a copy of the headers from the IP header.
void mask_variant(uint8_t* ip, bool ipv6) {
    if (ipv6) {
        ip[0] |= 0x0F;                       // traffic class, high nibble
        ip[1] = ip[2] = ip[3] = 0xFF;        // traffic class low nibble, flow label
        ip[7] = 0xFF;                        // hop limit
    } else {
        ip[1] = 0xFF;                        // TOS
        ip[8] = 0xFF;                        // TTL
        ip[10] = ip[11] = 0xFF;              // header checksum
    }
    uint8_t* udp = ip + (ipv6 ? kIpv6Len : kIpv4Len);
    udp[6] = udp[7] = 0xFF;                  // UDP checksum
    udp[kUdpLen + 4] = 0xFF;                 // BTH byte 4: FECN, BECN, resv6
}

}  // namespace

bool crc_impl_available(CrcImpl impl) { return available(impl); }

CrcFn crc_impl_fn(CrcImpl impl) {
    if (!available(impl)) return nullptr;
    switch (impl) {
    case CrcImpl::bitwise: return crc_bitwise;
    case CrcImpl::slice8: return crc_slice8;
    case CrcImpl::isal_dispatch: return crc_isal_dispatch;
    case CrcImpl::isal_base: return crc_isal_base;
    case CrcImpl::isal_by8: return crc_isal_by8;
    case CrcImpl::isal_by16_10: return crc_isal_by16;
    case CrcImpl::count: break;
    }
    return nullptr;
}

CrcImpl crc_impl() { return g_impl; }

void set_crc_impl(CrcImpl impl) {
    if (CrcFn f = crc_impl_fn(impl)) {
        g_impl = impl;
        g_fn = f;
    }
}

uint32_t crc32(uint32_t crc, const uint8_t* data, size_t len) { return g_fn(crc, data, len); }

namespace {

// The fold constants of a reflected CRC32 by carry-less multiplication (Intel, "Fast CRC
// Computation for Generic Polynomials Using PCLMULQDQ"): x^n mod P, bit-reflected, shifted left once.
constexpr uint64_t fold_k(unsigned n) {
    uint64_t v = 1;
    for (unsigned i = 0; i < n; ++i) {
        v <<= 1;
        if (v >> 32) v ^= 0x104C11DB7ull;
    }
    uint64_t r = 0;
    for (unsigned b = 0; b < 32; ++b)
        if (v >> b & 1) r |= uint64_t(1) << (31 - b);
    return r << 1;
}
static_assert(fold_k(4 * 128 + 32) == 0x154442BD4 && fold_k(128 - 32) == 0xCCAA009E);

// The pairs that fold a 16-byte lane on by 128, 512 and 2048 bits (constexpr: fold_k's loop must
// not run per call).
struct FoldPair {
    int64_t lo, hi;
};
constexpr FoldPair fold_pair(unsigned bits) { return {int64_t(fold_k(bits + 32)), int64_t(fold_k(bits - 32))}; }
constexpr FoldPair kFold128 = fold_pair(128), kFold512 = fold_pair(512), kFold2048 = fold_pair(2048);
// A 256-byte window's lane at byte 16 * j folded on to its last lane's place (240 - 16 * j bytes;
// the last lane's own pair unused).
constexpr auto kWindow = [] {
    std::array<FoldPair, 16> k{};
    for (unsigned j = 0; j < 15; ++j) k[j] = fold_pair((240 - 16 * j) * 8);
    return k;
}();

// Copy and CRC in one pass: each 64-byte load is stored and folded into one of four registers of
// four 16-byte lanes (VPCLMULQDQ), 256 bytes on at a time, as ISA-L's by16_10 kernel folds; then
// into one lane, whose 16 bytes have the whole CRC from a zero register (the initial value is
// XORed into the first bytes). An SSE form (one lane per PCLMULQDQ) ran at a third of memcpy +
// ISA-L on this machine: not kept.
// (GCC puts a vzeroupper before its calls and its return: no SSE/AVX transition after it.)
#define HCAEMU_Z __attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.1")))
bool g_has_vpclmul = (__builtin_cpu_init(), __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                                               __builtin_cpu_supports("vpclmulqdq") &&
                                               __builtin_cpu_supports("pclmul"));

HCAEMU_Z inline __m128i fold(__m128i x, __m128i k, __m128i next) {
    return _mm_ternarylogic_epi64(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11), next,
                                  0x96);  // x ^ y ^ z
}

HCAEMU_Z inline __m128i move16(uint8_t* dst, const uint8_t* src) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), v);
    return v;
}

HCAEMU_Z inline __m512i fold_z(__m512i x, __m512i k, __m512i next) {
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00), _mm512_clmulepi64_epi128(x, k, 0x11), next,
                                     0x96);  // x ^ y ^ z
}

HCAEMU_Z inline __m512i move64(uint8_t* dst, const uint8_t* src) {
    const __m512i v = _mm512_loadu_si512(src);
    _mm512_storeu_si512(dst, v);
    return v;
}

HCAEMU_Z inline __m512i fold_k_z(FoldPair k) {
    return _mm512_set_epi64(k.hi, k.lo, k.hi, k.lo, k.hi, k.lo, k.hi, k.lo);
}

// The pairs of the window's register q (lanes 4q .. 4q + 3).
HCAEMU_Z inline __m512i window_k(unsigned q) {
    const FoldPair* k = &kWindow[4 * q];
    return _mm512_set_epi64(k[3].hi, k[3].lo, k[2].hi, k[2].lo, k[1].hi, k[1].lo, k[0].hi, k[0].lo);
}

// A 256-byte window (four registers) to the 16-byte lane at its end: every lane folded to that
// place at once and the results XORed, a chain of one multiply (not seven folds in a row).
HCAEMU_Z inline __m128i window_to_lane(__m512i x0, __m512i x1, __m512i x2, __m512i x3) {
    const __m512i zero = _mm512_setzero_si512();
    const __m512i last = _mm512_maskz_mov_epi64(0xC0, x3);  // the last lane stays as it is
    const __m512i k3 = _mm512_maskz_mov_epi64(0x3F, window_k(3));
    const __m512i s = _mm512_ternarylogic_epi64(fold_z(x0, window_k(0), last), fold_z(x1, window_k(1), zero),
                                                fold_z(x2, window_k(2), fold_z(x3, k3, zero)), 0x96);
    // (zero-masking extracts: GCC 12 warns that the plain ones' undefined source is uninitialised)
    const __m256i h =
        _mm256_xor_si256(_mm512_maskz_extracti64x4_epi64(0xF, s, 0), _mm512_maskz_extracti64x4_epi64(0xF, s, 1));
    return _mm_xor_si128(_mm256_maskz_extracti32x4_epi32(0xF, h, 0), _mm256_maskz_extracti32x4_epi32(0xF, h, 1));
}

// n >= 64.
HCAEMU_Z uint32_t crc_copy_vpclmul(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t n) {
    const __m512i k512 = fold_k_z(kFold512);
    const __m128i k128 = _mm_set_epi64x(kFold128.hi, kFold128.lo);
    __m512i x0 = _mm512_xor_si512(move64(dst, src), _mm512_zextsi128_si512(_mm_cvtsi32_si128(int(~crc))));
    size_t i = 64;
    __m128i x;
    if (n >= 256) {
        const __m512i k2048 = fold_k_z(kFold2048);
        __m512i x1 = move64(dst + 64, src + 64), x2 = move64(dst + 128, src + 128), x3 = move64(dst + 192, src + 192);
        for (i = 256; i + 256 <= n; i += 256) {
            x0 = fold_z(x0, k2048, move64(dst + i, src + i));
            x1 = fold_z(x1, k2048, move64(dst + i + 64, src + i + 64));
            x2 = fold_z(x2, k2048, move64(dst + i + 128, src + i + 128));
            x3 = fold_z(x3, k2048, move64(dst + i + 192, src + i + 192));
        }
        if (n - i < 64) {  // an MTU's payload ends here
            x = window_to_lane(x0, x1, x2, x3);
            goto lanes;
        }
        x0 = fold_z(fold_z(fold_z(x0, k512, x1), k512, x2), k512, x3);
    }
    for (; i + 64 <= n; i += 64) x0 = fold_z(x0, k512, move64(dst + i, src + i));
    // (zero-masking extracts: GCC 12 warns that the plain ones' undefined source is uninitialised)
    x = _mm512_maskz_extracti32x4_epi32(0xF, x0, 0);
    x = fold(x, k128, _mm512_maskz_extracti32x4_epi32(0xF, x0, 1));
    x = fold(x, k128, _mm512_maskz_extracti32x4_epi32(0xF, x0, 2));
    x = fold(x, k128, _mm512_maskz_extracti32x4_epi32(0xF, x0, 3));
lanes:
    for (; i + 16 <= n; i += 16) x = fold(x, k128, move16(dst + i, src + i));
    // The lane and the last n % 16 bytes: one call of the CRC kernel (its reduction to 32 bits;
    // a table walk here made bench_transport's 1 MiB WRITE slower: docs/benchmarks.md, 20th round).
    alignas(16) uint8_t rest[32];
    _mm_store_si128(reinterpret_cast<__m128i*>(rest), x);
    if (i < n) {  // (a payload of an MTU's length has none)
        std::memcpy(rest + 16, src + i, n - i);
        std::memcpy(dst + i, src + i, n - i);
    }
    return g_fn(0xFFFFFFFFu, rest, 16 + n - i);  // from a zero register: the lane holds the CRC state
}
#undef HCAEMU_Z

uint32_t crc_copy_separate(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t n) {
    std::memcpy(dst, src, n);
    return g_fn(crc, src, n);
}
uint32_t crc_copy_avx512(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t n) {
    return n >= 64 ? crc_copy_vpclmul(crc, dst, src, n) : crc_copy_separate(crc, dst, src, n);
}

CrcCopyImpl g_copy_impl = g_has_vpclmul ? CrcCopyImpl::vpclmul : CrcCopyImpl::separate;
CrcCopyFn g_copy_fn = crc_copy_impl_fn(g_copy_impl);

}  // namespace

const std::array<const char*, kCrcCopyImplCount> kCrcCopyImplName = {"separate", "vpclmul"};

CrcCopyFn crc_copy_impl_fn(CrcCopyImpl impl) {
    switch (impl) {
    case CrcCopyImpl::separate: return crc_copy_separate;
    case CrcCopyImpl::vpclmul: return g_has_vpclmul ? crc_copy_avx512 : nullptr;
    case CrcCopyImpl::count: break;
    }
    return nullptr;
}

CrcCopyImpl crc_copy_impl() { return g_copy_impl; }

void set_crc_copy_impl(CrcCopyImpl impl) {
    if (CrcCopyFn f = crc_copy_impl_fn(impl)) {
        g_copy_impl = impl;
        g_copy_fn = f;
    }
}

uint32_t crc32_copy(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t n) { return g_copy_fn(crc, dst, src, n); }

uint32_t icrc(const uint8_t* l3, size_t len, bool ipv6) {
    // Masked copy of the invariant-CRC prefix: 8 x 0xFF for the LRH, IP, UDP, BTH (IBTA Annex A17, RoCE v2).
    // A small packet (an ACK, an 8-byte message) is copied whole, for one call of the CRC kernel:
    // its fixed cost per call is most of its time at that size (56 bytes: 20 ns against 25 ns).
    constexpr size_t kWhole = 256;
    uint8_t buf[8 + kWhole];
    const size_t ip_len = ipv6 ? kIpv6Len : kIpv4Len;
    const size_t pre = ip_len + kUdpLen + kBthLen;
    const size_t take = len <= kWhole ? len : pre;
    std::memset(buf, 0xFF, 8);
    std::memcpy(buf + 8, l3, take);
    mask_variant(buf + 8, ipv6);
    const uint32_t c = g_fn(0, buf, 8 + take);
    return take == len ? c : g_fn(c, l3 + pre, len - pre);
}

// ---- the ICRC of a flow (icrc.hpp)

namespace {

// A flow's header: its length (IP + UDP + BTH), the per-packet bytes (offsets from the IP header)
// and which bits of the rest are compared (the ICRC's masked bits are not).
struct FlowLayout {
    size_t hl;
    size_t n;  // per-packet bytes
    std::array<uint8_t, 12> pos;
    std::array<uint8_t, kIcrcFlowMax> cmp;
};

constexpr FlowLayout make_layout(bool v6) {
    FlowLayout l{};
    const size_t ipl = v6 ? kIpv6Len : kIpv4Len;
    l.hl = ipl + kUdpLen + kBthLen;
    size_t k = 0;
    if (v6) {
        l.pos[k++] = 4;  // payload length
        l.pos[k++] = 5;
    } else {
        for (uint8_t p : {2, 3, 4, 5}) l.pos[k++] = p;  // total length, identification
    }
    const uint8_t u = uint8_t(ipl), b = uint8_t(ipl + kUdpLen);
    for (uint8_t p : {uint8_t(u + 4), uint8_t(u + 5),                          // UDP length
                      b, uint8_t(b + 1),                                      // opcode; SE, M, PadCnt, TVer
                      uint8_t(b + 8), uint8_t(b + 9), uint8_t(b + 10), uint8_t(b + 11)})  // AckReq; PSN
        l.pos[k++] = p;
    l.n = k;
    for (size_t i = 0; i < l.hl; ++i) l.cmp[i] = 0xFF;
    for (size_t i = 0; i < l.n; ++i) l.cmp[l.pos[i]] = 0;
    if (v6) {
        l.cmp[0] = 0xF0;  // version; the traffic class's high nibble is masked
        l.cmp[1] = l.cmp[2] = l.cmp[3] = l.cmp[7] = 0;
    } else {
        l.cmp[1] = l.cmp[8] = l.cmp[10] = l.cmp[11] = 0;
    }
    l.cmp[u + 6] = l.cmp[u + 7] = l.cmp[b + 4] = 0;
    return l;
}
constexpr FlowLayout kFlow[2] = {make_layout(false), make_layout(true)};

// tab[v6][i][x]: the CRC register after the masked header when its only non-zero byte is x at
// per-packet position i, from a zero register (so each is the byte's own share, CRC being linear).
struct FlowTables {
    std::array<std::array<std::array<uint32_t, 256>, 12>, 2> tab;
    FlowTables() {
        for (int v6 = 0; v6 < 2; ++v6) {
            const FlowLayout& l = kFlow[v6];
            for (size_t i = 0; i < l.n; ++i)
                for (uint32_t x = 0; x < 256; ++x) {
                    uint32_t r = kSlice8[0][x];
                    for (size_t z = l.pos[i] + 1; z < l.hl; ++z) r = (r >> 8) ^ kSlice8[0][r & 0xFF];
                    tab[size_t(v6)][i][x] = r;
                }
        }
    }
};
const FlowTables g_flow;
constexpr size_t kShortRest = 32;

// The packet's fixed header bits against the flow's: whole words at fixed offsets.
template <bool V6>
bool header_matches(const IcrcFlow& f, const uint8_t* l3) {
    constexpr const FlowLayout& l = kFlow[V6];
    const uint8_t* x = f.fixed.data();
    const uint8_t* c = l.cmp.data();
    uint64_t d = 0;
    size_t i = 0;
    for (; i + 8 <= l.hl; i += 8) {
        uint64_t a, m, w;
        std::memcpy(&a, l3 + i, 8);
        std::memcpy(&m, c + i, 8);
        std::memcpy(&w, x + i, 8);
        d |= (a & m) ^ w;
    }
    if (i < l.hl) {  // IPv6: 60 bytes
        uint32_t a, m, w;
        std::memcpy(&a, l3 + i, 4);
        std::memcpy(&m, c + i, 4);
        std::memcpy(&w, x + i, 4);
        d |= (a & m) ^ w;
    }
    return d == 0;
}

// The CRC register after the header: the flow's, plus each per-packet byte's share. The layout is
// a constant, so the loop unrolls into independent loads at fixed offsets.
template <bool V6>
uint32_t header_register(uint32_t state, const uint8_t* l3) {
    constexpr const FlowLayout& l = kFlow[V6];
    const auto& tab = g_flow.tab[V6];
#pragma GCC unroll 12
    for (size_t i = 0; i < l.n; ++i) state ^= tab[i][l3[l.pos[i]]];
    return state;
}

}  // namespace

void icrc_flow_init(IcrcFlow& f, const uint8_t* l3, bool ipv6) {
    const FlowLayout& l = kFlow[ipv6];
    f.ipv6 = ipv6;
    for (size_t i = 0; i < l.hl; ++i) f.fixed[i] = l3[i] & l.cmp[i];
    // The masked header as icrc() sees it, with the per-packet bytes zero.
    uint8_t m[8 + kIcrcFlowMax];
    std::memset(m, 0xFF, 8);
    for (size_t i = 0; i < l.hl; ++i) m[8 + i] = l3[i];
    uint8_t* ip = m + 8;
    mask_variant(ip, ipv6);
    for (size_t i = 0; i < l.n; ++i) ip[l.pos[i]] = 0;
    f.state = ~g_fn(0, m, 8 + l.hl);
    f.valid = true;
}

bool icrc_flow_matches(const IcrcFlow& f, const uint8_t* l3) {
    return f.ipv6 ? header_matches<true>(f, l3) : header_matches<false>(f, l3);
}

uint32_t icrc_flow(const IcrcFlow& f, const uint8_t* l3, size_t len) {
    const FlowLayout& l = kFlow[f.ipv6];
    const uint32_t r = f.ipv6 ? header_register<true>(f.state, l3) : header_register<false>(f.state, l3);
    const size_t rest = len - l.hl;
    // A short rest (an ACK's AETH, a small message) by table: the vector kernels' fixed cost per
    // call is several times these few bytes' (and their code and constants are often out of cache).
    return rest > kShortRest ? g_fn(~r, l3 + l.hl, rest) : crc_slice8(~r, l3 + l.hl, rest);
}

}  // namespace hcaemu::pkt

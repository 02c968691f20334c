#include "packet/icrc.hpp"

#include <cstring>

#include "packet/bytes.hpp"
#include "packet/headers.hpp"

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

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
    uint8_t* ip = buf + 8;
    if (ipv6) {
        ip[0] |= 0x0F;                       // traffic class, high nibble
        ip[1] = ip[2] = ip[3] = 0xFF;        // traffic class low nibble, flow label
        ip[7] = 0xFF;                        // hop limit
    } else {
        ip[1] = 0xFF;                        // TOS
        ip[8] = 0xFF;                        // TTL
        ip[10] = ip[11] = 0xFF;              // header checksum
    }
    uint8_t* udp = ip + ip_len;
    udp[6] = udp[7] = 0xFF;                  // UDP checksum
    udp[kUdpLen + 4] = 0xFF;                 // BTH byte 4: FECN, BECN, resv6
    const uint32_t c = g_fn(0, buf, 8 + take);
    return take == len ? c : g_fn(c, l3 + pre, len - pre);
}

}  // namespace hcaemu::pkt

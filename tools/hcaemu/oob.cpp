#include "tools/hcaemu/oob.hpp"

#include <bit>
#include <cstdio>
#include <cstring>

namespace hcaemu::tools::oob {

namespace {

int hexval(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// A strict field reader: exactly `width` hex digits at `pos`, then (if sep) a ':'.
struct Reader {
    std::span<const uint8_t> m;
    size_t pos = 0;
    OobError err = OobError::ok;

    uint64_t hex(size_t width, bool sep = true) {
        uint64_t v = 0;
        for (size_t i = 0; i < width; ++i) {
            const int d = hexval(m[pos + i]);
            if (d < 0) {
                if (err == OobError::ok) err = OobError::bad_hex;
                return 0;
            }
            v = v << 4 | uint64_t(d);
        }
        pos += width;
        if (sep) {
            if (m[pos] != ':' && err == OobError::ok) err = OobError::bad_separator;
            ++pos;
        }
        return v;
    }
};

}  // namespace

std::array<uint8_t, kPingpongLen> format(const PingpongDest& d) {
    std::array<uint8_t, kPingpongLen> out{};
    char gid[33];
    for (int i = 0; i < 16; ++i) std::snprintf(gid + 2 * i, 3, "%02x", d.gid[size_t(i)]);
    std::snprintf(reinterpret_cast<char*>(out.data()), out.size(), "%04x:%06x:%06x:%s", unsigned(d.lid),
                  unsigned(d.qpn & 0xFFFFFF), unsigned(d.psn & 0xFFFFFF), gid);
    return out;
}

OobError parse(std::span<const uint8_t> msg, PingpongDest& out) {
    if (msg.size() != kPingpongLen) return OobError::bad_length;
    if (msg.back() != 0) return OobError::no_terminator;
    Reader r{msg};
    PingpongDest d;
    d.lid = uint16_t(r.hex(4));
    d.qpn = uint32_t(r.hex(6));
    d.psn = uint32_t(r.hex(6));
    for (size_t i = 0; i < 16; ++i) d.gid[i] = uint8_t(r.hex(2, false));
    if (r.err != OobError::ok) return r.err;
    out = d;
    return OobError::ok;
}

std::array<uint8_t, kPerftestQpInfoLen> format(const PerftestQpInfo& q) {
    std::array<uint8_t, kPerftestQpInfoLen> out{};
    char* p = reinterpret_cast<char*>(out.data());
    int n = std::snprintf(p, out.size(), "%04x:%04x:%06x:%06x:%08x:%016llx:", unsigned(q.lid), unsigned(q.out_reads),
                          unsigned(q.qpn & 0xFFFFFF), unsigned(q.psn & 0xFFFFFF), unsigned(q.rkey),
                          static_cast<unsigned long long>(q.vaddr));
    for (size_t i = 0; i < 16; ++i) n += std::snprintf(p + n, out.size() - size_t(n), "%02x:", q.gid[i]);
    std::snprintf(p + n, out.size() - size_t(n), "%08x:", unsigned(q.srqn));
    return out;
}

OobError parse(std::span<const uint8_t> msg, PerftestQpInfo& out) {
    if (msg.size() != kPerftestQpInfoLen) return OobError::bad_length;
    if (msg.back() != 0) return OobError::no_terminator;
    Reader r{msg};
    PerftestQpInfo q;
    q.lid = uint16_t(r.hex(4));
    q.out_reads = uint16_t(r.hex(4));
    q.qpn = uint32_t(r.hex(6));
    q.psn = uint32_t(r.hex(6));
    q.rkey = uint32_t(r.hex(8));
    q.vaddr = r.hex(16);
    for (size_t i = 0; i < 16; ++i) q.gid[i] = uint8_t(r.hex(2));
    q.srqn = uint32_t(r.hex(8));
    if (r.err != OobError::ok) return r.err;
    out = q;
    return OobError::ok;
}

namespace {
void put_be(uint8_t* p, uint64_t v, size_t n) {
    for (size_t i = 0; i < n; ++i) p[i] = uint8_t(v >> (8 * (n - 1 - i)));
}
uint64_t get_be(const uint8_t* p, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v = v << 8 | p[i];
    return v;
}
}  // namespace

std::array<uint8_t, kPerftestCmDestLen> format_cm(const PerftestQpInfo& q) {
    std::array<uint8_t, kPerftestCmDestLen> out{};
    put_be(&out[0], q.lid, 4);
    put_be(&out[4], q.out_reads, 4);
    put_be(&out[8], q.qpn, 4);
    put_be(&out[12], q.psn, 4);
    put_be(&out[16], q.rkey, 4);
    put_be(&out[24], q.vaddr, 8);
    for (size_t i = 0; i < 16; ++i) out[32 + i] = q.gid[i];
    put_be(&out[48], q.srqn, 4);
    return out;  // gid_index (52..55): 0, nobody reads it
}

OobError parse_cm(std::span<const uint8_t> msg, PerftestQpInfo& out) {
    if (msg.size() != kPerftestCmDestLen) return OobError::bad_length;
    const uint8_t* p = msg.data();
    const uint64_t lid = get_be(p, 4), reads = get_be(p + 4, 4), qpn = get_be(p + 8, 4), psn = get_be(p + 12, 4);
    if (lid > 0xFFFF || reads > 0xFFFF || qpn > 0xFFFFFF || psn > 0xFFFFFF) return OobError::bad_value;
    PerftestQpInfo q;
    q.lid = uint16_t(lid);
    q.out_reads = uint16_t(reads);
    q.qpn = uint32_t(qpn);
    q.psn = uint32_t(psn);
    q.rkey = uint32_t(get_be(p + 16, 4));
    q.vaddr = get_be(p + 24, 8);
    for (size_t i = 0; i < 16; ++i) q.gid[i] = p[32 + i];
    q.srqn = uint32_t(get_be(p + 48, 4));
    out = q;
    return OobError::ok;
}

std::array<uint8_t, kPerftestVersionLen> format_version(const char* v) {
    std::array<uint8_t, kPerftestVersionLen> out{};
    for (size_t i = 0; i + 1 < out.size() && v[i]; ++i) out[i] = uint8_t(v[i]);
    return out;
}

OobError parse_version(std::span<const uint8_t> msg, char (&out)[kPerftestVersionLen]) {
    if (msg.size() != kPerftestVersionLen) return OobError::bad_length;
    if (msg.back() != 0) return OobError::no_terminator;
    size_t n = 0;
    while (n < msg.size() && msg[n] != 0) {
        if (!((msg[n] >= '0' && msg[n] <= '9') || msg[n] == '.')) return OobError::bad_value;
        ++n;
    }
    if (n == 0) return OobError::bad_value;
    for (size_t i = n; i < msg.size(); ++i)
        if (msg[i] != 0) return OobError::bad_value;  // text after the terminator
    std::memcpy(out, msg.data(), msg.size());
    return OobError::ok;
}

std::array<uint8_t, kPerftestSysLen> format_sys(uint32_t v) {
    return {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
}

OobError parse_sys(std::span<const uint8_t> msg, uint32_t& out) {
    if (msg.size() != kPerftestSysLen) return OobError::bad_length;
    const uint32_t v = uint32_t(msg[0]) << 24 | uint32_t(msg[1]) << 16 | uint32_t(msg[2]) << 8 | msg[3];
    if (v == 0 || v > (1u << 30)) return OobError::bad_value;
    out = v;
    return OobError::ok;
}

std::array<uint8_t, kPerftestMtuLen> format_mtu(uint8_t ibv_mtu) { return {uint8_t('0' + ibv_mtu % 10), 0}; }

OobError parse_mtu(std::span<const uint8_t> msg, uint8_t& ibv_mtu) {
    if (msg.size() != kPerftestMtuLen) return OobError::bad_length;
    if (msg[1] != 0) return OobError::no_terminator;
    if (msg[0] < '1' || msg[0] > '5') return OobError::bad_value;  // IBV_MTU_256 .. IBV_MTU_4096
    ibv_mtu = uint8_t(msg[0] - '0');
    return OobError::ok;
}

std::array<uint8_t, kPerftestResultLen> format_u64(uint64_t v) {
    std::array<uint8_t, kPerftestResultLen> out{};
    for (size_t i = 0; i < 8; ++i) out[i] = uint8_t(v >> (56 - 8 * i));
    return out;
}

std::array<uint8_t, kPerftestResultLen> format_double(double v) { return format_u64(std::bit_cast<uint64_t>(v)); }

OobError parse_u64(std::span<const uint8_t> msg, uint64_t& out) {
    if (msg.size() != kPerftestResultLen) return OobError::bad_length;
    uint64_t v = 0;
    for (size_t i = 0; i < 8; ++i) v = v << 8 | msg[i];
    out = v;
    return OobError::ok;
}

OobError parse_double(std::span<const uint8_t> msg, double& out) {
    uint64_t v = 0;
    const OobError e = parse_u64(msg, v);
    if (e == OobError::ok) out = std::bit_cast<double>(v);
    return e;
}

std::array<uint8_t, kPerftestDoneLen> format_done() { return {'d', 'o', 'n', 'e', 0}; }

OobError parse_done(std::span<const uint8_t> msg) {
    if (msg.size() != kPerftestDoneLen) return OobError::bad_length;
    if (msg.back() != 0) return OobError::no_terminator;
    return std::memcmp(msg.data(), "done", 4) == 0 ? OobError::ok : OobError::bad_value;
}

}  // namespace hcaemu::tools::oob

#include "tools/oob.hpp"

#include <cstdio>

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

}  // namespace hcaemu::tools::oob

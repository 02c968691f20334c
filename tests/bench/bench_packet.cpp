// Packet-layer throughput, each figure beside a bound measured in the same run: memcpy of the same
// number of bytes. Machines are shared and noisy; the ratios are what to compare across runs.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "packet/build.hpp"
#include "packet/icrc.hpp"
#include "packet/parse.hpp"

using namespace hcaemu::pkt;
using Clock = std::chrono::steady_clock;

namespace {

volatile uint32_t g_sink;

// Runs `fn` in batches until `min_s` seconds pass; returns calls per second.
template <class F>
double rate(F&& fn, double min_s = 0.25) {
    uint64_t n = 0;
    const auto t0 = Clock::now();
    double el = 0;
    do {
        for (int i = 0; i < 256; ++i) fn();
        n += 256;
        el = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (el < min_s);
    return double(n) / el;
}

Headers headers() {
    Headers h;
    h.eth.ethertype = kEthTypeIpv4;
    h.ip4.src = 0xC6120001;
    h.ip4.dst = 0xC6120002;
    h.bth.opcode = op::write_only;
    h.bth.dest_qp = 0x11;
    h.reth = {0x7f0000001000, 0x1234, 0};
    return h;
}

}  // namespace

int main() {
    std::printf("hcaemu packet benchmark (CRC variant in use: %s)\n\n", kCrcImplName[size_t(crc_impl())]);
    std::printf("%-34s %10s %12s %10s %9s\n", "operation", "payload", "Mpps", "GB/s", "x memcpy");
    for (uint32_t payload : {8u, 64u, 1024u, 4096u}) {
        Headers h = headers();
        h.reth.dma_len = payload;
        std::vector<uint8_t> pl(payload, 0xA5), frame(payload + 128), dst(payload + 128);
        size_t len = 0;
        if (build(h, pl, frame, len) != BuildError::ok) return 1;
        const double bytes = double(len);

        const double mc = rate([&] {
            std::memcpy(dst.data(), frame.data(), len);
            asm volatile("" ::"r"(dst.data()) : "memory");
        });
        const double mc_gbs = mc * bytes / 1e9;
        std::printf("%-34s %10u %12.2f %10.2f %9s\n", "memcpy of the frame (bound)", payload, mc / 1e6, mc_gbs, "1.00");

        auto row = [&](const char* what, double r) {
            const double gbs = r * bytes / 1e9;
            std::printf("%-34s %10u %12.2f %10.2f %9.3f\n", what, payload, r / 1e6, gbs, gbs / mc_gbs);
        };
        Packet p;
        row("parse + verify (ICRC, IPv4 csum)", rate([&] { g_sink = uint32_t(parse({frame.data(), len}, p)); }));
        ParseOptions no_icrc;
        no_icrc.verify_icrc = false;
        row("parse without ICRC", rate([&] { g_sink = uint32_t(parse({frame.data(), len}, p, no_icrc)); }));
        row("build + ICRC (payload copied)", rate([&] {
                size_t l = 0;
                g_sink = uint32_t(build(h, pl, dst, l));
            }));
        row("build headers + ICRC (zero copy)", rate([&] {
                size_t hl = 0;
                build_headers(h, payload, dst, hl);
                g_sink = uint32_t(build_finish(dst, hl, payload, false));
            }));
        FrameTemplate tmpl;
        if (!make_template(h, tmpl)) return 1;
        row("QP template + flow ICRC (zero copy)", rate([&] {  // what the transport does per packet
                size_t hl = 0;
                build_headers_tmpl(tmpl, h, payload, dst, hl);
                g_sink = uint32_t(build_finish(dst, hl, payload, false, {}, &tmpl.icrc));
            }));
        const CrcImpl saved = crc_impl();
        for (size_t c = 0; c < kCrcImplCount; ++c) {
            if (!crc_impl_available(CrcImpl(c))) continue;
            if (CrcImpl(c) == CrcImpl::bitwise && payload > 64) continue;  // far too slow to matter
            set_crc_impl(CrcImpl(c));
            char name[64];
            std::snprintf(name, sizeof name, "ICRC, %s", kCrcImplName[c]);
            row(name, rate([&] { g_sink = icrc(frame.data() + kEthLen, len - kEthLen - kIcrcLen, false); }));
        }
        set_crc_impl(saved);
        // The transport's gather with the ICRC (a payload of 256 bytes or more), each way
        // crc32_copy can run, on bytes in cache: to an aligned buffer, and to one 54 bytes in
        // (where a payload lands after Ethernet, IPv4, UDP and BTH).
        for (size_t c = 0; c < kCrcCopyImplCount; ++c) {
            const CrcCopyFn fn = crc_copy_impl_fn(CrcCopyImpl(c));
            if (!fn) continue;
            char name[64];
            std::snprintf(name, sizeof name, "copy + CRC32, %s", kCrcCopyImplName[c]);
            row(name, rate([&] { g_sink = fn(0, dst.data(), frame.data(), len); }));
            std::snprintf(name, sizeof name, "copy + CRC32, %s, to +54", kCrcCopyImplName[c]);
            row(name, rate([&] { g_sink = fn(0, dst.data() + 54, frame.data(), len - 54); }));
        }
        IcrcFlow flow;
        icrc_flow_init(flow, frame.data() + kEthLen, false);
        row("ICRC of a flow (match, header once)", rate([&] {
                const uint8_t* l3 = frame.data() + kEthLen;
                g_sink = icrc_flow_matches(flow, l3) ? icrc_flow(flow, l3, len - kEthLen - kIcrcLen) : 0;
            }));
        std::printf("\n");
    }
    std::printf("Mpps and GB/s are per core and per frame (Ethernet header to ICRC); 'x memcpy' is the\n"
                "GB/s ratio to copying the same frame once in this run.\n");
    return 0;
}

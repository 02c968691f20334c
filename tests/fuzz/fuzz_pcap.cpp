// libFuzzer target: the pcap reader (dpdk_port/pcap_file.*) on an arbitrary file, and what
// `hcaemu dissect` and `hcaemu conform` do with each frame it yields (parse, dissect, summary;
// the conformance monitor and its messages).
// Invariants: no crash or sanitizer report; a reader that failed to open says why; a frame is
// never longer than the file holds; orig_len >= caplen is not required (the file says so), but
// the data span must be readable (ASan checks every byte parse and dissect touch).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "dpdk_port/conform.hpp"
#include "dpdk_port/pcap_file.hpp"
#include "packet/dissect.hpp"
#include "packet/parse.hpp"

using namespace hcaemu;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // The reader takes a path: the input goes into a memfd, named by /proc/self/fd.
    static const int fd = memfd_create("fuzz_pcap", MFD_CLOEXEC);
    static const std::string path = "/proc/self/fd/" + std::to_string(fd);
    if (fd < 0 || ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != ssize_t(size)) abort();

    port::PcapReader r(path);
    if (!r.ok()) {
        if (r.error().empty()) abort();  // a failure always says why
        return 0;
    }
    static std::string out;
    static port::ConformMonitor mon;
    mon.reset();
    // Every violation's messages in both languages (the placeholders of each rule's text).
    mon.set_sink([](void*, const port::Violation& v) {
        for (pkt::Lang l : {pkt::Lang::en, pkt::Lang::zh})
            if (port::describe(v, l).empty() || port::to_json(v, l).empty()) abort();
    }, nullptr);
    pkt::DissectSummary sum;
    port::PcapFrame f;
    uint64_t idx = 0;
    while (r.next(f) && idx < 1000) {
        ++idx;
        if (f.data.size() > size) abort();
        out.clear();
        pkt::Packet p;
        const pkt::ParseError e = pkt::parse(f.data, p);
        sum.add(p, e);
        pkt::DissectOptions o;
        o.format = idx & 1 ? pkt::DissectFormat::brief : pkt::DissectFormat::full;
        pkt::dissect(out, p, e, f.data.size(), idx, double(f.ts_ns) * 1e-9, o);
        mon.frame(f.data, f.ts_ns, idx);
    }
    const port::ConformStats st = mon.stats();
    if (st.frames != idx || st.violations > st.frames * port::kConfRuleCount) abort();
    out.clear();
    sum.print(out, pkt::DissectFormat::brief);
    return 0;
}

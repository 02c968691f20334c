// The memory bound of many QPs' payload (perf_qps.py): what this machine's caches and memory do
// to the copies an HCA makes, when each QP has a buffer of its own (as perftest gives them).
// A sender gathers each message from its QP's buffer into packets (MTU pieces into a frame
// that is reused: the frame stays in L1); a receiver scatters packets into its QP's buffer.
// Both are timed with the buffers cycled round-robin: one buffer (one QP) against BLOCKS
// buffers (many QPs), in the same run; the ratio is the machine's own for that working set.
//
// Usage: bench_mem [SIZE [BLOCKS [MTU]]] (defaults 65536 1024 1024)
#include <sys/mman.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Result {
    double gather_gbs = 0, scatter_gbs = 0;
};

uint8_t* map(size_t bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        std::perror("bench_mem: mmap");
        std::exit(1);
    }
    std::memset(p, 1, bytes);  // touched before the clock: no page faults in the timed loops
    return static_cast<uint8_t*>(p);
}

// Copies `size`-byte messages in `mtu` pieces between the frame and buffer (i % blocks), for at
// least 0.3 s and `min_bytes`; GB/s of payload.
template <bool Gather>
double run(uint8_t* region, size_t size, size_t blocks, size_t mtu, uint8_t* frame, size_t min_bytes) {
    size_t done = 0, i = 0;
    const auto t0 = Clock::now();
    double s = 0;
    do {
        uint8_t* buf = region + (i++ % blocks) * size;
        for (size_t off = 0; off < size; off += mtu) {
            const size_t n = off + mtu <= size ? mtu : size - off;
            if (Gather) std::memcpy(frame, buf + off, n);
            else std::memcpy(buf + off, frame, n);
            asm volatile("" ::"r"(frame), "r"(buf) : "memory");
        }
        done += size;
        if ((i & 63) == 0) s = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (s < 0.3 || done < min_bytes);
    return double(done) / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9;
}

Result measure(uint8_t* region, size_t size, size_t blocks, size_t mtu, uint8_t* frame) {
    const size_t min_bytes = 2 * size * blocks;  // every buffer at least twice
    // One untimed pass first: the working set as a run in progress leaves it.
    run<true>(region, size, blocks, mtu, frame, size * blocks);
    Result r;
    r.gather_gbs = run<true>(region, size, blocks, mtu, frame, min_bytes);
    r.scatter_gbs = run<false>(region, size, blocks, mtu, frame, min_bytes);
    return r;
}

}  // namespace

int main(int argc, char** argv) {
    const size_t size = argc > 1 ? std::strtoul(argv[1], nullptr, 0) : 65536;
    const size_t blocks = argc > 2 ? std::strtoul(argv[2], nullptr, 0) : 1024;
    const size_t mtu = argc > 3 ? std::strtoul(argv[3], nullptr, 0) : 1024;
    if (size == 0 || blocks == 0 || mtu == 0 || blocks > (size_t(1) << 36) / size) {  // no overflow: a quotient
        std::fprintf(stderr, "usage: bench_mem [SIZE [BLOCKS [MTU]]]: positive, SIZE x BLOCKS at most 64 GiB\n");
        return 2;
    }
    uint8_t* region = map(size * blocks);
    std::vector<uint8_t> frame(mtu + 64);
    const Result one = measure(region, size, 1, mtu, frame.data());
    const Result many = measure(region, size, blocks, mtu, frame.data());
    std::printf("hcaemu memory bound: %zu B messages in %zu B pieces, 1 buffer against %zu (%.1f MiB)\n",
                size, mtu, blocks, double(size * blocks) / 1048576);
    std::printf("%-8s %12s %12s %8s\n", "copy", "1 buffer", "many", "ratio");
    std::printf("%-8s %12.3f %12.3f %8.2f\n", "gather", one.gather_gbs, many.gather_gbs, many.gather_gbs / one.gather_gbs);
    std::printf("%-8s %12.3f %12.3f %8.2f\n", "scatter", one.scatter_gbs, many.scatter_gbs, many.scatter_gbs / one.scatter_gbs);
    munmap(region, size * blocks);
    return 0;
}

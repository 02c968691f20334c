#include "dpdk_port/prefault.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <fstream>
#include <string>

namespace hcaemu::port {

uint64_t prefault(void* p, size_t n) {
    if (n == 0) return 0;
    const uintptr_t pg = uintptr_t(getpagesize());
    const uintptr_t a = uintptr_t(p) & ~(pg - 1), e = (uintptr_t(p) + n + pg - 1) & ~(pg - 1);
    if (madvise(reinterpret_cast<void*>(a), e - a, MADV_POPULATE_WRITE) != 0) return 0;
    for (uintptr_t x = a; x < e; x += pg)
        std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(x)).fetch_or(0, std::memory_order_relaxed);
    return e - a;
}

uint64_t prefault_data(int fd, uint64_t off, void* p, size_t n) {
    const int own = open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDONLY | O_CLOEXEC);
    if (own < 0) return 0;
    uint64_t done = 0;
    const uint64_t end = off + n;
    for (uint64_t at = off; at < end;) {  // each extent of data
        const off_t d = lseek(own, off_t(at), SEEK_DATA);
        if (d < 0 || uint64_t(d) >= end) break;  // ENXIO: no data after `at`
        const off_t h = lseek(own, d, SEEK_HOLE);
        const uint64_t e = h < 0 ? end : std::min<uint64_t>(uint64_t(h), end);
        if (e <= uint64_t(d)) break;  // the owner punched a hole there meanwhile: no progress to make
        done += prefault(static_cast<uint8_t*>(p) + (uint64_t(d) - off), e - uint64_t(d));
        at = e;
    }
    close(own);
    return done;
}

std::vector<Mapped> find_mappings(std::string_view name) {
    std::ifstream maps("/proc/self/maps");
    std::vector<Mapped> out;
    for (std::string line; std::getline(maps, line);) {
        if (line.find(name) == std::string::npos) continue;
        // "start-end perms offset dev inode name", addresses in hex
        uintptr_t a = 0, e = 0;
        const char* end = line.data() + line.size();
        auto r = std::from_chars(line.data(), end, a, 16);
        if (r.ec != std::errc() || r.ptr == end || *r.ptr != '-') continue;
        r = std::from_chars(r.ptr + 1, end, e, 16);
        if (r.ec != std::errc() || e <= a) continue;
        out.push_back({reinterpret_cast<void*>(a), size_t(e - a)});
    }
    return out;
}

}  // namespace hcaemu::port

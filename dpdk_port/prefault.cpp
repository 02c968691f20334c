#include "dpdk_port/prefault.hpp"

#include <sys/mman.h>
#include <unistd.h>

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

// Makes a program's own memory reachable by hcaemud's DMA engine, in place: the pages of a range
// to register are replaced, at the same addresses and with the same protections, by a MAP_SHARED
// mapping of a memfd holding the same bytes, which the daemon maps too (docs/memory.md).
//
// One sparse memfd per process (and one per huge page size) backs every replaced page at the file
// offset equal to its virtual address, so any range of replaced pages is one contiguous (fd,
// offset) whatever mappings it spans, and overlapping registrations share pages. Replaced pages
// are MADV_DONTFORK (as libibverbs after ibv_fork_init: a child does not get them). When no
// registration covers a page any more, it goes back to private anonymous memory with its bytes and
// its memfd page is freed (fallocate PUNCH_HOLE).
//
// Rule (the difference from a real HCA, which pins pages without copying): no thread may write
// the pages of a range (including neighbours in the same pages) while share() or unshare() of it
// runs; such a write may be lost. The calling thread's own stack is handled (the copy runs in a
// CLONE_VM|CLONE_VFORK child while the caller waits in the kernel).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "hca_model/status.hpp"

namespace hcaemu::api::remap {

struct Share {
    int fd = -1;            // the caller's own descriptor: close it after sending
    uint64_t offset = 0;    // where the first byte asked for is in fd
    bool remapped = false;  // pages are counted: unshare() when the registration is gone
    uint64_t lo = 0, hi = 0;  // the page-rounded range counted (remapped only)
    size_t page = 0;          // its page size (4096, or the huge page size)
};

// For [addr, addr + len): `writable` when the registration allows any write (local or remote).
// Anonymous and MAP_PRIVATE (file) memory, heap, stack, MAP_HUGETLB: replaced as above. A
// MAP_SHARED mapping of a memfd sealed with F_SEAL_SHRINK: that file's fd and offset, untouched.
// Refused with a reason in `err`: unmapped or unreadable pages, write access to read-only pages
// (invalid_argument); any other MAP_SHARED mapping (a file that may shrink would fault the
// daemon), a range mixing a MAP_SHARED mapping with other memory or page sizes, no huge pages
// left for the copy (not_supported / no_resources).
Status share(const void* addr, size_t len, bool writable, Share& out, std::string& err);
// Whether [addr, addr + len) is mapped, readable, and writable when `writable` (bad_address and
// err naming the first gap otherwise), as the kernel pins pages at registration (ib_umem_get).
Status check_mapped(const void* addr, size_t len, bool writable, std::string& err);
// Why the last share() on this thread failed ("" after a success).
const std::string& last_error();
// The registration `s` is gone (the daemon unmapped it).
void unshare(const Share& s);

// What this process did so far (tests, benchmarks).
struct Counters {
    uint64_t shares = 0, pages_replaced = 0, bytes_copied = 0, pages_reverted = 0, bytes_punched = 0;
};
Counters counters();

}  // namespace hcaemu::api::remap

// Memory the data path will touch, mapped before its first packet. A buffer's first touch costs a
// page fault in the kernel, and in a virtual machine also a miss in the hypervisor's shadow or
// nested page tables (microseconds each): thousands of them on the first frames of a run, which
// turn a short benchmark or the first requests of a latency test into a measure of the page tables.
// A NIC driver's buffers are pinned at setup; these calls do the same for the port's pool and for
// memory shared with a peer (net_memif's regions).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace hcaemu::port {

// Maps every page of [p, p + n) writable now, contents untouched: the kernel's page tables in one
// call (MADV_POPULATE_WRITE, Linux 5.14), then one write access per page for the tables below
// them. The write is an atomic OR of zero, so a peer may be writing the memory at the same time.
// Returns the bytes populated (whole pages), or 0 where the kernel refuses (a read-only mapping,
// an older kernel): then nothing is touched.
uint64_t prefault(void* p, size_t n);

// prefault() of the parts of a shared mapping of fd that hold data: [p, p + n) maps fd's bytes
// from `off` (page-aligned) on, and only its data extents (lseek SEEK_DATA/SEEK_HOLE) are faulted
// in. For memory another process owns (a client's memfd): no page it never had is allocated here,
// and the cost follows its data, not the mapping's size (a sparse file may map terabytes). fd is
// read through a description of its own (/proc/self/fd), so no shared file offset moves.
// Returns the bytes populated; 0 where the file cannot be reopened. (A file system without holes,
// hugetlbfs, reports all of it as data.)
uint64_t prefault_data(int fd, uint64_t off, void* p, size_t n);

// The mappings of this process whose /proc/self/maps name contains `name` (e.g.
// "/memfd:memif_region_"), for prefault(): read first, so that a caller can touch them under a
// fault guard when another thread may unmap them.
struct Mapped {
    void* p;
    size_t n;
};
std::vector<Mapped> find_mappings(std::string_view name);

}  // namespace hcaemu::port

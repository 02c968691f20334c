// Blocking system calls of the libraries (an event channel's read) made again when the kernel
// returns one of its internal restart codes. ERESTARTSYS (512) .. ERESTART_RESTARTBLOCK (516) are
// never meant to reach a program (the kernel restarts the call or turns them into EINTR), but this
// project's CI kernel leaks them: rdma_get_cm_event's read of its eventfd failed with errno 512
// while a perftest waited for an event, and the program gave up. EINTR stays the caller's, as for
// the kernel files libibverbs and librdmacm read.
#pragma once
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

namespace hcaemu::api {

inline bool leaked_restart(int e) { return e >= 512 && e <= 516; }

// A call to make again where the code already made it again after a signal.
inline bool interrupted(int e) { return e == EINTR || leaked_restart(e); }

// How many calls were made again, for the libraries' debug lines.
inline std::atomic<uint64_t> g_restart_leaks{0};

// read(2) of one 8-byte count from an eventfd.
inline ssize_t read_count(int fd, uint64_t& v) {
    for (;;) {
        const ssize_t r = ::read(fd, &v, sizeof v);
        if (r >= 0 || !leaked_restart(errno)) return r;
        g_restart_leaks.fetch_add(1, std::memory_order_relaxed);
    }
}

}  // namespace hcaemu::api

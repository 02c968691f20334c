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

// An event file another thread may destroy while this one reads it (rping's main thread destroys
// the channel its CM thread waits on). A reader is counted from the call to its return, so the
// owner never closes the fd or frees the object under it: destroyed with readers inside, the
// object is only marked dead, and its fd stays open (a read again after a leaked restart code
// never gets EBADF, nor another file opened on the same number). The owner's lock guards both
// fields; zero is the initial state (the libraries' wrappers are calloc'd).
struct ReaderGate {
    unsigned readers;
    bool dead;
    // At destroy, under the owner's lock: true when the owner may close the fd and free now.
    bool may_free() {
        if (readers) dead = true;
        return !readers;
    }
};

// One count read from `fd`, the owner's lock `lk` held on entry and on return and released around
// the blocking read. Destroyed meanwhile, the call never returns: a read of the kernel's file stays
// blocked on the closed file (close does not wake it), and so does this one, until the process ends.
template <class Lock>
ssize_t gated_read(Lock& lk, ReaderGate& gate, int fd, uint64_t& v) {
    ++gate.readers;
    lk.unlock();
    const ssize_t r = read_count(fd, v);
    lk.lock();
    if (gate.dead) {  // still counted: the object stays
        lk.unlock();
        for (;;) ::pause();
    }
    --gate.readers;
    return r;
}

}  // namespace hcaemu::api

// A fault guard for calls into code whose memory another thread may unmap at any moment: net_memif's
// data path, whose interrupt thread unmaps the peer's regions on disconnect while a burst may be
// inside the PMD (README, "DPDK vdevs"). A SIGSEGV or SIGBUS inside guarded() on the calling thread
// jumps back out of it; every other one goes to the handler that was there before (ASan's, or the
// default action).
//
// Sound only for code that holds no lock and whose state is rebuilt before it runs again (memif's
// queues are re-initialised at reconnect): what the code was doing is abandoned, e.g. mbufs it had
// taken from the pool stay taken.
#pragma once
#include <atomic>
#include <csetjmp>
#include <cstdint>

namespace hcaemu::port {

namespace fault_guard_detail {
extern thread_local sigjmp_buf* t_env;  // set only while guarded() runs fn on this thread
}

// Installs the SIGSEGV/SIGBUS handler, once per process (later calls return the first result).
bool install_fault_guard();

// Runs fn() and stores its result in `out`: true; or false when a SIGSEGV/SIGBUS interrupted it.
// Needs install_fault_guard(). Cost: one sigsetjmp without the signal mask (no system call).
template <class Fn, class T>
bool guarded(Fn&& fn, T& out) {
    sigjmp_buf env;
    if (sigsetjmp(env, 0) != 0) {  // 0: the handler runs with SA_NODEFER, the mask needs no restore
        fault_guard_detail::t_env = nullptr;
        std::atomic_signal_fence(std::memory_order_seq_cst);
        return false;
    }
    fault_guard_detail::t_env = &env;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    out = fn();
    std::atomic_signal_fence(std::memory_order_seq_cst);
    fault_guard_detail::t_env = nullptr;
    return true;
}

}  // namespace hcaemu::port

#include "dpdk_port/fault_guard.hpp"

#include <csignal>
#include <mutex>

namespace hcaemu::port {

namespace fault_guard_detail {
thread_local sigjmp_buf* t_env = nullptr;
}

namespace {

struct sigaction g_prev_segv {};
struct sigaction g_prev_bus {};

void on_fault(int sig, siginfo_t* si, void* uc) {
    if (sigjmp_buf* env = fault_guard_detail::t_env) {
        fault_guard_detail::t_env = nullptr;
        siglongjmp(*env, 1);
    }
    // Not ours: the previous handler, or the default action (the faulting instruction runs again).
    const struct sigaction& prev = sig == SIGBUS ? g_prev_bus : g_prev_segv;
    if (prev.sa_flags & SA_SIGINFO) {
        prev.sa_sigaction(sig, si, uc);
        return;
    }
    if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
        prev.sa_handler(sig);
        return;
    }
    signal(sig, SIG_DFL);  // an ignored fault would fault again forever: the default action instead
}

}  // namespace

bool install_fault_guard() {
    static std::once_flag once;
    static bool ok = false;
    std::call_once(once, [] {
        struct sigaction sa {};
        sa.sa_sigaction = on_fault;
        sigemptyset(&sa.sa_mask);
        // SA_NODEFER: siglongjmp leaves the handler without restoring a mask, so none is added.
        sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
        ok = sigaction(SIGSEGV, &sa, &g_prev_segv) == 0 && sigaction(SIGBUS, &sa, &g_prev_bus) == 0;
    });
    return ok;
}

}  // namespace hcaemu::port

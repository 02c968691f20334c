#include "tools/hcaemu/stop.hpp"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>

namespace hcaemu::tools {

namespace {

// Only a lock-free atomic (or volatile sig_atomic_t) may be touched from a handler (C++20
// [support.signal]).
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_stop_signal(int sig) {
    int none = 0;
    if (g_signal.compare_exchange_strong(none, sig)) return;
    // A second signal while the first one's stop runs: out at once (write(2) and _exit(2) are
    // async-signal-safe; stdio is not).
    static const char kMsg[] = "hcaemu: second signal: exiting now, without the clean stop\n";
    const ssize_t w = ::write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
    (void)w;
    _exit(128 + sig);
}

}  // namespace

void install_stop_handlers() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
}

bool stop_requested() { return g_signal.load(std::memory_order_relaxed) != 0; }

int stop_signal() { return g_signal.load(std::memory_order_relaxed); }

int report_stop(const char* sub) {
    const int sig = stop_signal();
    std::fprintf(stderr, "hcaemu %s: interrupted by %s\n", sub, sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal");
    return 128 + sig;
}

}  // namespace hcaemu::tools

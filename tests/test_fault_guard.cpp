// The fault guard for memif bursts (dpdk_port/fault_guard.hpp). Each case runs in a forked child,
// so that the child's handlers are its own and a fault that must kill kills only the child.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <thread>

#include "catch2/catch.hpp"
#include "dpdk_port/fault_guard.hpp"

using namespace hcaemu::port;

namespace {

// Runs fn in a child process; returns its wait status.
template <class Fn>
int in_child(Fn&& fn) {
    const pid_t pid = fork();
    if (pid == 0) {
        fn();
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

uint8_t* no_access_page() {
    void* p = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

uint16_t read_byte(const uint8_t* p) { return *static_cast<const volatile uint8_t*>(p); }

// A page of a file with no bytes: reading it raises SIGBUS (mmap(2)).
uint8_t* sigbus_page() {
    FILE* f = tmpfile();
    if (!f) return nullptr;
    void* p = mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fileno(f), 0);
    return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

}  // namespace

TEST_CASE("a SIGSEGV or SIGBUS inside guarded() returns false, repeatedly; normal calls return their value") {
    const int st = in_child([] {
        if (!install_fault_guard()) _exit(10);
        uint8_t* bad = no_access_page();
        uint8_t* bus = sigbus_page();
        if (!bad || !bus) _exit(11);
        uint8_t good[1] = {7};
        for (int i = 0; i < 3; ++i) {  // SA_NODEFER: the second fault is caught like the first
            uint16_t out = 99;
            if (guarded([&] { return read_byte(bad); }, out)) _exit(12);
            if (out != 99) _exit(13);
            if (guarded([&] { return read_byte(bus); }, out)) _exit(14);
            if (!guarded([&] { return read_byte(good); }, out) || out != 7) _exit(15);
        }
        // Another thread's guard is its own: a thread that faults inside its own guard is caught.
        bool caught = false;
        std::thread t([&] {
            uint16_t out = 0;
            caught = !guarded([&] { return read_byte(bad); }, out);
        });
        t.join();
        if (!caught) _exit(16);
    });
    INFO("child status " << st);
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 0);
}

TEST_CASE("a fault outside guarded() goes to the handler that was there before") {
    const int st = in_child([] {
        struct sigaction sa {};
        sa.sa_handler = [](int) { _exit(42); };
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGSEGV, &sa, nullptr) != 0) _exit(10);
        if (!install_fault_guard()) _exit(11);
        uint8_t* bad = no_access_page();
        uint16_t out = 0;
        if (!bad || guarded([&] { return read_byte(bad); }, out)) _exit(12);
        read_byte(bad);  // unguarded: the previous handler
        _exit(13);
    });
    INFO("child status " << st);
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 42);
}

// The handler before is Catch2's (it reports and re-raises with the default action), or ASan's.
TEST_CASE("a fault outside guarded() still kills the process") {
    const int st = in_child([] {
        if (!install_fault_guard()) _exit(11);
        uint8_t* bad = no_access_page();
        if (!bad) _exit(12);
        read_byte(bad);
        _exit(0);
    });
    INFO("child status " << st);
#if defined(__SANITIZE_ADDRESS__)
    // Catch2's re-raise reaches ASan's handler: it reports and aborts (abort_on_error) or exits 1.
    CHECK(((WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT) || (WIFEXITED(st) && WEXITSTATUS(st) == 1)));
#else
    CHECK((WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV));
#endif
}

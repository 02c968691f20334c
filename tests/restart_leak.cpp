// LD_PRELOAD for a test's RDMA programs (check_verbs.py, check_rdmacm.py): with
// HCAEMU_TEST_RESTART_LEAK=K, every K-th read(2) of a blocking eventfd fails with errno 512
// (ERESTARTSYS) before reading anything, as this project's CI kernel now and then answers a read
// that waits (a kernel-internal code that should never reach a program). The libraries' event
// channels (ibv_get_cq_event, rdma_get_cm_event) must read again, not fail. At exit it says how
// many it answered so, on stderr: a test that injected none proves nothing.
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

std::atomic<unsigned> g_reads{0}, g_leaked{0};

unsigned every() {
    static const unsigned k = [] {
        const char* v = std::getenv("HCAEMU_TEST_RESTART_LEAK");
        return v ? unsigned(std::strtoul(v, nullptr, 10)) : 0u;
    }();
    return k;
}

bool blocking_eventfd(int fd) {
    const int fl = ::fcntl(fd, F_GETFL);
    if (fl < 0 || (fl & O_NONBLOCK)) return false;
    char path[64], link[64];
    std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    const ssize_t n = ::readlink(path, link, sizeof link - 1);
    if (n <= 0) return false;
    link[n] = 0;
    return std::strcmp(link, "anon_inode:[eventfd]") == 0;
}

__attribute__((destructor)) void report() {
    if (every()) std::fprintf(stderr, "restart_leak: %u reads of an eventfd answered errno 512\n", g_leaked.load());
}

}  // namespace

extern "C" __attribute__((visibility("default"))) ssize_t read(int fd, void* buf, size_t n) {
    using Fn = ssize_t (*)(int, void*, size_t);
    static const auto real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "read"));
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    if (const unsigned k = every(); k && n == 8 && blocking_eventfd(fd) && (g_reads.fetch_add(1) + 1) % k == 0) {
        g_leaked.fetch_add(1);
        errno = 512;
        return -1;
    }
    return real(fd, buf, n);
}

// LD_PRELOAD for a test's rdma_cm server (check_rdmacm.py, perftest_rej): with
// HCAEMU_TEST_SLOW_LISTEN=N:S the program's N-th rdma_listen waits S seconds first, so that a
// client's connect meant for it finds nobody listening (REJ 8, IBTA's invalid service ID), as a
// slow peer's would. The program itself is Debian's, unmodified.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

struct rdma_cm_id;
extern "C" int rdma_listen(rdma_cm_id* id, int backlog);

extern "C" __attribute__((visibility("default"))) int rdma_listen(rdma_cm_id* id, int backlog) {
    using Fn = int (*)(rdma_cm_id*, int);
    static int calls = 0;
    const auto real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "rdma_listen"));
    if (!real) return -1;
    unsigned n = 0, s = 0;
    if (const char* v = std::getenv("HCAEMU_TEST_SLOW_LISTEN"); v && std::sscanf(v, "%u:%u", &n, &s) == 2 &&
                                                                  unsigned(++calls) == n)
        ::sleep(s);
    return real(id, backlog);
}

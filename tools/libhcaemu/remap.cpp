// In-place replacement of a program's pages by a shared memfd (remap.hpp, docs/memory.md).
//
// Each replacement runs in a child sharing our address space (clone CLONE_VM|CLONE_VFORK, as
// posix_spawn does): the calling thread waits inside the kernel until the child is done, so none
// of its own writes (its stack frames, errno, the allocator, a signal handler) can fall between
// the copy of a page and the switch of the mapping. (At -O2 the copy-and-swap below happens to
// write no stack, so the calling thread could run it itself; the child makes that independent of
// code generation and signals, for one clone and wait a call.) The child copies with system
// calls (no allocation, no errno, no sanitizer interceptor: a malloc'd range spans redzones) and
// swaps each piece in with one mremap(MREMAP_FIXED): a piece is either wholly the old mapping or
// wholly the new one, never a hole.
#include "tools/libhcaemu/remap.hpp"
#include "tools/libhcaemu/sysretry.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <vector>

#ifndef MFD_HUGETLB
#define MFD_HUGETLB 4U
#endif
#ifndef MFD_HUGE_SHIFT
#define MFD_HUGE_SHIFT 26
#endif

namespace hcaemu::api::remap {

namespace {

constexpr uint64_t kFileSize = 1ull << 56;  // above every user address (x86-64, 5-level paging)
constexpr size_t kChildStack = 64 * 1024;

// A system call without errno (the child must not write our thread's TLS): -errno on failure.
__attribute__((no_sanitize("address", "undefined"))) long sys(long n, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0, long f = 0) {
#if defined(__x86_64__)
    long ret;
    register long r10 asm("r10") = d;
    register long r8 asm("r8") = e;
    register long r9 asm("r9") = f;
    asm volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                 : "rcx", "r11", "memory");
    return ret;
#else
    const long r = ::syscall(n, a, b, c, d, e, f);
    return r == -1 ? -errno : r;
#endif
}

struct Vma {
    uintptr_t start = 0, end = 0;
    int prot = 0;
    bool shared = false;
    uint64_t pgoff = 0;  // bytes
    unsigned dev_major = 0, dev_minor = 0;
    uint64_t ino = 0;
    std::string path;
};

bool read_text(const char* path, std::string& out) {
    const int f = ::open(path, O_RDONLY | O_CLOEXEC);
    if (f < 0) return false;
    out.clear();
    char buf[16384];
    for (;;) {
        const ssize_t r = ::read(f, buf, sizeof buf);
        if (r < 0 && interrupted(errno)) continue;
        if (r <= 0) break;
        out.append(buf, size_t(r));
    }
    ::close(f);
    return !out.empty();
}

std::vector<Vma> read_maps() {
    std::vector<Vma> out;
    std::string text;
    if (!read_text("/proc/self/maps", text)) return out;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t eol = text.find('\n', pos);
        if (eol == std::string::npos) eol = text.size();
        const std::string line = text.substr(pos, eol - pos);
        pos = eol + 1;
        Vma v;
        unsigned long s = 0, e = 0, off = 0, ino = 0;
        char perms[5] = {};
        int n = 0;
        if (std::sscanf(line.c_str(), "%lx-%lx %4s %lx %x:%x %lu %n", &s, &e, perms, &off, &v.dev_major,
                        &v.dev_minor, &ino, &n) < 7)
            continue;
        v.start = s;
        v.end = e;
        v.pgoff = off;
        v.ino = ino;
        v.prot = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
                 (perms[2] == 'x' ? PROT_EXEC : 0);
        v.shared = perms[3] == 's';
        if (n > 0 && size_t(n) <= line.size()) v.path = line.substr(size_t(n));
        out.push_back(std::move(v));
    }
    return out;
}

// The text after `field` in the smaps entry of the mapping starting at `start` ("" if none).
std::string smaps_field(uintptr_t start, const char* field) {
    std::string text;
    if (!read_text("/proc/self/smaps", text)) return "";
    char key[32];
    std::snprintf(key, sizeof key, "%" PRIxPTR "-", start);
    size_t at = text.rfind(key, 0) == 0 ? 0 : text.find(std::string("\n") + key);
    if (at == std::string::npos || (at = text.find(field, at)) == std::string::npos) return "";
    at += std::strlen(field);
    return text.substr(at, text.find('\n', at) - at);
}
// KernelPageSize of the mapping starting at `start`, 0 if not found.
size_t kernel_page_size(uintptr_t start) {
    return size_t(std::strtoull(smaps_field(start, "KernelPageSize:").c_str(), nullptr, 10)) * 1024;
}

struct Memfd {
    int fd = -1;
    unsigned dev_major = 0, dev_minor = 0;
    uint64_t ino = 0;
};

struct State {
    std::mutex mu;
    std::map<size_t, Memfd> fds;        // by page size
    std::map<uint64_t, uint32_t> refs;  // a step function: the count from each key to the next
    Counters ctr;
    void* child_stack = nullptr;
};
State& state() {
    static State* s = new State;  // never destroyed: MRs may outlive static destructors
    return *s;
}

size_t base_page() { return size_t(::sysconf(_SC_PAGESIZE)); }
uintptr_t down(uintptr_t a, size_t p) { return a & ~uintptr_t(p - 1); }
uintptr_t up(uintptr_t a, size_t p) { return (a + p - 1) & ~uintptr_t(p - 1); }

std::string hexs(uint64_t v) {
    char b[24];
    std::snprintf(b, sizeof b, "0x%" PRIx64, v);
    return b;
}
std::string vma_name(const Vma& v) {
    return "[" + hexs(v.start) + ", " + hexs(v.end) + ")" + (v.path.empty() ? "" : " " + v.path);
}

const Memfd* memfd_for(State& st, size_t page, std::string& err) {
    if (auto it = st.fds.find(page); it != st.fds.end()) return &it->second;
    unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
    if (page != base_page()) flags |= MFD_HUGETLB | (unsigned(__builtin_ctzll(page)) << MFD_HUGE_SHIFT);
    const int fd = ::memfd_create("hcaemu-mr", flags);
    struct stat sb{};
    if (fd < 0 || ::ftruncate(fd, off_t(kFileSize)) != 0 ||
        ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 || ::fstat(fd, &sb) != 0) {
        err = std::string("memfd_create/ftruncate/F_ADD_SEALS for ") + std::to_string(page) + "-byte pages: " +
              std::strerror(errno);
        if (fd >= 0) ::close(fd);
        return nullptr;
    }
    Memfd m{fd, major(sb.st_dev), minor(sb.st_dev), uint64_t(sb.st_ino)};
    return &st.fds.emplace(page, m).first->second;
}

// The page size whose memfd this mapping is (0: none of ours).
size_t ours(const State& st, const Vma& v) {
    for (const auto& [page, m] : st.fds)
        if (v.ino == m.ino && v.dev_major == m.dev_major && v.dev_minor == m.dev_minor) return page;
    return 0;
}
bool ours_home(const State& st, const Vma& v) { return v.shared && ours(st, v) && v.pgoff == v.start; }

// ---- the step function of registration counts ----
void coalesce(std::map<uint64_t, uint32_t>& m) {
    uint32_t prev = 0;
    for (auto it = m.begin(); it != m.end();) {
        if (it->second == prev) it = m.erase(it);
        else prev = (it++)->second;
    }
}
// Adds +1 or -1 over [lo, hi); with -1, returns the ranges whose count reached 0.
std::vector<std::pair<uint64_t, uint64_t>> ref_add(std::map<uint64_t, uint32_t>& m, uint64_t lo, uint64_t hi, int delta) {
    const auto split = [&](uint64_t k) {
        auto it = m.lower_bound(k);
        if (it != m.end() && it->first == k) return;
        m.emplace(k, it == m.begin() ? 0u : std::prev(it)->second);
    };
    split(lo);
    split(hi);
    std::vector<std::pair<uint64_t, uint64_t>> zero;
    for (auto it = m.find(lo); it->first < hi; ++it) {
        const uint64_t next = std::next(it)->first;
        if (delta > 0) ++it->second;
        else if (it->second > 0 && --it->second == 0) {
            if (!zero.empty() && zero.back().second == it->first) zero.back().second = next;
            else zero.emplace_back(it->first, next);
        }
    }
    coalesce(m);
    return zero;
}

// ---- the child that swaps pages while the caller waits ----
struct Piece {
    uintptr_t lo = 0, hi = 0;
    int prot = 0;
};
struct Job {
    bool revert = false;  // false: private -> memfd; true: memfd -> private anonymous
    int fd = -1;
    size_t page = 0;      // != base page: hugetlb
    bool huge = false;
    const Piece* pieces = nullptr;
    size_t n = 0;
    size_t done = 0;      // pieces swapped (written by the child at the end)
    long error = 0;       // -errno of the first failure
    const char* step = "";
};

// Unmaps the temporary mapping `t` and returns `r` (a failed step).
__attribute__((no_sanitize("address", "undefined"))) long undo(long t, size_t len, long r) {
    sys(SYS_munmap, t, long(len));
    return r;
}

// Copies [p.lo, p.hi) into the memfd and swaps a shared mapping of it in (or, reverting, a private
// anonymous copy back in), each through a temporary mapping moved over the old pages at once.
__attribute__((no_sanitize("address", "undefined"))) long swap_piece(const Job& j, const Piece& p, const char*& step) {
    const size_t len = p.hi - p.lo;
    const long huge = j.huge ? long(MAP_HUGETLB | (__builtin_ctzll(j.page) << MAP_HUGE_SHIFT)) : 0;
    long t;
    if (!j.revert) {
        step = "mmap of the memfd";
        t = sys(SYS_mmap, 0, long(len), j.huge ? PROT_READ | PROT_WRITE : p.prot, MAP_SHARED, j.fd, long(p.lo));
        if (t < 0) return t;
        step = "copy into the memfd";
        if (j.huge) {  // hugetlbfs has no write(): copy through the mapping (never sanitizer heap)
            __builtin_memcpy(reinterpret_cast<void*>(t), reinterpret_cast<const void*>(p.lo), len);
            if (long r = sys(SYS_mprotect, t, long(len), p.prot); r < 0) return undo(t, len, r);
        } else {
            for (size_t off = 0; off < len;) {
                const long r = sys(SYS_pwrite64, j.fd, long(p.lo + off), long(len - off), long(p.lo + off));
                if (r == -EINTR || (r <= -512 && r >= -516)) continue;  // see sysretry.hpp
                if (r <= 0) return undo(t, len, r < 0 ? r : -EIO);
                off += size_t(r);
            }
        }
        step = "madvise(MADV_DONTFORK)";
        if (long r = sys(SYS_madvise, t, long(len), MADV_DONTFORK); r < 0) return undo(t, len, r);
    } else {
        step = "mmap of anonymous memory";
        t = sys(SYS_mmap, 0, long(len), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | huge, -1, 0);
        if (t < 0) return t;
        step = "copy from the memfd";
        for (size_t off = 0; off < len;) {
            const long r = sys(SYS_pread64, j.fd, t + long(off), long(len - off), long(p.lo + off));
            if (r == -EINTR || (r <= -512 && r >= -516)) continue;  // see sysretry.hpp
            if (r <= 0) return undo(t, len, r < 0 ? r : -EIO);
            off += size_t(r);
        }
        if (long r = sys(SYS_mprotect, t, long(len), p.prot); r < 0) return undo(t, len, r);
    }
    step = "mremap over the old pages";
    const long r = sys(SYS_mremap, t, long(len), long(len), MREMAP_MAYMOVE | MREMAP_FIXED, long(p.lo));
    return r < 0 ? undo(t, len, r) : 0;
}

__attribute__((no_sanitize("address", "undefined"))) int child_main(void* arg) {
    Job& j = *static_cast<Job*>(arg);
    size_t i = 0;
    long err = 0;
    const char* step = "";
    for (; i < j.n; ++i)
        if ((err = swap_piece(j, j.pieces[i], step)) != 0) break;
    j.done = i;  // after the last swap: a write here can no longer be lost
    j.error = err;
    j.step = step;
    return 0;
}

// Runs the job in a CLONE_VM|CLONE_VFORK child: we wait in the kernel until it exits.
bool run_job(State& st, Job& j, std::string& err) {
    if (!st.child_stack) {
        void* s = ::mmap(nullptr, kChildStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (s == MAP_FAILED) {
            err = std::string("mmap of a stack: ") + std::strerror(errno);
            return false;
        }
        st.child_stack = s;
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);  // the child inherits it: no handler runs there
    const int pid = ::clone(child_main, static_cast<char*>(st.child_stack) + kChildStack,
                            CLONE_VM | CLONE_VFORK | CLONE_FILES, &j);
    const int clone_errno = errno;
    if (pid > 0) {
        while (::waitpid(pid, nullptr, __WCLONE) < 0 && interrupted(errno)) {
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (pid <= 0) {
        err = std::string("clone: ") + std::strerror(clone_errno);
        return false;
    }
    if (j.error != 0) {
        err = std::string(j.step) + ": " + std::strerror(int(-j.error));
        return false;
    }
    return true;
}

// The main thread's stack grows only at its lowest mapping (VM_GROWSDOWN; "[stack]" names the
// one holding the start of the stack, not always the lowest after earlier swaps split it). Before
// replacing the lowest page of a growing mapping, grow it by a page (when the rlimit and the
// guard gap allow), so that it still grows after.
__attribute__((no_sanitize("address"))) void touch(uintptr_t p) {
    (void)*reinterpret_cast<volatile const char*>(p);
}
void grow_stack(const std::vector<Vma>& maps, size_t i) {
    const Vma& v = maps[i];
    const size_t page = base_page();
    uintptr_t top = 0;
    for (const Vma& w : maps)
        if (w.path == "[stack]") top = w.end;
    rlimit rl{};
    if (top == 0 || v.start >= top || ::getrlimit(RLIMIT_STACK, &rl) != 0) return;
    const uint64_t limit = rl.rlim_cur == RLIM_INFINITY ? (1ull << 30) : rl.rlim_cur;
    if (v.ino != 0 || v.shared || top - (v.start - page) > limit) return;
    const uintptr_t prev_end = i > 0 ? maps[i - 1].end : 0;
    if (v.start < prev_end + (2u << 20) + page) return;  // stack_guard_gap (256 pages) and more
    if (smaps_field(v.start, "VmFlags:").find(" gd") == std::string::npos) return;
    touch(v.start - page);
}

thread_local std::string t_last_error;

Status share_foreign(const Vma& v, uintptr_t a, Share& out, std::string& err) {
    int fd = -1;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/map_files/%" PRIxPTR "-%" PRIxPTR, v.start, v.end);
    const auto same = [&](int f) {
        struct stat sb{};
        return ::fstat(f, &sb) == 0 && uint64_t(sb.st_ino) == v.ino && major(sb.st_dev) == v.dev_major &&
               minor(sb.st_dev) == v.dev_minor;
    };
    fd = ::open(path, O_RDWR | O_CLOEXEC);  // needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE
    if (fd >= 0 && !same(fd)) {
        ::close(fd);
        fd = -1;
    }
    if (fd < 0) {  // the program may still hold the file open
        if (DIR* d = ::opendir("/proc/self/fd")) {
            while (dirent* e = ::readdir(d)) {
                char* end = nullptr;
                const long n = std::strtol(e->d_name, &end, 10);
                if (end == e->d_name || *end || n == dirfd(d)) continue;
                if ((::fcntl(int(n), F_GETFL) & O_ACCMODE) == O_RDWR && same(int(n))) {
                    fd = ::fcntl(int(n), F_DUPFD_CLOEXEC, 0);
                    break;
                }
            }
            ::closedir(d);
        }
    }
    const int seals = fd >= 0 ? ::fcntl(fd, F_GET_SEALS) : -1;
    if (fd < 0 || seals < 0 || !(seals & F_SEAL_SHRINK)) {
        if (fd >= 0) ::close(fd);
        err = "MAP_SHARED mapping " + vma_name(v) +
              ": the daemon maps only a memfd sealed with F_SEAL_SHRINK (a file that can shrink would fault its "
              "DMA engine)" + (fd < 0 ? " and no read-write descriptor of it was found" : "") +
              "; register private memory (malloc, mmap MAP_PRIVATE, the stack) or Context::alloc_buffer()";
        return Status::not_supported;
    }
    out.fd = fd;
    out.offset = v.pgoff + (a - v.start);
    out.remapped = false;
    return Status::ok;
}

// The mappings over [lo, hi), or an error naming the first gap or bad protection.
Status cover(const std::vector<Vma>& maps, uintptr_t lo, uintptr_t hi, bool writable, std::vector<size_t>& idx,
             std::string& err) {
    uintptr_t at = lo;
    for (size_t i = 0; i < maps.size() && at < hi; ++i) {
        const Vma& v = maps[i];
        if (v.end <= at) continue;
        if (v.start > at) break;
        if (!(v.prot & PROT_READ)) {
            err = "memory not readable: " + vma_name(v);
            return Status::bad_address;
        }
        if (writable && !(v.prot & PROT_WRITE)) {
            err = "read-only memory " + vma_name(v) + " registered with write access (local or remote)";
            return Status::bad_address;
        }
        idx.push_back(i);
        at = v.end;
    }
    if (at < hi) {
        err = "address " + hexs(at) + " is not mapped";
        return Status::bad_address;
    }
    return Status::ok;
}

}  // namespace

namespace {
// Swaps the pieces of [lo, hi) not yet in the memfd `fd` for its pages.
Status replace(State& st, const std::vector<Vma>& maps, const std::vector<size_t>& idx, uintptr_t lo, uintptr_t hi,
               size_t page, int fd, std::string& err) {
    std::vector<Piece> pieces;
    for (size_t i : idx) {
        const Vma& v = maps[i];
        if (ours_home(st, v)) continue;
        const Piece p{std::max(lo, v.start), std::min(hi, v.end), v.prot};
        if (p.lo == v.start) grow_stack(maps, i);
        pieces.push_back(p);
    }
    if (pieces.empty()) return Status::ok;
    Job j;
    j.fd = fd;
    j.page = page;
    j.huge = page != base_page();
    j.pieces = pieces.data();
    j.n = pieces.size();
    if (!run_job(st, j, err)) {
        // Pieces swapped before the failure hold the same bytes; they stay (uncounted).
        err = "replacing " + vma_name(maps[idx[0]]) + " by shared memory: " + err;
        return (j.error == -ENOMEM || j.error == -ENOSPC) ? Status::no_resources : Status::not_supported;
    }
    for (const Piece& p : pieces) {
        st.ctr.pages_replaced += (p.hi - p.lo) / base_page();
        st.ctr.bytes_copied += p.hi - p.lo;
    }
    return Status::ok;
}

Status share_locked(const void* addr, size_t len, bool writable, Share& out, std::string& err) {
    out = {};
    const auto a = reinterpret_cast<uintptr_t>(addr);
    if (len == 0 || a + len < a) {
        err = "empty or wrapping range";
        return Status::invalid_argument;
    }
    State& st = state();
    std::lock_guard lk(st.mu);
    const size_t base = base_page();
    const std::vector<Vma> maps = read_maps();
    if (maps.empty()) {
        err = "cannot read /proc/self/maps";
        return Status::no_resources;
    }
    std::vector<size_t> idx;
    if (Status s = cover(maps, down(a, base), up(a + len, base), writable, idx, err); s != Status::ok) return s;

    // A MAP_SHARED mapping (not one of ours at home) is shared already: its own fd, if the daemon
    // may map it. Everything else gets replaced; all of it must have one page size.
    size_t page = 0;
    for (size_t i : idx) {
        const Vma& v = maps[i];
        if (v.shared && !ours_home(st, v)) {
            if (idx.size() != 1) {
                err = "range spans the MAP_SHARED mapping " + vma_name(v) + " and other memory";
                return Status::not_supported;
            }
            return share_foreign(v, a, out, err);
        }
        size_t ps = ours(st, v);
        if (!ps) ps = v.ino == 0 ? base : kernel_page_size(v.start);
        if (ps == 0) ps = base;
        if (page && ps != page) {
            err = "range spans pages of different sizes (" + std::to_string(page) + ", " + std::to_string(ps) + ")";
            return Status::not_supported;
        }
        page = ps;
    }
    const uintptr_t lo = down(a, page), hi = up(a + len, page);
    const Memfd* m = memfd_for(st, page, err);
    if (!m) return Status::no_resources;

    if (Status s = replace(st, maps, idx, lo, hi, page, m->fd, err); s != Status::ok) return s;
    out.fd = ::fcntl(m->fd, F_DUPFD_CLOEXEC, 0);
    if (out.fd < 0) {
        err = std::string("dup: ") + std::strerror(errno);
        return Status::no_resources;
    }
    ref_add(st.refs, lo, hi, +1);
    ++st.ctr.shares;
    out.offset = a;
    out.remapped = true;
    out.lo = lo;
    out.hi = hi;
    out.page = page;
    return Status::ok;
}
}  // namespace

Status share(const void* addr, size_t len, bool writable, Share& out, std::string& err) {
    const Status s = share_locked(addr, len, writable, out, err);
    t_last_error = s == Status::ok ? std::string() : err;
    return s;
}

Status check_mapped(const void* addr, size_t len, bool writable, std::string& err) {
    const auto lo = reinterpret_cast<uintptr_t>(addr);
    if (len == 0 || lo + len < lo) {
        err = "an empty or wrapping range";
        return Status::invalid_argument;
    }
    std::vector<size_t> idx;
    return cover(read_maps(), lo, lo + len, writable, idx, err);
}

const std::string& last_error() { return t_last_error; }

void unshare(const Share& s) {
    if (!s.remapped) return;
    State& st = state();
    std::lock_guard lk(st.mu);
    const auto zero = ref_add(st.refs, s.lo, s.hi, -1);
    if (zero.empty()) return;
    const auto fit = st.fds.find(s.page);
    if (fit == st.fds.end()) return;
    const Memfd& m = fit->second;
    const size_t base = base_page();
    std::vector<Piece> pieces;
    for (const Vma& v : read_maps()) {
        if (!ours_home(st, v) || ours(st, v) != s.page) continue;
        for (const auto& [zl, zh] : zero)
            if (v.start < zh && zl < v.end) pieces.push_back({std::max<uintptr_t>(zl, v.start), std::min<uintptr_t>(zh, v.end), v.prot});
    }
    if (!pieces.empty()) {
        Job j;
        j.revert = true;
        j.fd = m.fd;
        j.page = s.page;
        j.huge = s.page != base;
        j.pieces = pieces.data();
        j.n = pieces.size();
        std::string err;
        (void)run_job(st, j, err);  // a piece that cannot go back stays shared (same bytes)
        for (size_t i = 0; i < j.done; ++i) st.ctr.pages_reverted += (pieces[i].hi - pieces[i].lo) / base;
    }
    // Free the memfd's pages that no mapping of ours shows any more (reverted, or unmapped by the
    // program: free() of a large block, brk trimmed).
    std::vector<std::pair<uint64_t, uint64_t>> used;
    for (const Vma& v : read_maps())
        if (v.shared && ours(st, v) == s.page) used.emplace_back(v.pgoff, v.pgoff + (v.end - v.start));
    for (const auto& [zl, zh] : zero) {
        uint64_t at = zl;
        std::sort(used.begin(), used.end());
        for (const auto& [ul, uh] : used) {
            if (uh <= at || ul >= zh) continue;
            if (ul > at && ::fallocate(m.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(at), off_t(ul - at)) == 0)
                st.ctr.bytes_punched += ul - at;
            at = std::max(at, uh);
        }
        if (at < zh && ::fallocate(m.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(at), off_t(zh - at)) == 0)
            st.ctr.bytes_punched += zh - at;
    }
}

Counters counters() {
    State& st = state();
    std::lock_guard lk(st.mu);
    return st.ctr;
}

}  // namespace hcaemu::api::remap

#include "tools/hcaemud/log_line.hpp"

#include <limits.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <mutex>

#include <rte_log.h>

namespace hcaemu::daemon {

WriteNow write_now(int fd, std::string& line) {
    while (!line.empty()) {
        pollfd p{fd, POLLOUT, 0};
        const int r = ::poll(&p, 1, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) return WriteNow::later;
        if (r < 0 || (p.revents & (POLLERR | POLLNVAL))) return WriteNow::failed;  // no reader, no fd
        const ssize_t w = ::write(fd, line.data(), std::min<size_t>(line.size(), PIPE_BUF));
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return WriteNow::later;
            return WriteNow::failed;  // EPIPE (SIGPIPE ignored), EIO, ...
        }
        line.erase(0, size_t(w));
    }
    return WriteNow::done;
}

namespace {

struct DpdkLog {
    std::mutex mu;
    std::function<void(std::string&&)> sink;  // guarded by mu
    bool ending = false;                      // guarded by mu: DPDK logged at CRIT
};

// Never destroyed: DPDK's threads may log until the process is gone.
DpdkLog& dpdk_log() {
    static DpdkLog* d = new DpdkLog;
    return *d;
}

// DPDK formats a message into the stream's buffer and flushes it (rte_vlog): one call a message.
ssize_t dpdk_log_write(void*, const char* buf, size_t n) {
    std::string line(buf, n);
    DpdkLog& d = dpdk_log();
    std::lock_guard<std::mutex> g(d.mu);
    // CRIT and above come from rte_panic and rte_exit: the process ends right after, before the io
    // thread could write a line, so these and all that follow (the stack dump) are written here.
    if (rte_log_cur_msg_loglevel() <= int(RTE_LOG_CRIT)) d.ending = true;
    if (d.ending) {
        for (size_t off = 0; off < line.size();) {
            const ssize_t w = ::write(2, line.data() + off, line.size() - off);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) break;
            off += size_t(w);
        }
    } else if (d.sink) {
        d.sink(std::move(line));
    } else {
        write_now(2, line);  // the daemon is stopping: nothing would read a count of what is lost
    }
    return ssize_t(n);
}

}  // namespace

void route_dpdk_log(std::function<void(std::string&&)> sink) {
    static FILE* const f = [] {  // never closed, like the state above
        cookie_io_functions_t fns{};
        fns.write = dpdk_log_write;
        return fopencookie(nullptr, "w", fns);
    }();
    {
        DpdkLog& d = dpdk_log();
        std::lock_guard<std::mutex> g(d.mu);
        d.sink = std::move(sink);
    }
    if (f) rte_openlog_stream(f);
}

}  // namespace hcaemu::daemon

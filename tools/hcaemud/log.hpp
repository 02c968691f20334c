// hcaemud's log lines on stderr, written by the io thread without ever blocking it: a pipe nobody
// drains (a supervisor that keeps the fd and reads nothing) would otherwise stop every control
// request once it filled. Lines wait while the pipe is full, up to kMaxWaiting (newer ones are
// then dropped and counted, notes_dropped), and go out in order as it drains. DPDK's own lines
// join them (log_line.hpp).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <string>
#include <vector>

#include "tools/hcaemud/engine.hpp"

namespace hcaemu::daemon {

class LogWriter {
public:
    static constexpr size_t kMaxWaiting = 4096;  // lines
    static constexpr size_t kMaxLine = 4096;     // longer lines are cut: what waits is bounded (16 MiB)

    // fd: where the lines go (2). Lines wait on the io thread's timer while it is full.
    LogWriter(boost::asio::io_context& io, DCounters& ctr, int fd = 2);
    LogWriter(const LogWriter&) = delete;
    LogWriter& operator=(const LogWriter&) = delete;

    void add(std::string line);  // io thread
    void add(std::vector<std::string>&& lines);
    // At exit: what the fd takes now, in order; the rest is dropped and counted.
    void flush_now();
    size_t waiting() const { return q_.size(); }

private:
    bool write_some();  // false: the fd cannot take a line now
    void retry_later();

    boost::asio::steady_timer timer_;
    DCounters& ctr_;
    int fd_;
    std::deque<std::string> q_;
    bool timer_set_ = false;
};

}  // namespace hcaemu::daemon

#include "tools/hcaemud/log.hpp"

#include "tools/hcaemud/log_line.hpp"

#include <chrono>

namespace hcaemu::daemon {

LogWriter::LogWriter(boost::asio::io_context& io, DCounters& ctr, int fd) : timer_(io), ctr_(ctr), fd_(fd) {}

void LogWriter::add(std::string line) {
    if (q_.size() >= kMaxWaiting) {
        ctr_.inc(DCounter::notes_dropped);
        return;
    }
    if (line.size() > kMaxLine) {
        line.resize(kMaxLine - 1);
        line.back() = '\n';
    }
    q_.push_back(std::move(line));
    if (!timer_set_ && !write_some()) retry_later();
}

void LogWriter::add(std::vector<std::string>&& lines) {
    for (std::string& l : lines) add(std::move(l));
}

bool LogWriter::write_some() {
    while (!q_.empty()) {
        const WriteNow w = write_now(fd_, q_.front());
        if (w == WriteNow::later) return false;
        if (w == WriteNow::failed) {  // nothing more will go out there
            ctr_.inc(DCounter::notes_dropped, q_.size());
            q_.clear();
            return true;
        }
        q_.pop_front();
    }
    return true;
}

void LogWriter::retry_later() {
    timer_set_ = true;
    timer_.expires_after(std::chrono::milliseconds(20));
    timer_.async_wait([this](const boost::system::error_code& ec) {
        timer_set_ = false;
        if (ec) return;
        if (!write_some()) retry_later();
    });
}

void LogWriter::flush_now() {
    timer_.cancel();
    timer_set_ = false;
    if (!write_some()) {
        ctr_.inc(DCounter::notes_dropped, q_.size());
        q_.clear();
    }
}

}  // namespace hcaemu::daemon

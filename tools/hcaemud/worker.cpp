#include "tools/hcaemud/worker.hpp"

#include <utility>

namespace hcaemu::daemon {

Worker::Worker() : th_([this] { run(); }) {}

Worker::~Worker() {
    std::deque<std::function<void()>> left;
    {
        const std::lock_guard g(mu_);
        stop_ = true;
        left.swap(q_);
    }
    cv_.notify_one();
    th_.join();
    left.clear();  // unrun: their closures release what they own here
}

void Worker::post(std::function<void()> job) {
    {
        const std::lock_guard g(mu_);
        q_.push_back(std::move(job));
    }
    cv_.notify_one();
}

void Worker::run() {
    std::unique_lock l(mu_);
    for (;;) {
        cv_.wait(l, [this] { return stop_ || !q_.empty(); });
        if (stop_) return;
        std::function<void()> job = std::move(q_.front());
        q_.pop_front();
        l.unlock();
        job();
        job = nullptr;  // the closure's captures released here, on this thread, before the lock
        l.lock();
    }
}

}  // namespace hcaemu::daemon

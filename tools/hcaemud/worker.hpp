// A thread beside the io thread for its slow memory work: mapping a client's memfd at reg_mr and
// faulting its pages in (about a second for many GiB), and unmapping what clients and the engine
// give back. The io thread meanwhile answers every other client's requests.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace hcaemu::daemon {

class Worker {
public:
    Worker();
    // Finishes the job it runs, destroys those still queued (unrun) and joins.
    ~Worker();
    Worker(const Worker&) = delete;
    Worker& operator=(const Worker&) = delete;

    // Any thread. Jobs run in order; a job's closure is destroyed on the worker (what it owns,
    // such as a Mapping, is released there).
    void post(std::function<void()> job);

private:
    void run();

    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> q_;
    bool stop_ = false;
    std::thread th_;  // last: started once the rest is built
};

}  // namespace hcaemu::daemon

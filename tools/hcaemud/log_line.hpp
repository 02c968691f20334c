// A log line written without ever blocking the thread that writes it, and DPDK's own log lines
// (EAL, PMDs) taken from DPDK's stream into hcaemud's: a pipe nobody drains must stop no thread of
// the daemon, DPDK's interrupt thread included (it runs memif's control channel: blocked in a log
// write, no memif peer can connect).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace hcaemu::daemon {

// One line to `fd` if it can take it now: poll first, then one write of at most PIPE_BUF (a pipe
// with room takes it whole); files and terminals always take it. `line` keeps what is left after
// a short write. later: fd is full now; failed: nothing more will go there (EPIPE, EBADF, ...).
enum class WriteNow { done, later, failed };
WriteNow write_now(int fd, std::string& line);

// DPDK's log messages from now on go to `sink`, called on the thread that logs under a lock (it
// must only hand the line over to the io thread); with no sink (nullptr: the io thread has stopped)
// to stderr by write_now, dropped when stderr cannot take them. From a message at CRIT on (rte_panic,
// rte_exit: the process ends) they are written at once, blocking. Call after rte_eal_init: EAL's own
// start-up lines, before any client is served, keep DPDK's default stream (stderr by a blocking
// fwrite, copied to syslog), where a failed start says why.
void route_dpdk_log(std::function<void(std::string&&)> sink);

}  // namespace hcaemu::daemon

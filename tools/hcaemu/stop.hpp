// SIGINT/SIGTERM for the hcaemu tools that wait (pingpong, perf, sim, demo): the handler only notes
// the signal; every wait loop asks stop_requested() and unwinds, so that destructors close the
// ethdev (a net_memif socket file is removed, the peer sees a disconnect) and flush the capture.
// A second signal while stopping exits at once, as hcaemud does.
#pragma once

namespace hcaemu::tools {

// Installs the handlers (sigaction, no SA_RESTART: a blocking call returns EINTR).
void install_stop_handlers();
// True once SIGINT or SIGTERM came (async-signal-safe to read).
bool stop_requested();
// The signal that asked for the stop, 0 if none.
int stop_signal();
// Prints "hcaemu SUB: interrupted by SIGINT" (or SIGTERM) on stderr; returns 128 + the signal,
// the status a shell reports for a process killed by it.
int report_stop(const char* sub);

}  // namespace hcaemu::tools

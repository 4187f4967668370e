// Graceful shutdown on SIGTERM / SIGINT.
#pragma once

#include <chrono>
#include <stop_token>

namespace kubetrain::runtime {

// Installs SIGTERM and SIGINT handlers (once per process) and returns a token
// that is stopped on the first signal. A second signal exits the process at
// once with status 1, for when a graceful shutdown hangs.
// The handler only writes to a pipe (async-signal-safe); a helper thread
// turns that into request_stop(). Thread-safe; later calls return the same token.
std::stop_token InstallShutdownHandler();

// Sleeps for `d`, returning early once `stop` is requested.
void SleepFor(std::stop_token stop, std::chrono::milliseconds d);

}  // namespace kubetrain::runtime

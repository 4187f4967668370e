// `kubetrain-trainer`: the oneDNN parameter-server trainer (the default workload).
//
// This file parses the flags into the trainer's Config (config.h); the role drivers
// (parameter server, worker, single process) and the exit-code contract are in roles.h.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <string>

#include "common/workload_contract.h"
#include "kubetrain/version.h"
#include "trainer/config.h"
#include "trainer/roles.h"

int main(int argc, char** argv) {
  // OpenMP threads spin while they wait by default. Next to other busy processes (a PS and
  // workers sharing a node, `kubetrain run` on a laptop, CFS quota) that spinning starves
  // the threads doing work: 7x slower measured on a shared 2-core machine. The policy is
  // read once when libgomp loads, before main, so set it and re-execute this binary (same
  // PID) unless the user chose a policy. Passive costs little on dedicated cores: a few
  // wake-ups per layer per step against tens of milliseconds of GEMM.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr && ::setenv("OMP_WAIT_POLICY", "passive", 1) == 0) {
    ::execv("/proc/self/exe", argv);
    // exec failed (no /proc): carry on with the default policy.
  }
  kubetrain::trainer::Config config;
  CLI::App app{"kubetrain-trainer: parameter-server training with oneDNN"};
  app.set_version_flag("--version", std::string("kubetrain-trainer ") + kubetrain::kVersion);
  kubetrain::trainer::AddTrainerFlags(app, &config);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; a bad flag is a permanent failure like any other bad
    // configuration (the workload contract's exit codes), whatever CLI11's own code.
    const int code = app.exit(e);
    return code == 0 ? 0 : kubetrain::contract::kExitPermanent;
  }
  return kubetrain::trainer::Run(config);
}

// `kubetrain-operator`: the TrainingJob controller process.
#include <CLI/CLI.hpp>
#include <iostream>

#include "kubetrain/version.h"

int main(int argc, char** argv) {
  CLI::App app{"kubetrain-operator: reconciles TrainingJobs into pods and services"};
  app.set_version_flag("--version", std::string("kubetrain-operator ") + kubetrain::kVersion);
  CLI11_PARSE(app, argc, argv);
  std::cerr << "kubetrain-operator: the controller is not built yet (see issue 4)\n";
  return 2;
}

// `kubetrain-trainer`: the oneDNN parameter-server trainer (the default workload).
#include <CLI/CLI.hpp>
#include <iostream>

#include "kubetrain/version.h"

int main(int argc, char** argv) {
  CLI::App app{"kubetrain-trainer: parameter-server training with oneDNN"};
  app.set_version_flag("--version", std::string("kubetrain-trainer ") + kubetrain::kVersion);
  CLI11_PARSE(app, argc, argv);
  std::cerr << "kubetrain-trainer: training is not built yet (see issue 5)\n";
  return 2;
}

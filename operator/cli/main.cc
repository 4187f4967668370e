// `kubetrain`: the command-line front end (run, render, validate).
#include <CLI/CLI.hpp>
#include <iostream>

#include "kubetrain/version.h"

int main(int argc, char** argv) {
  CLI::App app{"kubetrain: run distributed ML training jobs on Kubernetes or locally"};
  app.set_version_flag("--version", std::string("kubetrain ") + kubetrain::kVersion);
  app.require_subcommand(0);
  CLI11_PARSE(app, argc, argv);
  std::cout << app.help();
  return 0;
}

// `kubetrain convert`: TFJob manifests -> TrainingJobs (api::ConvertTFJob), for
// files, directories and multi-document streams.
//
// Every input document is printed, in order, as YAML separated by "---": a TFJob
// as its TrainingJob, headed by comments naming its source and every note
// (something without an equivalent, or a changed default); any other document
// (a ConfigMap, a TrainingJob) unchanged, so a GitOps directory converts
// whole; a List (`kubectl get tfjobs -o yaml`) is one document per item.
// Errors go to `err`, "<file>:<line>: <path>: <what>", and the document
// is left out.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace kubetrain::cli {

struct ConvertFlags {
  std::vector<std::string> paths;  // files, directories, "-" for stdin
  bool recursive = false;          // descend into subdirectories
};

// Exit code (exit_codes.h): kExitOk every document converted; kExitInvalid some
// document is not YAML or some TFJob did not convert (the rest are printed);
// kExitUsage an input could not be read (wins over kExitInvalid).
int ConvertCommand(const ConvertFlags& flags, std::ostream& out, std::ostream& err);

}  // namespace kubetrain::cli

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

// Exit code: 0 every document converted; 1 some TFJob did not convert (the
// rest are printed); 2 an input could not be read or parsed as YAML.
int ConvertCommand(const ConvertFlags& flags, std::ostream& out, std::ostream& err);

}  // namespace kubetrain::cli

// The files one `-f PATH` names for `validate` and `convert`: PATH itself (a
// file, or "-" for stdin), or a directory's manifests (*.yaml, *.yml, *.json),
// sorted so output is stable, descending into subdirectories when `recursive`.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace kubetrain::cli {

// NotFound when a directory cannot be listed (the message names it).
StatusOr<std::vector<std::string>> ManifestFiles(const std::string& path, bool recursive);

// The text of one manifest file ("-": standard input). NotFound for a missing or
// unreadable file, FailedPrecondition for a directory, InvalidArgument for a file
// larger than `max_bytes` (0: no limit). Messages start with the path.
StatusOr<std::string> ReadManifest(const std::string& path, size_t max_bytes = 0);

}  // namespace kubetrain::cli

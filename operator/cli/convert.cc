#include "operator/cli/convert.h"

#include <fstream>
#include <iostream>
#include <sstream>

#include "common/utf8.h"
#include "operator/api/json.h"
#include "operator/api/tfjob.h"
#include "operator/api/yaml.h"
#include "operator/cli/exit_codes.h"
#include "operator/cli/manifest_files.h"
#include "operator/local/yaml_out.h"

namespace kubetrain::cli {
namespace {

// "# " before every line of `text`, made safe for a terminal (a name or a
// managedBy value from the file is quoted in it).
std::string Comment(const std::string& text) {
  std::string out = "# ";
  for (char c : CleanText(text, 4096)) {
    out += c;
    if (c == '\n') out += "# ";
  }
  return out + "\n";
}

}  // namespace

int ConvertCommand(const ConvertFlags& flags, std::ostream& out, std::ostream& err) {
  bool unreadable = false, failed = false, first = true;
  for (const std::string& path : flags.paths) {
    auto files = ManifestFiles(path, flags.recursive);
    if (!files.ok()) {
      err << "error: " << files.status().message() << "\n";
      unreadable = true;
      continue;
    }
    for (const std::string& file : *files) {
      auto read = ReadManifest(file, api::kMaxYamlBytes);
      if (!read.ok()) {
        err << "error: " << read.status().message() << "\n";
        unreadable = true;
        continue;
      }
      const std::string& text = *read;
      auto docs = api::ParseYamlDocuments(text);
      if (!docs.ok()) {
        err << "error: " << file << ": " << docs.status().message() << "\n";
        failed = true;
        continue;
      }
      // One object: `prefix` is where it is in its document ("items[2]." in a List).
      auto emit = [&](const nlohmann::json& object, const api::YamlDocument& doc,
                      const std::string& prefix) {
        auto line_of = [&](const std::string& field) {
          return std::to_string(doc.LineOf(prefix + field));
        };
        std::string header;
        const nlohmann::json* value = &object;
        api::TFJobConversion conversion;
        if (api::IsTFJob(object)) {
          auto c = api::ConvertTFJob(object);
          if (!c.ok()) {
            const std::string msg = c.status().message();
            err << file << ":" << line_of(msg.substr(0, msg.find(": "))) << ": " << prefix << msg
                << "\n";
            failed = true;
            return;
          }
          conversion = std::move(*c);
          value = &conversion.job;
          const nlohmann::json& meta = conversion.job["metadata"];
          std::string name = api::StringField(meta, "name");
          if (name.empty()) name = api::StringField(meta, "generateName") + "*";
          const int at =
              prefix.empty() ? doc.line : doc.LineOf(prefix.substr(0, prefix.size() - 1));
          header = Comment("converted from TFJob " + name + " (" + file + ":" + std::to_string(at) +
                           ")");
          for (const api::TFJobNote& n : conversion.notes) {
            header += Comment(n.path + " (line " + line_of(n.path) + "): " + n.message);
          }
        }
        if (!first) out << "---\n";
        first = false;
        out << header << local::ToYaml(*value);
      };
      for (const api::YamlDocument& doc : *docs) {
        // `kubectl get tfjobs -o yaml` prints a v1 List: each item is a document.
        const nlohmann::json& v = doc.value;
        if (v.is_object() && api::StringField(v, "kind") == "List" && v.contains("items") &&
            v["items"].is_array()) {
          for (size_t i = 0; i < v["items"].size(); ++i) {
            emit(v["items"][i], doc, "items[" + std::to_string(i) + "].");
          }
          continue;
        }
        emit(v, doc, "");
      }
    }
  }
  out.flush();
  if (unreadable) return kExitUsage;
  return failed ? kExitInvalid : kExitOk;
}

}  // namespace kubetrain::cli

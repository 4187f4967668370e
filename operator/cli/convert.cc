#include "operator/cli/convert.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/utf8.h"
#include "operator/api/json.h"
#include "operator/api/tfjob.h"
#include "operator/api/yaml.h"
#include "operator/local/yaml_out.h"

namespace kubetrain::cli {
namespace {

namespace fs = std::filesystem;

bool IsManifest(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".yaml" || ext == ".yml" || ext == ".json";
}

// The files `path` names: itself, or a directory's manifests (sorted, so the
// output is stable), descending when `recursive`.
std::vector<std::string> Expand(const std::string& path, bool recursive, std::ostream& err,
                                bool& failed) {
  std::vector<std::string> files;
  std::error_code ec;
  if (path == "-" || !fs::is_directory(path, ec)) {
    files.push_back(path);
    return files;
  }
  auto add = [&](const fs::directory_entry& e) {
    if (e.is_regular_file(ec) && IsManifest(e.path())) files.push_back(e.path().string());
  };
  if (recursive) {
    for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
      add(*it);
    }
  } else {
    for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) add(*it);
  }
  if (ec) {
    err << "error: " << path << ": " << ec.message() << "\n";
    failed = true;
  }
  std::sort(files.begin(), files.end());
  return files;
}

bool ReadText(const std::string& file, std::string& text, std::ostream& err) {
  if (file == "-") {
    std::stringstream ss;
    ss << std::cin.rdbuf();
    text = ss.str();
    return true;
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    err << "error: " << file << ": cannot be read\n";
    return false;
  }
  in.seekg(0, std::ios::end);
  if (in.tellg() > static_cast<std::streamoff>(api::kMaxYamlBytes)) {
    err << "error: " << file << ": larger than " << api::kMaxYamlBytes << " bytes\n";
    return false;
  }
  in.seekg(0);
  text.assign(std::istreambuf_iterator<char>(in), {});
  return true;
}

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
    for (const std::string& file : Expand(path, flags.recursive, err, unreadable)) {
      std::string text;
      if (!ReadText(file, text, err)) {
        unreadable = true;
        continue;
      }
      auto docs = api::ParseYamlDocuments(text);
      if (!docs.ok()) {
        err << "error: " << file << ": " << docs.status().message() << "\n";
        unreadable = true;
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
  if (unreadable) return 2;
  return failed ? 1 : 0;
}

}  // namespace kubetrain::cli

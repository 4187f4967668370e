#include "operator/kube/config.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace kubetrain::kube {
namespace {

StatusOr<std::string> Base64Decode(const std::string& in) {
  static constexpr unsigned char kInvalid = 0xff;
  unsigned char table[256];
  std::memset(table, kInvalid, sizeof(table));
  const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (int i = 0; i < 64; ++i) table[static_cast<unsigned char>(alphabet[i])] = i;
  std::string out;
  out.reserve(in.size() * 3 / 4);
  unsigned int acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=' || c == '\n' || c == '\r' || c == ' ' || c == '\t') continue;
    unsigned char v = table[static_cast<unsigned char>(c)];
    if (v == kInvalid) return InvalidArgument("not valid base64");
    acc = (acc << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

std::string DirOf(const std::string& path) {
  auto pos = path.rfind('/');
  if (pos == std::string::npos) return ".";
  return pos == 0 ? "/" : path.substr(0, pos);
}

std::string Resolve(const std::string& dir, const std::string& p) {
  if (p.empty() || p[0] == '/') return p;
  return dir + "/" + p;
}

// Finds the entry called `name` in a list of {name: ..., <kind>: {...}}.
StatusOr<YAML::Node> FindNamed(const YAML::Node& root, const char* list, const char* kind,
                               const std::string& name) {
  YAML::Node items = root[list];
  if (items && !items.IsSequence()) return InvalidArgument(std::string(list) + ": not a list");
  if (items) {
    for (const auto& item : items) {
      if (item["name"] && item["name"].as<std::string>() == name) {
        YAML::Node body = item[kind];
        if (!body || !body.IsMap())
          return InvalidArgument(std::string(kind) + " \"" + name + "\": missing field \"" + kind +
                                 "\"");
        return body;
      }
    }
  }
  return NotFound(std::string(kind) + " \"" + name + "\" not found in " + list);
}

// A field of the wrong type; caught in ParseKubeConfig, which knows where it was.
struct FieldError {
  std::string field;
  std::string problem;
};

std::string Str(const YAML::Node& n, const char* field) {
  YAML::Node v = n[field];
  if (!v || v.IsNull()) return std::string();
  if (!v.IsScalar()) throw FieldError{field, "expected a string"};
  return v.Scalar();
}

bool Bool(const YAML::Node& n, const char* field) {
  YAML::Node v = n[field];
  if (!v || v.IsNull()) return false;
  bool out = false;
  if (!v.IsScalar() || !YAML::convert<bool>::decode(v, out))
    throw FieldError{field,
                     "expected true or false, got \"" + (v.IsScalar() ? v.Scalar() : "?") + "\""};
  return out;
}

// Data from "<field>-data" (base64) or from "<field>" (a file path).
StatusOr<std::string> DataOrFile(const YAML::Node& n, const std::string& field,
                                 const std::string& dir) {
  std::string data = Str(n, (field + "-data").c_str());
  if (!data.empty()) {
    auto decoded = Base64Decode(data);
    if (!decoded.ok()) return decoded.status().WithContext(field + "-data");
    return decoded;
  }
  std::string file = Str(n, field.c_str());
  if (file.empty()) return std::string();
  auto contents = ReadFile(Resolve(dir, file));
  if (!contents.ok()) return contents.status().WithContext(field);
  return contents;
}

// `where` tracks the part being read, for errors thrown as FieldError.
StatusOr<Config> ParseInner(const std::string& yaml, const std::string& path,
                            const std::string& want_context, std::string* where_now) {
  YAML::Node root = YAML::Load(yaml);
  if (!root.IsMap()) return InvalidArgument("not a kubeconfig (top level is not a map)");
  std::string ctx_name = want_context.empty() ? Str(root, "current-context") : want_context;
  if (ctx_name.empty()) return InvalidArgument("current-context: not set and no context was given");
  const std::string where = "context \"" + ctx_name + "\"";
  *where_now = where;
  auto ctx = FindNamed(root, "contexts", "context", ctx_name);
  if (!ctx.ok()) return ctx.status().WithContext(where);
  const std::string dir = DirOf(path);
  Config cfg;
  cfg.source = "kubeconfig " + path + " (" + where + ")";

  std::string cluster_name = Str(*ctx, "cluster");
  if (cluster_name.empty()) return InvalidArgument(where + ": field \"cluster\" is empty");
  auto cluster = FindNamed(root, "clusters", "cluster", cluster_name);
  if (!cluster.ok()) return cluster.status().WithContext(where);
  const std::string cwhere = where + ": cluster \"" + cluster_name + "\"";
  *where_now = cwhere;
  cfg.server = Str(*cluster, "server");
  if (cfg.server.empty()) return InvalidArgument(cwhere + ": field \"server\" is empty");
  if (cfg.server.rfind("https://", 0) != 0 && cfg.server.rfind("http://", 0) != 0)
    return InvalidArgument(cwhere + ": field \"server\": \"" + cfg.server +
                           "\" is not an http(s) URL");
  while (!cfg.server.empty() && cfg.server.back() == '/') cfg.server.pop_back();
  cfg.insecure_skip_tls_verify = Bool(*cluster, "insecure-skip-tls-verify");
  auto ca = DataOrFile(*cluster, "certificate-authority", dir);
  if (!ca.ok()) return ca.status().WithContext(cwhere);
  cfg.ca_pem = std::move(*ca);

  std::string user_name = Str(*ctx, "user");
  if (!user_name.empty()) {
    auto user = FindNamed(root, "users", "user", user_name);
    if (!user.ok()) return user.status().WithContext(where);
    const std::string uwhere = where + ": user \"" + user_name + "\"";
    *where_now = uwhere;
    cfg.token = Str(*user, "token");
    std::string token_file = Str(*user, "tokenFile");
    if (cfg.token.empty() && !token_file.empty()) {
      cfg.token_file = Resolve(dir, token_file);
      auto tok = ReadFile(cfg.token_file);
      if (!tok.ok()) return tok.status().WithContext(uwhere + ": tokenFile");
    }
    auto cert = DataOrFile(*user, "client-certificate", dir);
    if (!cert.ok()) return cert.status().WithContext(uwhere);
    auto key = DataOrFile(*user, "client-key", dir);
    if (!key.ok()) return key.status().WithContext(uwhere);
    if (cert->empty() != key->empty())
      return InvalidArgument(uwhere + ": client-certificate and client-key must be set together");
    cfg.client_cert_pem = std::move(*cert);
    cfg.client_key_pem = std::move(*key);
  }
  *where_now = where;
  std::string ns = Str(*ctx, "namespace");
  if (!ns.empty()) cfg.ns = ns;
  return cfg;
}

}  // namespace

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    std::string msg = "file \"" + path + "\": " + std::strerror(err);
    if (err == EACCES) return Status(StatusCode::kPermissionDenied, msg);
    return NotFound(msg);
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

StatusOr<Config> ParseKubeConfig(const std::string& yaml, const std::string& path,
                                 const std::string& context) {
  std::string where;
  try {
    auto cfg = ParseInner(yaml, path, context, &where);
    if (!cfg.ok()) return cfg.status().WithContext("kubeconfig " + path);
    return cfg;
  } catch (const FieldError& e) {
    return InvalidArgument("kubeconfig " + path + ": " + (where.empty() ? "" : where + ": ") +
                           "field \"" + e.field + "\": " + e.problem);
  } catch (const YAML::Exception& e) {
    return InvalidArgument("kubeconfig " + path + ": " + (where.empty() ? "" : where + ": ") +
                           e.what());
  }
}

StatusOr<Config> LoadKubeConfigFile(const std::string& path, const std::string& context) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status().WithContext("kubeconfig");
  return ParseKubeConfig(*text, path, context);
}

StatusOr<Config> LoadInClusterConfig(const std::string& sa_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (!host || !*host || !port || !*port)
    return FailedPrecondition(
        "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set");
  Config cfg;
  std::string h = host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6 literal
  cfg.server = "https://" + h + ":" + port;
  cfg.source = "in-cluster config (" + sa_dir + ")";
  cfg.token_file = sa_dir + "/token";
  auto tok = ReadFile(cfg.token_file);
  if (!tok.ok()) return tok.status().WithContext("in-cluster config: token");
  auto ca = ReadFile(sa_dir + "/ca.crt");
  if (!ca.ok()) return ca.status().WithContext("in-cluster config: ca.crt");
  cfg.ca_pem = std::move(*ca);
  auto ns = ReadFile(sa_dir + "/namespace");
  if (ns.ok()) {
    std::string v = *ns;
    while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
    if (!v.empty()) cfg.ns = v;
  }
  return cfg;
}

StatusOr<Config> LoadDefaultConfig(const std::string& kubeconfig, const std::string& context) {
  if (!kubeconfig.empty()) return LoadKubeConfigFile(kubeconfig, context);
  if (const char* env = std::getenv("KUBECONFIG"); env && *env) {
    std::string first(env);
    first = first.substr(0, first.find(':'));
    return LoadKubeConfigFile(first, context);
  }
  if (const char* host = std::getenv("KUBERNETES_SERVICE_HOST"); host && *host)
    return LoadInClusterConfig();
  const char* home = std::getenv("HOME");
  if (!home || !*home) return FailedPrecondition("no kubeconfig: KUBECONFIG and HOME are unset");
  return LoadKubeConfigFile(std::string(home) + "/.kube/config", context);
}

}  // namespace kubetrain::kube

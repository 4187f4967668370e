#include "operator/kube/config.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
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

StatusOr<ExecPlugin> ParseExec(const YAML::Node& n, const std::string& dir) {
  ExecPlugin p;
  p.api_version = Str(n, "apiVersion");
  if (p.api_version != "client.authentication.k8s.io/v1" &&
      p.api_version != "client.authentication.k8s.io/v1beta1")
    return InvalidArgument("exec: apiVersion \"" + p.api_version +
                           "\" is not supported (want client.authentication.k8s.io/v1 or "
                           "v1beta1)");
  p.command = Str(n, "command");
  if (p.command.empty()) return InvalidArgument("exec: field \"command\" is empty");
  // kubectl: a relative command with a path separator is relative to the file.
  if (p.command[0] != '/' && p.command.find('/') != std::string::npos)
    p.command = Resolve(dir, p.command);
  if (YAML::Node args = n["args"]; args && !args.IsNull()) {
    if (!args.IsSequence()) throw FieldError{"exec.args", "expected a list"};
    for (const auto& a : args) p.args.push_back(a.as<std::string>());
  }
  if (YAML::Node env = n["env"]; env && !env.IsNull()) {
    if (!env.IsSequence()) throw FieldError{"exec.env", "expected a list"};
    for (const auto& e : env) p.env.emplace_back(Str(e, "name"), Str(e, "value"));
  }
  p.install_hint = Str(n, "installHint");
  p.provide_cluster_info = Bool(n, "provideClusterInfo");
  return p;
}

// `where` tracks the part being read, for errors thrown as FieldError.
StatusOr<Config> ParseRoot(const YAML::Node& root, const std::string& path, const std::string& dir,
                           const std::string& want_context, std::string* where_now) {
  if (!root.IsMap()) return InvalidArgument("not a kubeconfig (top level is not a map)");
  std::string ctx_name = want_context.empty() ? Str(root, "current-context") : want_context;
  if (ctx_name.empty()) return InvalidArgument("current-context: not set and no context was given");
  const std::string where = "context \"" + ctx_name + "\"";
  *where_now = where;
  auto ctx = FindNamed(root, "contexts", "context", ctx_name);
  if (!ctx.ok()) return ctx.status().WithContext(where);
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
    if ((*user)["auth-provider"])
      return InvalidArgument(uwhere +
                             ": auth-provider plugins are not supported; use an exec credential "
                             "plugin (client.authentication.k8s.io/v1), as current kubectl does");
    if (YAML::Node exec = (*user)["exec"]; exec && !exec.IsNull()) {
      if (!exec.IsMap()) throw FieldError{"exec", "expected a map"};
      auto plugin = ParseExec(exec, dir);
      if (!plugin.ok()) return plugin.status().WithContext(uwhere);
      // Run it now: a plugin that fails is a clear error at start, not a
      // "cache not synced" later.
      auto cred = RunExecPlugin(*plugin, cfg);
      if (!cred.ok()) return cred.status().WithContext(uwhere);
      if (!cred->token.empty()) cfg.token = cred->token;
      if (!cred->client_cert_pem.empty()) {
        cfg.client_cert_pem = cred->client_cert_pem;
        cfg.client_key_pem = cred->client_key_pem;
      }
      cfg.exec = std::move(*plugin);
      cfg.exec_expiry = cred->expiry;
    }
  }
  *where_now = where;
  std::string ns = Str(*ctx, "namespace");
  if (!ns.empty()) cfg.ns = ns;
  return cfg;
}

StatusOr<Config> ParseInner(const std::string& yaml, const std::string& path,
                            const std::string& want_context, std::string* where_now) {
  return ParseRoot(YAML::Load(yaml), path, DirOf(path), want_context, where_now);
}

// RFC 3339 ("2026-11-22T17:00:00Z", fractions and offsets allowed) to a time point.
std::optional<std::chrono::system_clock::time_point> ParseRfc3339(const std::string& s) {
  std::tm tm{};
  const char* rest = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (rest == nullptr) return std::nullopt;
  if (*rest == '.')
    while (*++rest >= '0' && *rest <= '9') {
    }
  long offset = 0;
  if (*rest == '+' || *rest == '-') {
    int hh = 0, mm = 0;
    if (std::sscanf(rest + 1, "%d:%d", &hh, &mm) != 2) return std::nullopt;
    offset = (*rest == '+' ? 1 : -1) * (hh * 3600L + mm * 60L);
  }
  return std::chrono::system_clock::from_time_t(timegm(&tm) - offset);
}

// Absolute paths for the file references of one kubeconfig, so that entries
// merged from several files still point where their own file meant.
void AbsolutizePaths(YAML::Node root, const std::string& dir) {
  auto fix = [&](const char* list, const char* kind, std::initializer_list<const char*> fields) {
    YAML::Node items = root[list];
    if (!items || !items.IsSequence()) return;
    for (auto item : items) {
      YAML::Node body = item[kind];
      if (!body || !body.IsMap()) continue;
      for (const char* f : fields) {
        if (body[f] && body[f].IsScalar()) body[f] = Resolve(dir, body[f].Scalar());
      }
      if (std::string(kind) == "user" && body["exec"] && body["exec"].IsMap() &&
          body["exec"]["command"] && body["exec"]["command"].IsScalar()) {
        std::string c = body["exec"]["command"].Scalar();
        if (!c.empty() && c[0] != '/' && c.find('/') != std::string::npos)
          body["exec"]["command"] = Resolve(dir, c);
      }
    }
  };
  fix("clusters", "cluster", {"certificate-authority"});
  fix("users", "user", {"client-certificate", "client-key", "tokenFile"});
}

}  // namespace

StatusOr<ExecCredential> RunExecPlugin(const ExecPlugin& plugin, const Config& cfg,
                                       std::chrono::milliseconds timeout) {
  const std::string what = "exec plugin \"" + plugin.command + "\"";
  const std::string hint = plugin.install_hint.empty() ? "" : " (" + plugin.install_hint + ")";
  nlohmann::json info = {{"apiVersion", plugin.api_version},
                         {"kind", "ExecCredential"},
                         {"spec", {{"interactive", false}}}};
  if (plugin.provide_cluster_info) {
    info["spec"]["cluster"] = {{"server", cfg.server},
                               {"insecure-skip-tls-verify", cfg.insecure_skip_tls_verify}};
    if (!cfg.ca_pem.empty()) {
      static const char* b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
      std::string out;
      const std::string& in = cfg.ca_pem;
      for (size_t i = 0; i < in.size(); i += 3) {
        unsigned v = static_cast<unsigned char>(in[i]) << 16;
        if (i + 1 < in.size()) v |= static_cast<unsigned char>(in[i + 1]) << 8;
        if (i + 2 < in.size()) v |= static_cast<unsigned char>(in[i + 2]);
        out += b64[(v >> 18) & 63];
        out += b64[(v >> 12) & 63];
        out += i + 1 < in.size() ? b64[(v >> 6) & 63] : '=';
        out += i + 2 < in.size() ? b64[v & 63] : '=';
      }
      info["spec"]["cluster"]["certificate-authority-data"] = out;
    }
  }
  // Our environment, then the plugin's env (it wins), then KUBERNETES_EXEC_INFO.
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : plugin.env) env[k] = v;
  env["KUBERNETES_EXEC_INFO"] = info.dump();
  std::vector<std::string> env_strings, arg_strings{plugin.command};
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  for (const auto& a : plugin.args) arg_strings.push_back(a);
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  for (auto& s : arg_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return Internal(what + ": pipe: " + std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);  // never interactive
  // Its own process group, so a timeout stops whatever it started too.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, plugin.command.c_str(), &fa, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  if (rc != 0) {
    ::close(out[0]);
    return FailedPrecondition(what + ": cannot run it: " + std::strerror(rc) + hint);
  }
  constexpr size_t kMaxOutput = 1 << 20;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string text;
  char buf[4096];
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) continue;
    ssize_t n = ::read(out[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxOutput) break;
  }
  ::close(out[0]);
  const bool too_long = text.size() > kMaxOutput;
  if (timed_out || too_long) ::kill(-pid, SIGKILL);  // the group we made for it
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    const std::string limit = timeout >= std::chrono::seconds(1)
                                  ? std::to_string(timeout.count() / 1000) + " s"
                                  : std::to_string(timeout.count()) + " ms";
    return Status(StatusCode::kDeadlineExceeded,
                  what + " did not finish within " + limit +
                      " (it must not wait for input: stdin is /dev/null); killed it" + hint);
  }
  if (too_long) return InvalidArgument(what + ": more than 1 MiB of output");
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0)
    return FailedPrecondition(
        what + " failed (exit status " +
        std::to_string(WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus)) + ")" +
        hint);
  nlohmann::json cred = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!cred.is_object() || cred.value("kind", "") != "ExecCredential")
    return InvalidArgument(what + ": output is not an ExecCredential");
  if (cred.value("apiVersion", "") != plugin.api_version)
    return InvalidArgument(what + ": returned apiVersion \"" + cred.value("apiVersion", "") +
                           "\", want \"" + plugin.api_version + "\"");
  const nlohmann::json st = cred.value("status", nlohmann::json::object());
  if (!st.is_object()) return InvalidArgument(what + ": ExecCredential has no status");
  ExecCredential result;
  auto str = [&](const char* k) {
    auto it = st.find(k);
    return it != st.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  result.token = str("token");
  result.client_cert_pem = str("clientCertificateData");
  result.client_key_pem = str("clientKeyData");
  if (result.token.empty() && result.client_cert_pem.empty())
    return InvalidArgument(what + ": ExecCredential has neither a token nor a client certificate");
  if (result.client_cert_pem.empty() != result.client_key_pem.empty())
    return InvalidArgument(what + ": clientCertificateData and clientKeyData must come together");
  if (std::string exp = str("expirationTimestamp"); !exp.empty()) {
    result.expiry = ParseRfc3339(exp);
    if (!result.expiry)
      return InvalidArgument(what + ": expirationTimestamp \"" + exp + "\" is not RFC 3339");
  }
  return result;
}

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

StatusOr<Config> LoadKubeConfigList(const std::string& list, const std::string& context) {
  std::vector<std::string> files;
  for (size_t start = 0; start <= list.size();) {
    size_t colon = list.find(':', start);
    if (colon == std::string::npos) colon = list.size();
    std::string f = list.substr(start, colon - start);
    if (!f.empty() && std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
    start = colon + 1;
  }
  std::vector<std::string> present;
  for (const auto& f : files) {
    struct stat st {};
    if (::stat(f.c_str(), &st) == 0) present.push_back(f);
  }
  if (present.empty())
    return NotFound("kubeconfig: none of the files in KUBECONFIG exists: " + list);
  if (present.size() == 1) return LoadKubeConfigFile(present[0], context);
  const std::string label = "KUBECONFIG " + list;
  std::string where;
  try {
    YAML::Node merged(YAML::NodeType::Map);
    std::map<std::string, std::set<std::string>> seen;  // list -> names already merged
    for (const auto& f : present) {
      auto text = ReadFile(f);
      if (!text.ok()) return text.status().WithContext("kubeconfig");
      YAML::Node root = YAML::Load(*text);
      if (root.IsNull()) continue;  // an empty file, as kubectl allows
      if (!root.IsMap()) return InvalidArgument("kubeconfig " + f + ": top level is not a map");
      AbsolutizePaths(root, DirOf(f));
      if (!merged["current-context"] && root["current-context"] &&
          !Str(root, "current-context").empty())
        merged["current-context"] = Str(root, "current-context");
      for (const char* list_name : {"clusters", "contexts", "users"}) {
        YAML::Node items = root[list_name];
        if (!items || items.IsNull()) continue;
        if (!items.IsSequence())
          return InvalidArgument("kubeconfig " + f + ": " + list_name + ": not a list");
        for (const auto& item : items) {
          const std::string name = item["name"] ? item["name"].as<std::string>() : "";
          if (seen[list_name].insert(name).second) merged[list_name].push_back(item);
        }
      }
    }
    auto cfg = ParseRoot(merged, label, ".", context, &where);
    if (!cfg.ok()) return cfg.status().WithContext("kubeconfig " + label);
    return cfg;
  } catch (const FieldError& e) {
    return InvalidArgument("kubeconfig " + label + ": " + (where.empty() ? "" : where + ": ") +
                           "field \"" + e.field + "\": " + e.problem);
  } catch (const YAML::Exception& e) {
    return InvalidArgument("kubeconfig " + label + ": " + e.what());
  }
}

StatusOr<Config> LoadDefaultConfig(const std::string& kubeconfig, const std::string& context) {
  if (!kubeconfig.empty()) return LoadKubeConfigFile(kubeconfig, context);
  if (const char* env = std::getenv("KUBECONFIG"); env && *env)
    return LoadKubeConfigList(env, context);
  if (const char* host = std::getenv("KUBERNETES_SERVICE_HOST"); host && *host)
    return LoadInClusterConfig();
  const char* home = std::getenv("HOME");
  if (!home || !*home) return FailedPrecondition("no kubeconfig: KUBECONFIG and HOME are unset");
  return LoadKubeConfigFile(std::string(home) + "/.kube/config", context);
}

}  // namespace kubetrain::kube

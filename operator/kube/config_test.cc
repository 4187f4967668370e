#include "operator/kube/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

namespace kubetrain::kube {
namespace {

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kt-config-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    auto p = (dir_ / name).string();
    std::ofstream(p) << text;
    return p;
  }
  std::filesystem::path dir_;
};

constexpr char kTwoContexts[] = R"(apiVersion: v1
kind: Config
clusters:
- name: c1
  cluster:
    server: https://127.0.0.1:6443/
    certificate-authority-data: UEVNLUNB
- name: c2
  cluster:
    server: https://10.0.0.1
    certificate-authority: ca.pem
    insecure-skip-tls-verify: true
users:
- name: u1
  user:
    token: abc
- name: u2
  user:
    client-certificate: cert.pem
    client-key-data: S0VZ
- name: u3
  user:
    tokenFile: tok
contexts:
- name: one
  context: {cluster: c1, user: u1, namespace: ns1}
- name: two
  context: {cluster: c2, user: u2}
- name: three
  context: {cluster: c1, user: u3}
- name: broken
  context: {cluster: nope, user: u1}
current-context: one
)";

TEST_F(ConfigTest, CurrentContextGivesServerCaTokenAndNamespace) {
  auto path = Write("kc", kTwoContexts);
  auto cfg = LoadKubeConfigFile(path);
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->server, "https://127.0.0.1:6443");
  EXPECT_EQ(cfg->ca_pem, "PEM-CA");
  EXPECT_EQ(cfg->token, "abc");
  EXPECT_EQ(cfg->ns, "ns1");
  EXPECT_FALSE(cfg->insecure_skip_tls_verify);
}

TEST_F(ConfigTest, NamedContextReadsFilesRelativeToKubeconfig) {
  Write("ca.pem", "CAFILE");
  Write("cert.pem", "CERT");
  auto cfg = LoadKubeConfigFile(Write("kc", kTwoContexts), "two");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->ca_pem, "CAFILE");
  EXPECT_EQ(cfg->client_cert_pem, "CERT");
  EXPECT_EQ(cfg->client_key_pem, "KEY");
  EXPECT_TRUE(cfg->insecure_skip_tls_verify);
  EXPECT_EQ(cfg->ns, "default");
}

TEST_F(ConfigTest, MissingFileErrorNamesFileFieldAndContext) {
  auto path = Write("kc", kTwoContexts);
  auto cfg = LoadKubeConfigFile(path, "two");  // ca.pem does not exist
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.status().code(), StatusCode::kNotFound);
  const std::string m = cfg.status().message();
  EXPECT_NE(m.find(path), std::string::npos) << m;
  EXPECT_NE(m.find("context \"two\""), std::string::npos) << m;
  EXPECT_NE(m.find("certificate-authority"), std::string::npos) << m;
  EXPECT_NE(m.find("ca.pem"), std::string::npos) << m;
}

TEST_F(ConfigTest, TokenFileIsRecordedForRereading) {
  auto tok = Write("tok", "t0k\n");
  auto cfg = LoadKubeConfigFile(Write("kc", kTwoContexts), "three");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->token_file, tok);
  EXPECT_TRUE(cfg->token.empty());
}

TEST_F(ConfigTest, UnknownClusterNamesContext) {
  auto cfg = LoadKubeConfigFile(Write("kc", kTwoContexts), "broken");
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find("context \"broken\""), std::string::npos);
  EXPECT_NE(cfg.status().message().find("cluster \"nope\" not found"), std::string::npos)
      << cfg.status().message();
}

TEST_F(ConfigTest, UnknownContextIsNotFound) {
  auto cfg = LoadKubeConfigFile(Write("kc", kTwoContexts), "zzz");
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.status().code(), StatusCode::kNotFound);
}

TEST_F(ConfigTest, MalformedYamlAndBadBase64AreInvalidArgument) {
  auto a = LoadKubeConfigFile(Write("a", "clusters: [unclosed"));
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  std::string bad = kTwoContexts;
  bad.replace(bad.find("UEVNLUNB"), 8, "a$b*");
  auto b = ParseKubeConfig(bad, "/x/kc");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("certificate-authority-data"), std::string::npos)
      << b.status().message();
}

TEST_F(ConfigTest, WrongFieldTypesNameFieldAndContext) {
  std::string bad_bool = kTwoContexts;
  bad_bool.replace(bad_bool.find("insecure-skip-tls-verify: true"), 30,
                   "insecure-skip-tls-verify: maybe");
  Write("ca.pem", "CA");
  Write("cert.pem", "CERT");
  auto a = ParseKubeConfig(bad_bool, "/x/kc", "two");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(
      a.status().message().find(
          "kubeconfig /x/kc: context \"two\": cluster \"c2\": field \"insecure-skip-tls-verify\""),
      std::string::npos)
      << a.status().message();

  std::string bad_token = kTwoContexts;
  bad_token.replace(bad_token.find("token: abc"), 10, "token: [a, b]");
  auto b = ParseKubeConfig(bad_token, "/x/kc");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(
      b.status().message().find("context \"one\": user \"u1\": field \"token\": expected a string"),
      std::string::npos)
      << b.status().message();
}

TEST_F(ConfigTest, MissingServerIsNamed) {
  std::string no_server = kTwoContexts;
  no_server.replace(no_server.find("server: https://127.0.0.1:6443/"), 31, "foo: bar");
  auto c = ParseKubeConfig(no_server, "/x/kc");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("context \"one\": cluster \"c1\": field \"server\" is empty"),
            std::string::npos)
      << c.status().message();
}

TEST_F(ConfigTest, MissingKubeconfigFileIsNotFound) {
  auto cfg = LoadKubeConfigFile((dir_ / "nope").string());
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.status().code(), StatusCode::kNotFound);
  EXPECT_NE(cfg.status().message().find("nope"), std::string::npos);
}

TEST_F(ConfigTest, InClusterReadsServiceAccountMount) {
  Write("token", "sa-token");
  Write("ca.crt", "CA");
  Write("namespace", "team-a\n");
  ::setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  auto cfg = LoadInClusterConfig(dir_.string());
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  ::unsetenv("KUBERNETES_SERVICE_PORT");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->server, "https://10.96.0.1:443");
  EXPECT_EQ(cfg->ca_pem, "CA");
  EXPECT_EQ(cfg->ns, "team-a");
  EXPECT_EQ(cfg->token_file, (dir_ / "token").string());
}

TEST_F(ConfigTest, InClusterWithoutEnvIsFailedPrecondition) {
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  auto cfg = LoadInClusterConfig(dir_.string());
  EXPECT_EQ(cfg.status().code(), StatusCode::kFailedPrecondition);
}

// Exec credential plugins used to be silently ignored (no
// token: every request 401, surfacing as "cache not synced").
std::string ExecKubeconfig(const std::string& command, const std::string& api_version,
                           const std::string& extra = "") {
  return R"(apiVersion: v1
kind: Config
current-context: c
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
users:
- name: u
  user:
    exec:
      apiVersion: )" +
         api_version + R"(
      command: )" +
         command + R"(
      args: [--cluster, prod]
      env: [{name: PLUGIN_GREETING, value: hello}]
      installHint: "install it with: apt-get install the-plugin"
)" + extra;
}

TEST_F(ConfigTest, ExecPluginTokenIsUsedAndPluginSeesArgsEnvAndExecInfo) {
  Write("plugin.sh", R"(#!/bin/sh
echo "$1 $2 $PLUGIN_GREETING $KUBERNETES_EXEC_INFO" > "$(dirname "$0")/seen"
echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"from-plugin","expirationTimestamp":"2030-01-02T03:04:05Z"}}'
)");
  std::filesystem::permissions(dir_ / "plugin.sh", std::filesystem::perms::owner_all);
  auto cfg = LoadKubeConfigFile(
      Write("config", ExecKubeconfig("./plugin.sh", "client.authentication.k8s.io/v1")));
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->token, "from-plugin");
  ASSERT_TRUE(cfg->exec.has_value());
  ASSERT_TRUE(cfg->exec_expiry.has_value());
  EXPECT_EQ(std::chrono::system_clock::to_time_t(*cfg->exec_expiry), 1893553445);
  std::ifstream seen(dir_ / "seen");
  std::string line;
  std::getline(seen, line);
  EXPECT_NE(line.find("--cluster prod hello "), std::string::npos) << line;
  EXPECT_NE(line.find(R"("kind":"ExecCredential")"), std::string::npos) << line;
  EXPECT_NE(line.find(R"("interactive":false)"), std::string::npos) << line;
}

TEST_F(ConfigTest, FailingOrMissingExecPluginIsAClearErrorWithTheInstallHint) {
  Write("fail.sh", "#!/bin/sh\necho 'token expired, run login' >&2\nexit 3\n");
  std::filesystem::permissions(dir_ / "fail.sh", std::filesystem::perms::owner_all);
  auto failing = LoadKubeConfigFile(
      Write("c1", ExecKubeconfig("./fail.sh", "client.authentication.k8s.io/v1")));
  ASSERT_FALSE(failing.ok());
  EXPECT_NE(failing.status().message().find("exit status 3"), std::string::npos)
      << failing.status().ToString();
  auto missing = LoadKubeConfigFile(
      Write("c2", ExecKubeconfig("no-such-plugin-kt", "client.authentication.k8s.io/v1")));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("apt-get install the-plugin"), std::string::npos)
      << missing.status().ToString();
  auto old_api = LoadKubeConfigFile(
      Write("c3", ExecKubeconfig("./fail.sh", "client.authentication.k8s.io/v1alpha1")));
  ASSERT_FALSE(old_api.ok());
  EXPECT_NE(old_api.status().message().find("v1alpha1\" is not supported"), std::string::npos)
      << old_api.status().ToString();
  auto provider = LoadKubeConfigFile(Write("c4", R"(current-context: c
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
users: [{name: u, user: {auth-provider: {name: gcp}}}]
)"));
  ASSERT_FALSE(provider.ok());
  EXPECT_NE(provider.status().message().find("auth-provider"), std::string::npos);
}

// A plugin that waits for a login that never comes (or hangs) held the client's token
// lock, and with it every request, for ever: it is killed, with what it started, at a
// deadline.
bool Gone(const std::string& pid) {
  std::ifstream stat("/proc/" + pid + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && line.size() > paren + 2 && line[paren + 2] == 'Z';
}

TEST_F(ConfigTest, HungExecPluginIsKilledAtItsDeadline) {
  Write("hang.sh", R"(#!/bin/sh
sleep 1000 &
echo $! > "$(dirname "$0")/child.pid"
echo $$ > "$(dirname "$0")/plugin.pid"
exec sleep 1000
)");
  std::filesystem::permissions(dir_ / "hang.sh", std::filesystem::perms::owner_all);
  ExecPlugin plugin{"client.authentication.k8s.io/v1",
                    (dir_ / "hang.sh").string(),
                    {},
                    {},
                    "run the-plugin login",
                    false};
  Config cfg;
  auto cred = RunExecPlugin(plugin, cfg, std::chrono::milliseconds(300));
  ASSERT_FALSE(cred.ok());
  EXPECT_EQ(cred.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(cred.status().message().find("did not finish within 300 ms"), std::string::npos)
      << cred.status().ToString();
  EXPECT_NE(cred.status().message().find("run the-plugin login"), std::string::npos);
  std::string plugin_pid, child_pid;
  std::ifstream(dir_ / "plugin.pid") >> plugin_pid;
  std::ifstream(dir_ / "child.pid") >> child_pid;
  ASSERT_FALSE(plugin_pid.empty());
  ASSERT_FALSE(child_pid.empty());
  EXPECT_TRUE(Gone(plugin_pid));
  // The background child was killed with the group; its new parent reaps it in its time.
  for (int i = 0; i < 500 && !Gone(child_pid); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(Gone(child_pid));
}

// Only the first KUBECONFIG entry used to be read.
TEST_F(ConfigTest, KubeconfigListIsMergedAsKubectlDoes) {
  std::filesystem::create_directories(dir_ / "a");
  std::filesystem::create_directories(dir_ / "b");
  Write("a/ca.pem", "CA-OF-A");
  Write("b/ca.pem", "CA-OF-B");
  const std::string a = Write("a/config", R"(clusters:
- {name: prod, cluster: {server: "https://prod:6443", certificate-authority: ca.pem}}
users:
- {name: me, user: {token: token-from-a}}
)");
  const std::string b = Write("b/config", R"(current-context: work
clusters:
- {name: prod, cluster: {server: "https://shadowed:6443"}}
- {name: dev, cluster: {server: "https://dev:6443", certificate-authority: ca.pem}}
contexts:
- {name: work, context: {cluster: prod, user: me, namespace: team}}
- {name: play, context: {cluster: dev, user: me}}
users:
- {name: me, user: {token: shadowed}}
)");
  const std::string list = (dir_ / "missing").string() + ":" + a + ":" + b;
  ::setenv("KUBECONFIG", list.c_str(), 1);
  auto cfg = LoadDefaultConfig();
  auto play = LoadDefaultConfig("", "play");
  ::unsetenv("KUBECONFIG");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->server, "https://prod:6443");  // first file's cluster wins
  EXPECT_EQ(cfg->ca_pem, "CA-OF-A");            // relative to its own file
  EXPECT_EQ(cfg->token, "token-from-a");
  EXPECT_EQ(cfg->ns, "team");  // current-context from the file that sets it
  ASSERT_TRUE(play.ok()) << play.status().ToString();
  EXPECT_EQ(play->server, "https://dev:6443");
  EXPECT_EQ(play->ca_pem, "CA-OF-B");
}

TEST_F(ConfigTest, KubeconfigListWithNoExistingFileIsNotFound) {
  const std::string list = (dir_ / "x").string() + ":" + (dir_ / "y").string();
  ::setenv("KUBECONFIG", list.c_str(), 1);
  auto cfg = LoadDefaultConfig();
  ::unsetenv("KUBECONFIG");
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kubetrain::kube

#include "operator/kube/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

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

}  // namespace
}  // namespace kubetrain::kube

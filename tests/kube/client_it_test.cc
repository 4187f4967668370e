// kube::Client against the real apiserver: verbs, errors, TLS and auth.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "tests/kube/it_util.h"

namespace kubetrain::testing {
namespace {

class ClientIT : public ::testing::Test {
 protected:
  void SetUp() override {
    client_ = NewClient(ClusterConfig());
    ASSERT_NE(client_, nullptr);
    ns_ = std::make_unique<ScopedNamespace>(client_.get());
  }
  void TearDown() override { ns_.reset(); }
  const std::string& ns() { return ns_->name(); }
  std::unique_ptr<kube::Client> client_;
  std::unique_ptr<ScopedNamespace> ns_;
};

TEST_F(ClientIT, ConfigMapCrudRoundTrip) {
  auto created = client_->Create(kube::kConfigMaps, ns(), ConfigMap("cm", "one"));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_FALSE((*created)["metadata"].value("uid", "").empty());
  // A write's answer is parsed without managedFields; a Get keeps them.
  EXPECT_FALSE((*created)["metadata"].contains("managedFields"));

  auto got = client_->Get(kube::kConfigMaps, ns(), "cm");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ((*got)["data"]["k"], "one");
  EXPECT_TRUE((*got)["metadata"].contains("managedFields"));

  // A PUT of an object without managedFields keeps the server's.
  json without = *got;
  without["metadata"].erase("managedFields");
  without["data"]["k"] = "two";
  auto updated = client_->Update(kube::kConfigMaps, ns(), without);
  ASSERT_TRUE(updated.ok()) << updated.status().ToString();
  EXPECT_EQ((*updated)["data"]["k"], "two");
  EXPECT_FALSE((*updated)["metadata"].contains("managedFields"));
  auto reread = client_->Get(kube::kConfigMaps, ns(), "cm");
  ASSERT_TRUE(reread.ok()) << reread.status().ToString();
  EXPECT_TRUE((*reread)["metadata"].contains("managedFields")) << reread->dump();

  auto again = client_->Create(kube::kConfigMaps, ns(), ConfigMap("cm"));
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists) << again.status().ToString();

  ASSERT_TRUE(client_->Delete(kube::kConfigMaps, ns(), "cm").ok());
  auto gone = client_->Get(kube::kConfigMaps, ns(), "cm");
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);
  EXPECT_NE(gone.status().message().find("NotFound (404)"), std::string::npos)
      << gone.status().message();
}

TEST_F(ClientIT, StaleUpdateIsConflict) {
  auto created = client_->Create(kube::kConfigMaps, ns(), ConfigMap("cm"));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  json first = *created, second = *created;
  first["data"]["k"] = "a";
  ASSERT_TRUE(client_->Update(kube::kConfigMaps, ns(), first).ok());
  second["data"]["k"] = "b";  // still carries the old resourceVersion
  auto stale = client_->Update(kube::kConfigMaps, ns(), second);
  EXPECT_EQ(stale.status().code(), StatusCode::kConflict) << stale.status().ToString();
}

TEST_F(ClientIT, PatchMergeJsonAndServerSideApply) {
  ASSERT_TRUE(client_->Create(kube::kConfigMaps, ns(), ConfigMap("cm", "0")).ok());
  auto merged = client_->Patch(kube::kConfigMaps, ns(), "cm", kube::PatchType::kMerge,
                               {{"data", {{"m", "1"}}}});
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  EXPECT_EQ((*merged)["data"]["m"], "1");
  EXPECT_EQ((*merged)["data"]["k"], "0");

  auto jp = client_->Patch(kube::kConfigMaps, ns(), "cm", kube::PatchType::kJson,
                           json::array({{{"op", "replace"}, {"path", "/data/k"}, {"value", "j"}}}));
  ASSERT_TRUE(jp.ok()) << jp.status().ToString();
  EXPECT_EQ((*jp)["data"]["k"], "j");

  json intent = ConfigMap("cm", "applied");
  intent["metadata"].erase("labels");
  auto applied = client_->Apply(kube::kConfigMaps, ns(), intent, "kt-test-a");
  // "k" was last written by a PATCH from the default manager: a conflict
  // unless forced.
  EXPECT_EQ(applied.status().code(), StatusCode::kConflict) << applied.status().ToString();
  applied = client_->Apply(kube::kConfigMaps, ns(), intent, "kt-test-a", /*force=*/true);
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  EXPECT_EQ((*applied)["data"]["k"], "applied");

  auto no_manager = client_->Patch(kube::kConfigMaps, ns(), "cm", kube::PatchType::kApply, intent);
  EXPECT_EQ(no_manager.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ClientIT, DeletePreconditionsAndPropagation) {
  auto created = client_->Create(kube::kConfigMaps, ns(), ConfigMap("cm"));
  ASSERT_TRUE(created.ok());
  kube::DeleteOptions wrong;
  wrong.precondition_uid = "not-the-uid";
  EXPECT_EQ(client_->Delete(kube::kConfigMaps, ns(), "cm", wrong).code(), StatusCode::kConflict);
  kube::DeleteOptions right;
  right.precondition_uid = (*created)["metadata"]["uid"];
  right.propagation_policy = "Background";
  EXPECT_TRUE(client_->Delete(kube::kConfigMaps, ns(), "cm", right).ok());
  EXPECT_EQ(client_->Delete(kube::kConfigMaps, ns(), "cm").code(), StatusCode::kNotFound);
}

TEST_F(ClientIT, InvalidObjectIsInvalidArgumentWithReason) {
  json bad = ConfigMap("Not_A_Valid_Name");
  auto r = client_->Create(kube::kConfigMaps, ns(), bad);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("Invalid (422)"), std::string::npos) << r.status().message();
}

TEST_F(ClientIT, PodCreateAndLabelSelectedList) {
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", "p"}, {"labels", {{"app", "kt"}}}}},
              {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
  ASSERT_TRUE(client_->Create(kube::kPods, ns(), pod).ok());
  kube::ListOptions sel;
  sel.label_selector = "app=kt";
  auto l = client_->List(kube::kPods, ns(), sel);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ((*l)["items"].size(), 1u);
  sel.label_selector = "app=other";
  EXPECT_EQ((*client_->List(kube::kPods, ns(), sel))["items"].size(), 0u);
  kube::ListOptions field;
  field.field_selector = "metadata.name=p";
  EXPECT_EQ((*client_->List(kube::kPods, ns(), field))["items"].size(), 1u);
}

TEST_F(ClientIT, PaginationOverMoreThan500Objects) {
  constexpr int kCount = 520;
  for (int i = 0; i < kCount; ++i) {
    auto r = client_->Create(kube::kConfigMaps, ns(),
                             ConfigMap("cm-" + std::to_string(i), "v", {{"page", "yes"}}));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  kube::ListOptions opts;
  opts.label_selector = "page=yes";
  opts.limit = 200;
  auto page = client_->List(kube::kConfigMaps, ns(), opts);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_EQ((*page)["items"].size(), 200u);
  EXPECT_FALSE((*page)["metadata"].value("continue", "").empty());

  auto all = client_->ListAll(kube::kConfigMaps, ns(), opts);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ((*all)["items"].size(), static_cast<size_t>(kCount));
  std::set<std::string> names;
  for (const auto& it : (*all)["items"]) names.insert(it["metadata"]["name"].get<std::string>());
  EXPECT_EQ(names.size(), static_cast<size_t>(kCount));  // no duplicates across pages
}

TEST_F(ClientIT, CustomResourceCrudWithStatusSubresource) {
  const std::string group = "it.kubetrain.io";
  const std::string plural = RandomName("widgets").erase(7, 1);  // "widgets123456"
  const std::string crd_name = plural + "." + group;
  json crd = {
      {"apiVersion", "apiextensions.k8s.io/v1"},
      {"kind", "CustomResourceDefinition"},
      {"metadata", {{"name", crd_name}}},
      {"spec",
       {{"group", group},
        {"scope", "Namespaced"},
        {"names",
         {{"plural", plural},
          {"singular", plural.substr(0, plural.size() - 1)},
          {"kind", "W" + plural}}},
        {"versions",
         {{{"name", "v1"},
           {"served", true},
           {"storage", true},
           {"subresources", {{"status", json::object()}}},
           {"schema",
            {{"openAPIV3Schema",
              {{"type", "object"},
               {"properties",
                {{"spec", {{"type", "object"}, {"properties", {{"size", {{"type", "integer"}}}}}}},
                 {"status",
                  {{"type", "object"},
                   {"properties", {{"ready", {{"type", "boolean"}}}}}}}}}}}}}}}}}}};
  auto made = client_->Create(kube::kCustomResourceDefinitions, "", crd);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  struct Cleanup {
    kube::Client* c;
    std::string n;
    ~Cleanup() { (void)c->Delete(kube::kCustomResourceDefinitions, "", n); }
  } cleanup{client_.get(), crd_name};
  ASSERT_TRUE(Eventually([&] {
    auto c = client_->Get(kube::kCustomResourceDefinitions, "", crd_name);
    if (!c.ok()) return false;
    for (const auto& cond : (*c)["status"].value("conditions", json::array()))
      if (cond.value("type", "") == "Established" && cond.value("status", "") == "True")
        return true;
    return false;
  }));
  kube::ResourceRef widgets{group, "v1", plural, true};
  json w = {{"apiVersion", group + "/v1"},
            {"kind", "W" + plural},
            {"metadata", {{"name", "w1"}}},
            {"spec", {{"size", 3}}}};
  // Discovery may lag behind Established for a moment.
  StatusOr<json> created = NotFound("not tried");
  ASSERT_TRUE(Eventually([&] {
    created = client_->Create(widgets, ns(), w);
    return created.ok();
  })) << created.status().ToString();
  json obj = *created;
  obj["status"] = {{"ready", true}};
  auto st = client_->UpdateStatus(widgets, ns(), obj);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ((*st)["status"]["ready"], true);
  // A plain update does not touch status (the subresource owns it).
  json spec_change = *st;
  spec_change["spec"]["size"] = 5;
  spec_change["status"]["ready"] = false;
  auto up = client_->Update(widgets, ns(), spec_change);
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  EXPECT_EQ((*up)["spec"]["size"], 5);
  EXPECT_EQ((*up)["status"]["ready"], true);
  kube::PatchOptions status_patch;
  status_patch.subresource = "status";
  auto patched = client_->Patch(widgets, ns(), "w1", kube::PatchType::kMerge,
                                {{"status", {{"ready", false}}}}, status_patch);
  ASSERT_TRUE(patched.ok()) << patched.status().ToString();
  EXPECT_EQ((*patched)["status"]["ready"], false);
  auto listed = client_->List(widgets, ns());
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ((*listed)["items"].size(), 1u);
  EXPECT_TRUE(client_->Delete(widgets, ns(), "w1").ok());
  EXPECT_EQ(client_->Get(widgets, ns(), "w1").status().code(), StatusCode::kNotFound);
}

TEST(ClientAuthIT, InvalidTokenIsUnauthenticated) {
  kube::Config cfg = ClusterConfig();
  cfg.token = "definitely-not-a-valid-token";
  cfg.token_file.clear();
  auto client = NewClient(cfg);
  auto r = client->Get(kube::kNamespaces, "", "default");
  EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated) << r.status().ToString();
  EXPECT_NE(r.status().message().find("Unauthorized (401)"), std::string::npos);
}

TEST(ClientAuthIT, WrongCaFailsWithClearTlsError) {
  auto dir = std::filesystem::temp_directory_path() / RandomName("kt-wrong-ca");
  std::filesystem::create_directories(dir);
  std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=wrong-ca -keyout " +
      (dir / "k").string() + " -out " + (dir / "c").string() + " 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  kube::Config cfg = ClusterConfig();
  auto pem = kube::ReadFile((dir / "c").string());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(pem.ok());
  cfg.ca_pem = *pem;
  cfg.max_retries = 0;
  auto client = NewClient(cfg);
  auto r = client->Get(kube::kNamespaces, "", "default");
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_NE(r.status().message().find("not trusted by the configured CA"), std::string::npos)
      << r.status().message();
}

// Mints a client certificate from the test cluster's CA (the apiserver trusts
// it for client auth) and connects through a kubeconfig that names the files.
TEST(ClientAuthIT, ClientCertificateFromKubeconfigFilesAuthenticates) {
  const char* cluster_dir = std::getenv("KUBETRAIN_TEST_CLUSTER_DIR");
  ASSERT_NE(cluster_dir, nullptr) << "needs KUBETRAIN_TEST_CLUSTER_DIR";
  const std::string pki = std::string(cluster_dir) + "/pki";
  auto dir = std::filesystem::temp_directory_path() / RandomName("kt-client-cert");
  std::filesystem::create_directories(dir);
  const std::string key = (dir / "client.key").string(), csr = (dir / "client.csr").string(),
                    crt = (dir / "client.crt").string();
  std::string cmd =
      "openssl req -newkey rsa:2048 -nodes -subj '/O=system:masters/CN=kt-cert-user' "
      "-keyout " +
      key + " -out " + csr + " 2>/dev/null && openssl x509 -req -in " + csr + " -CA " + pki +
      "/ca.crt -CAkey " + pki + "/ca.key -CAcreateserial " + "-CAserial " +
      (dir / "ca.srl").string() + " -days 1 -out " + crt + " 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  kube::Config base = ClusterConfig();
  std::string kubeconfig =
      "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n"
      "    server: " +
      base.server + "\n    certificate-authority: " + pki +
      "/ca.crt\nusers:\n- name: u\n  user:\n    client-certificate: client.crt\n"
      "    client-key: client.key\ncontexts:\n- name: x\n  context:\n"
      "    cluster: c\n    user: u\n    namespace: kube-system\n"
      "current-context: x\n";
  const std::string kc_path = (dir / "kubeconfig").string();
  { std::ofstream(kc_path) << kubeconfig; }
  auto cfg = kube::LoadKubeConfigFile(kc_path);
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_TRUE(cfg->token.empty());
  EXPECT_EQ(cfg->ns, "kube-system");
  auto client = NewClient(*cfg);
  auto r = client->Get(kube::kNamespaces, "", cfg->ns);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
}

// An exec plugin that returns a client certificate used to run on
// every request (the cache keyed on a token it never got), under the token
// lock, and the certificates of later runs were ignored: the one from the
// kubeconfig's load was used for ever. Here the load gets an untrusted
// certificate that expires in 5 s; the client must run the plugin once more,
// use the trusted certificate it then gets, and not run it again.
TEST(ClientAuthIT, ExecPluginCertificateIsUsedAndCachedUntilItExpires) {
  const char* cluster_dir = std::getenv("KUBETRAIN_TEST_CLUSTER_DIR");
  ASSERT_NE(cluster_dir, nullptr) << "needs KUBETRAIN_TEST_CLUSTER_DIR";
  const std::string pki = std::string(cluster_dir) + "/pki";
  auto dir = std::filesystem::temp_directory_path() / RandomName("kt-exec-cert");
  std::filesystem::create_directories(dir);
  const std::string d = dir.string();
  std::string cmd =
      "cd " + d +
      " && openssl req -newkey rsa:2048 -nodes -subj '/O=system:masters/CN=kt-exec-user' "
      "-keyout good.key -out good.csr 2>/dev/null && openssl x509 -req -in good.csr -CA " +
      pki + "/ca.crt -CAkey " + pki +
      "/ca.key -CAcreateserial -CAserial ca.srl -days 1 -out good.crt 2>/dev/null"
      " && openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=untrusted "
      "-keyout bad.key -out bad.crt 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto credential = [&](const std::string& which, const std::string& expiry) {
    json c = {{"apiVersion", "client.authentication.k8s.io/v1"},
              {"kind", "ExecCredential"},
              {"status",
               {{"clientCertificateData", *kube::ReadFile(d + "/" + which + ".crt")},
                {"clientKeyData", *kube::ReadFile(d + "/" + which + ".key")},
                {"expirationTimestamp", expiry}}}};
    std::ofstream(d + "/" + which + ".json") << c.dump();
  };
  char soon[32];
  const std::time_t t = std::time(nullptr) + 5;
  std::strftime(soon, sizeof soon, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  credential("bad", soon);
  credential("good", "2099-01-01T00:00:00Z");
  // Run 1 (the load) answers the untrusted certificate, every later run the good one.
  std::ofstream(d + "/plugin.sh") << "#!/bin/sh\ncd \"$(dirname \"$0\")\"\n"
                                     "echo run >> runs\n"
                                     "if [ $(wc -l < runs) -eq 1 ]; then cat bad.json; "
                                     "else cat good.json; fi\n";
  std::filesystem::permissions(d + "/plugin.sh", std::filesystem::perms::owner_all);
  kube::Config base = ClusterConfig();
  std::ofstream(d + "/kubeconfig")
      << "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: "
      << base.server << "\n    certificate-authority: " << pki
      << "/ca.crt\nusers:\n- name: u\n  user:\n    exec:\n"
         "      apiVersion: client.authentication.k8s.io/v1\n      command: ./plugin.sh\n"
         "      interactiveMode: Never\ncontexts:\n- name: x\n  context:\n"
         "    cluster: c\n    user: u\ncurrent-context: x\n";
  auto cfg = kube::LoadKubeConfigFile(d + "/kubeconfig");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  cfg->qps = 0;
  cfg->max_retries = 0;
  auto client = NewClient(*cfg);
  for (int i = 0; i < 20; ++i) {
    auto r = client->Get(kube::kNamespaces, "", "default");
    ASSERT_TRUE(r.ok()) << "request " << i << ": " << r.status().ToString();
  }
  auto runs = kube::ReadFile(d + "/runs");
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(std::count(runs->begin(), runs->end(), '\n'), 2)
      << "the load, then one refresh of the expiring certificate";
}

TEST(ClientAuthIT, InsecureSkipVerifyConnectsWithoutCa) {
  kube::Config cfg = ClusterConfig();
  cfg.ca_pem.clear();
  cfg.insecure_skip_tls_verify = true;
  auto client = NewClient(cfg);
  EXPECT_TRUE(client->Get(kube::kNamespaces, "", "default").ok());
}

}  // namespace
}  // namespace kubetrain::testing

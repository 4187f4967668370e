// Two processes contend for one Lease on the real apiserver.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "tests/kube/it_util.h"
#include "tests/kube/tcp_proxy.h"

extern char** environ;

namespace kubetrain::testing {
namespace {

using namespace std::chrono_literals;

constexpr auto kLease = 4000ms;
constexpr auto kRenew = 3000ms;
constexpr auto kRetry = 500ms;

// A contender process; killed (by its PID) if still running at the end.
class Contender {
 public:
  // `server`: the apiserver URL to use instead of the kubeconfig's; `out`: a
  // file for the contender's stdout (else inherited).
  Contender(const std::string& ns, const std::string& lease, const std::string& id,
            const std::string& server = "", const std::string& out = "")
      : id_(id) {
    std::vector<std::string> args = {KUBE_LEASE_CONTENDER,
                                     ns,
                                     lease,
                                     id,
                                     std::to_string(kLease.count()),
                                     std::to_string(kRenew.count()),
                                     std::to_string(kRetry.count())};
    if (!server.empty()) args.push_back(server);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (!out.empty())
      posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    EXPECT_EQ(posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
  }
  ~Contender() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  void Signal(int sig) { ::kill(pid_, sig); }
  // Waits for exit; returns the exit status or -1 on timeout.
  int Wait(std::chrono::milliseconds timeout) {
    int status = 0;
    bool done = Eventually(
        [&] {
          return exited_ || ::waitpid(pid_, &status, WNOHANG) == pid_ ? (exited_ = true) : false;
        },
        timeout);
    if (!done) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  const std::string& id() const { return id_; }

 private:
  std::string id_;
  pid_t pid_ = -1;
  bool exited_ = false;
};

std::string Holder(kube::Client* c, const std::string& ns, const std::string& lease) {
  auto l = c->Get(kube::kLeases, ns, lease);
  if (!l.ok()) return "";
  return (*l)["spec"].value("holderIdentity", "");
}

class LeaseIT : public ::testing::Test {
 protected:
  void SetUp() override {
    client_ = NewClient(ClusterConfig());
    ns_ = std::make_unique<ScopedNamespace>(client_.get());
    a_ = std::make_unique<Contender>(ns_->name(), "lock", "alpha");
    b_ = std::make_unique<Contender>(ns_->name(), "lock", "beta");
    ASSERT_TRUE(Eventually([&] {
      leader_ = Holder(client_.get(), ns_->name(), "lock");
      return !leader_.empty();
    }));
  }
  Contender* ByName(const std::string& id) { return id == "alpha" ? a_.get() : b_.get(); }
  std::string Other(const std::string& id) { return id == "alpha" ? "beta" : "alpha"; }

  std::unique_ptr<kube::Client> client_;
  std::unique_ptr<ScopedNamespace> ns_;
  std::unique_ptr<Contender> a_, b_;
  std::string leader_;
};

TEST_F(LeaseIT, SigkillOfLeaderHandsOverWithinLeaseDurationPlusRetry) {
  // Wait until the leader has renewed twice: both contenders are in steady state.
  std::set<std::string> renewals;
  ASSERT_TRUE(Eventually([&] {
    auto l = client_->Get(kube::kLeases, ns_->name(), "lock");
    if (l.ok()) renewals.insert((*l)["spec"].value("renewTime", ""));
    return renewals.size() >= 3;
  }));
  ASSERT_EQ(Holder(client_.get(), ns_->name(), "lock"), leader_);
  auto killed_at = std::chrono::steady_clock::now();
  ByName(leader_)->Signal(SIGKILL);
  const std::string standby = Other(leader_);
  // The standby waits out the lease as it last saw it change: at most
  // lease + retry after the last renewal, plus one retry tick to notice.
  ASSERT_TRUE(Eventually([&] { return Holder(client_.get(), ns_->name(), "lock") == standby; },
                         kLease + 2 * kRetry + 5000ms));
  auto took = std::chrono::steady_clock::now() - killed_at;
  std::printf(
      "takeover after SIGKILL: %lld ms (lease %lld ms, retry %lld ms)\n",
      static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()),
      static_cast<long long>(kLease.count()), static_cast<long long>(kRetry.count()));
  // 1 s of slack for the GET + PUT of the takeover on a loaded CI machine.
  EXPECT_LE(took, kLease + 2 * kRetry + 1000ms);
  // And not before the lease could have expired: no split brain.
  EXPECT_GE(took, kLease - 2 * kRetry);
}

TEST_F(LeaseIT, SigtermOfLeaderReleasesAndStandbyTakesOverAtOnce) {
  auto stopped_at = std::chrono::steady_clock::now();
  ByName(leader_)->Signal(SIGTERM);
  EXPECT_EQ(ByName(leader_)->Wait(10s), 0);  // graceful exit
  const std::string standby = Other(leader_);
  ASSERT_TRUE(
      Eventually([&] { return Holder(client_.get(), ns_->name(), "lock") == standby; }, 10s));
  auto took = std::chrono::steady_clock::now() - stopped_at;
  std::printf(
      "takeover after SIGTERM: %lld ms\n",
      static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
  EXPECT_LT(took, kLease);  // well before the lease would have expired
}

// "<WHAT> <id> <monotonic ms>" from a contender's output, or -1.
long long Stamp(const std::string& file, const std::string& what) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string w, id;
    long long ms = -1;
    if (words >> w >> id >> ms && w == what) return ms;
  }
  return -1;
}

// A hanging renew, with the elector client the operator ships: the leader's
// connection to the apiserver stalls (a TCP proxy stops forwarding, the
// connection stays open). The leader must stop leading before the standby
// acquires the lease: never two leaders. Before the fix the renew call hung
// on the shared client (60 s timeout, retries) and the deadline was checked
// only after it returned.
TEST(LeaseStallIT, StalledLeaderConnectionStopsLeadingBeforeTheStandbyAcquires) {
  auto client = NewClient(ClusterConfig());
  ScopedNamespace ns(client.get());
  TcpProxy proxy(ServerPort(ClusterConfig()));
  const std::string via = "https://127.0.0.1:" + std::to_string(proxy.port());
  char dir_template[] = "/tmp/kt-lease-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template, out_a = dir + "/alpha", out_b = dir + "/beta";
  Contender alpha(ns.name(), "lock", "alpha", via, out_a);
  ASSERT_TRUE(Eventually([&] { return Holder(client.get(), ns.name(), "lock") == "alpha"; }));
  Contender beta(ns.name(), "lock", "beta", "", out_b);
  // Let the standby observe a few renewals first.
  std::set<std::string> renewals;
  ASSERT_TRUE(Eventually([&] {
    auto l = client->Get(kube::kLeases, ns.name(), "lock");
    if (l.ok()) renewals.insert((*l)["spec"].value("renewTime", ""));
    return renewals.size() >= 3;
  }));
  proxy.SetStalled(true);
  ASSERT_TRUE(
      Eventually([&] { return Holder(client.get(), ns.name(), "lock") == "beta"; }, kLease + 10s));
  ASSERT_TRUE(Eventually([&] { return Stamp(out_b, "LEADING") >= 0; }, 5s));
  // alpha must already have stopped; give its output a moment to be flushed.
  (void)Eventually([&] { return Stamp(out_a, "STOPPED") >= 0; }, 2s);
  const long long stopped = Stamp(out_a, "STOPPED"), leading = Stamp(out_b, "LEADING");
  std::printf("stalled leader stopped at %lld ms, standby leading at %lld ms: gap %lld ms\n",
              stopped, leading, leading - stopped);
  ASSERT_GE(stopped, 0) << "the stalled leader never stopped leading";
  EXPECT_LT(stopped, leading) << "two leaders at once";
  proxy.SetStalled(false);
  std::remove(out_a.c_str());
  std::remove(out_b.c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace kubetrain::testing

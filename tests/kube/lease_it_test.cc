// Two processes contend for one Lease on the real apiserver.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <set>

#include "tests/kube/it_util.h"

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
  Contender(const std::string& ns, const std::string& lease, const std::string& id) : id_(id) {
    std::vector<std::string> args = {KUBE_LEASE_CONTENDER,
                                     ns,
                                     lease,
                                     id,
                                     std::to_string(kLease.count()),
                                     std::to_string(kRenew.count()),
                                     std::to_string(kRetry.count())};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(), environ), 0);
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

}  // namespace
}  // namespace kubetrain::testing

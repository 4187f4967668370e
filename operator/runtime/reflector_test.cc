#include "operator/runtime/reflector.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>

#include "operator/runtime/informer.h"

namespace kubetrain::runtime {
namespace {

using json = nlohmann::json;
using kube::WatchEventType;

json Pod(const std::string& name, const std::string& rv) {
  return {{"metadata", {{"name", name}, {"namespace", "ns"}, {"resourceVersion", rv}}}};
}

json List(std::vector<json> items, const std::string& rv) {
  return {{"metadata", {{"resourceVersion", rv}}}, {"items", std::move(items)}};
}

// A scripted server: each List() pops the next list result, each Watch()
// pops the next script of events and its final status. When the script runs
// out, Watch blocks until stopped, as an idle watch would.
class ScriptedListerWatcher : public ListerWatcher {
 public:
  struct WatchScript {
    std::vector<kube::WatchEvent> events;
    Status end;
  };

  void AddList(StatusOr<json> l) {
    std::lock_guard lock(mu_);
    lists_.push_back(std::move(l));
  }
  void AddWatch(WatchScript w) {
    std::lock_guard lock(mu_);
    watches_.push_back(std::move(w));
  }

  StatusOr<json> List() override {
    std::lock_guard lock(mu_);
    ++list_calls_;
    cv_.notify_all();
    if (lists_.empty()) return Unavailable("no more scripted lists");
    auto l = std::move(lists_.front());
    lists_.pop_front();
    return l;
  }

  Status Watch(const std::string& rv, const kube::WatchHandler& handler,
               std::stop_token stop) override {
    WatchScript w;
    {
      std::unique_lock lock(mu_);
      watch_rvs_.push_back(rv);
      cv_.notify_all();
      if (watches_.empty()) {
        idle_ = true;
        cv_.notify_all();
        std::condition_variable_any cv;
        cv.wait(lock, stop, [] { return false; });
        return Status::Ok();
      }
      w = std::move(watches_.front());
      watches_.pop_front();
    }
    for (auto& ev : w.events) {
      Status s = handler(std::move(ev));
      if (!s.ok()) return s;
    }
    return w.end;
  }

  // Waits until the reflector has consumed the whole script and is idle.
  bool WaitIdle() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [this] { return idle_; });
  }
  std::vector<std::string> watch_rvs() {
    std::lock_guard lock(mu_);
    return watch_rvs_;
  }
  int list_calls() {
    std::lock_guard lock(mu_);
    return list_calls_;
  }
  // Waits (up to 10 s) until List() was called `n` times.
  bool WaitListCalls(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return list_calls_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StatusOr<json>> lists_;
  std::deque<WatchScript> watches_;
  std::vector<std::string> watch_rvs_;
  int list_calls_ = 0;
  bool idle_ = false;
};

struct Recorded {
  std::mutex mu;
  std::vector<std::string> log;
  void Add(std::string s) {
    std::lock_guard lock(mu);
    log.push_back(std::move(s));
  }
  std::vector<std::string> Get() {
    std::lock_guard lock(mu);
    return log;
  }
};

ReflectorOptions Fast() {
  ReflectorOptions o;
  o.initial_backoff = std::chrono::milliseconds(1);
  o.max_backoff = std::chrono::milliseconds(4);
  return o;
}

class InformerTest : public ::testing::Test {
 protected:
  void Build() {
    auto lw = std::make_unique<ScriptedListerWatcher>();
    lw_ = lw.get();
    informer_ = std::make_unique<Informer<GenericObject>>(std::move(lw), ToGenericObject, Fast());
    EventHandlers<GenericObject> h;
    h.on_add = [this](const auto& o) { rec_.Add("add " + o->meta.name); };
    h.on_update = [this](const auto& a, const auto& b) {
      rec_.Add("update " + b->meta.name + " " + a->meta.resource_version + "->" +
               b->meta.resource_version);
    };
    h.on_delete = [this](const auto& o, bool tombstone) {
      rec_.Add(std::string(tombstone ? "tombstone " : "delete ") + o->meta.name);
    };
    informer_->AddHandlers(h);
  }
  ScriptedListerWatcher* lw_ = nullptr;
  std::unique_ptr<Informer<GenericObject>> informer_;
  Recorded rec_;
};

TEST_F(InformerTest, ListThenWatchEventsUpdateStoreAndCallHandlersInOrder) {
  Build();
  lw_->AddList(List({Pod("a", "1"), Pod("b", "2")}, "10"));
  lw_->AddWatch({{{WatchEventType::kModified, Pod("a", "11")},
                  {WatchEventType::kAdded, Pod("c", "12")},
                  {WatchEventType::kDeleted, Pod("b", "13")}},
                 Unavailable("connection reset")});
  EXPECT_FALSE(informer_->HasSynced());
  informer_->Start();
  ASSERT_TRUE(informer_->WaitForSync(std::chrono::seconds(10)));
  ASSERT_TRUE(lw_->WaitIdle());
  auto log = rec_.Get();
  // Initial list order is unspecified; the watch part is ordered.
  ASSERT_EQ(log.size(), 5u);
  EXPECT_EQ(std::vector<std::string>(log.begin() + 2, log.end()),
            (std::vector<std::string>{"update a 1->11", "add c", "delete b"}));
  EXPECT_EQ(informer_->store().size(), 2u);
  EXPECT_EQ(informer_->store().Get("ns/a")->meta.resource_version, "11");
  EXPECT_EQ(informer_->store().Get("ns/b"), nullptr);
}

TEST_F(InformerTest, DroppedWatchResumesFromLastResourceVersionIncludingBookmarks) {
  Build();
  lw_->AddList(List({Pod("a", "1")}, "10"));
  lw_->AddWatch({{{WatchEventType::kModified, Pod("a", "11")},
                  {WatchEventType::kBookmark, {{"metadata", {{"resourceVersion", "15"}}}}}},
                 Unavailable("connection reset")});
  lw_->AddWatch({{}, Status::Ok()});  // server-side timeout: re-watch at once
  informer_->Start();
  ASSERT_TRUE(lw_->WaitIdle());
  EXPECT_EQ(lw_->watch_rvs(), (std::vector<std::string>{"10", "15", "15"}));
  EXPECT_EQ(lw_->list_calls(), 1);
  EXPECT_EQ(informer_->reflector().last_resource_version(), "15");
  EXPECT_EQ(informer_->reflector().state(), Reflector::State::kWatching);
}

TEST_F(InformerTest, GoneRelistsAndEmitsTombstonesForObjectsThatVanished) {
  Build();
  lw_->AddList(List({Pod("a", "1"), Pod("b", "2")}, "10"));
  lw_->AddWatch({{}, Status(StatusCode::kGone, "too old resource version")});
  lw_->AddList(List({Pod("a", "1"), Pod("c", "30")}, "40"));
  informer_->Start();
  ASSERT_TRUE(lw_->WaitIdle());
  EXPECT_EQ(informer_->reflector().lists(), 2);
  EXPECT_EQ(lw_->watch_rvs(), (std::vector<std::string>{"10", "40"}));
  auto log = rec_.Get();
  ASSERT_EQ(log.size(), 4u);
  // a unchanged (same resourceVersion): no update; b vanished: tombstone; c new.
  std::vector<std::string> after(log.begin() + 2, log.end());
  std::sort(after.begin(), after.end());
  EXPECT_EQ(after, (std::vector<std::string>{"add c", "tombstone b"}));
  auto keys = informer_->store().Keys();
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"ns/a", "ns/c"}));
}

// A failing list is retried after the backoff, which doubles: 800 ms, then
// 1.6 s (each jittered down to half), measured on the reflector's clock.
TEST(ReflectorBackoffTest, FailedListsAreRetriedAfterADoublingBackoff) {
  FakeClock clock;
  auto owned = std::make_unique<ScriptedListerWatcher>();
  ScriptedListerWatcher* lw = owned.get();
  ReflectorOptions o;
  o.clock = &clock;  // initial_backoff 800 ms, max 30 s
  Informer<GenericObject> informer(std::move(owned), ToGenericObject, o);
  informer.Start();  // no scripted list: every List() fails
  ASSERT_TRUE(lw->WaitListCalls(1));
  ASSERT_TRUE(clock.AwaitWaiters(1, std::chrono::seconds(10)));  // in its backoff
  clock.Advance(std::chrono::milliseconds(400));                 // below the least jitter (401 ms)
  EXPECT_EQ(clock.Waiters(), 1);
  EXPECT_EQ(lw->list_calls(), 1);
  EXPECT_EQ(informer.reflector().state(), Reflector::State::kBackoff);
  clock.Advance(std::chrono::milliseconds(401));  // 801 ms: past the most (801 ms)
  ASSERT_TRUE(lw->WaitListCalls(2));
  ASSERT_TRUE(clock.AwaitWaiters(1, std::chrono::seconds(10)));
  clock.Advance(std::chrono::milliseconds(800));  // the second backoff is at least 801 ms
  EXPECT_EQ(clock.Waiters(), 1);
  EXPECT_EQ(lw->list_calls(), 2);
  clock.Advance(std::chrono::milliseconds(801));  // and at most 1601 ms
  ASSERT_TRUE(lw->WaitListCalls(3));
  informer.Stop();
}

// A sync that never completes names the cause seen.
TEST(DescribeListErrorTest, NamesTlsUnauthorizedForbiddenAndMissingCrd) {
  auto has = [](const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
  };
  EXPECT_TRUE(has(DescribeListError("pods", Status(StatusCode::kUnauthenticated, "Unauthorized")),
                  "401 Unauthorized"));
  EXPECT_TRUE(has(DescribeListError("secrets", Status(StatusCode::kPermissionDenied, "Forbidden")),
                  "403 Forbidden: RBAC does not let the operator list and watch secrets"));
  EXPECT_TRUE(has(DescribeListError("trainingjobs", NotFound("NotFound (404) GET /apis/...")),
                  "the TrainingJob CRD is not installed"));
  EXPECT_TRUE(has(DescribeListError("pods", Unavailable("GET https://x/api/v1/pods: SSL peer "
                                                        "certificate or SSH remote key was not OK "
                                                        "(TLS: the server certificate is not "
                                                        "trusted by the configured CA)")),
                  "TLS"));
  // The original error is kept after the cause.
  EXPECT_TRUE(has(DescribeListError("pods", Status(StatusCode::kUnauthenticated, "token xyz")),
                  "token xyz"));
}

TEST_F(InformerTest, ListErrorsBackOffAndRetryUntilSynced) {
  Build();
  lw_->AddList(Status(StatusCode::kUnavailable, "apiserver down"));
  lw_->AddList(Status(StatusCode::kUnavailable, "apiserver down"));
  lw_->AddList(List({Pod("a", "1")}, "5"));
  informer_->Start();
  ASSERT_TRUE(informer_->WaitForSync(std::chrono::seconds(10)));
  EXPECT_EQ(lw_->list_calls(), 3);
  EXPECT_EQ(informer_->store().size(), 1u);
}

TEST_F(InformerTest, ObjectsTheTransformRejectsAreSkipped) {
  Build();
  lw_->AddList(List({Pod("a", "1"), json{{"metadata", json::object()}}}, "5"));
  informer_->Start();
  ASSERT_TRUE(informer_->WaitForSync(std::chrono::seconds(10)));
  EXPECT_EQ(informer_->store().size(), 1u);
}

TEST_F(InformerTest, StopEndsTheReflector) {
  Build();
  lw_->AddList(List({}, "5"));
  informer_->Start();
  ASSERT_TRUE(lw_->WaitIdle());
  informer_->Stop();
  EXPECT_EQ(informer_->reflector().state(), Reflector::State::kStopped);
}

// A lister that serves each list as scripted pages: a page of items, a
// restart (the continue token expired), or a failure mid-way.
class PagedListerWatcher : public ListerWatcher {
 public:
  struct Step {
    std::vector<json> items;
    bool restart = false;
    Status fail;
  };
  explicit PagedListerWatcher(std::vector<std::vector<Step>> lists) : lists_(std::move(lists)) {}

  StatusOr<json> List() override { return Unavailable("unpaged List not used"); }
  StatusOr<std::string> ListPages(const ItemsFn& on_items,
                                  const std::function<void()>& restart) override {
    if (next_ >= lists_.size()) return Unavailable("no more scripted lists");
    for (auto& step : lists_[next_++]) {
      if (!step.fail.ok()) return step.fail;
      if (step.restart) restart();
      on_items(std::move(step.items));
    }
    return std::string("7");
  }
  Status Watch(const std::string&, const kube::WatchHandler&, std::stop_token stop) override {
    {
      std::lock_guard lock(mu_);
      watching_ = true;
    }
    cv_.notify_all();
    std::mutex m;
    std::unique_lock lock(m);
    std::condition_variable_any cv;
    cv.wait(lock, stop, [] { return false; });
    return Status::Ok();
  }
  bool WaitWatching() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [this] { return watching_; });
  }

 private:
  std::vector<std::vector<Step>> lists_;
  size_t next_ = 0;  // reflector thread only
  std::mutex mu_;
  std::condition_variable cv_;
  bool watching_ = false;
};

// A list is converted page by page; pages of a list that failed
// mid-way, or that started over, never reach the store or the handlers.
TEST(PagedListTest, OnlyTheCompleteListsPagesAreStored) {
  using Step = PagedListerWatcher::Step;
  std::vector<std::vector<Step>> lists;
  const auto page = [](std::vector<json> items, bool restart = false) {
    return Step{std::move(items), restart, Status::Ok()};
  };
  lists.push_back({page({Pod("stale", "1")}), Step{{}, false, Unavailable("connection reset")}});
  lists.push_back({page({Pod("a", "2"), Pod("old", "3")}), page({Pod("a", "4")}, /*restart=*/true),
                   page({Pod("b", "5")})});
  auto lw = std::make_unique<PagedListerWatcher>(std::move(lists));
  PagedListerWatcher* paged = lw.get();
  Informer<GenericObject> informer(std::move(lw), ToGenericObject, Fast());
  Recorded rec;
  EventHandlers<GenericObject> h;
  h.on_add = [&](const auto& o) { rec.Add("add " + o->meta.name); };
  informer.AddHandlers(h);
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(10)));
  ASSERT_TRUE(paged->WaitWatching());
  auto keys = informer.store().Keys();
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"ns/a", "ns/b"}));
  EXPECT_EQ(informer.store().Get("ns/a")->meta.resource_version, "4");
  auto log = rec.Get();
  std::sort(log.begin(), log.end());
  EXPECT_EQ(log, (std::vector<std::string>{"add a", "add b"}));
  EXPECT_EQ(informer.reflector().last_resource_version(), "7");
  EXPECT_EQ(informer.reflector().lists(), 1);
}

}  // namespace
}  // namespace kubetrain::runtime

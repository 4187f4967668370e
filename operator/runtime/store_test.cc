#include "operator/runtime/store.h"

#include <gtest/gtest.h>

#include "operator/runtime/object.h"

namespace kubetrain::runtime {
namespace {

std::shared_ptr<const GenericObject> Obj(std::string ns, std::string name, std::string owner,
                                         std::string role) {
  GenericObject o;
  o.meta.ns = std::move(ns);
  o.meta.name = std::move(name);
  if (!owner.empty()) o.meta.controller = OwnerRef{"TrainingJob", "j", owner};
  o.meta.labels = {{"role", std::move(role)}};
  return std::make_shared<const GenericObject>(std::move(o));
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_.AddIndex(kNamespaceIndex, NamespaceIndexFunc<GenericObject>);
    store_.AddIndex(kOwnerUidIndex, OwnerUidIndexFunc<GenericObject>);
    store_.AddIndex(LabelIndexName("role"), LabelIndexFunc<GenericObject>("role"));
  }
  Store<GenericObject> store_;
};

TEST_F(StoreTest, IndexesFollowUpsertAndErase) {
  store_.Upsert("a/p1", Obj("a", "p1", "j1", "ps"));
  store_.Upsert("a/p2", Obj("a", "p2", "j1", "worker"));
  store_.Upsert("b/p3", Obj("b", "p3", "j2", "worker"));
  EXPECT_EQ(store_.ByIndex(kNamespaceIndex, "a").size(), 2u);
  EXPECT_EQ(store_.ByIndex(kOwnerUidIndex, "a/j1").size(), 2u);
  EXPECT_EQ(store_.ByIndex(LabelIndexName("role"), "worker").size(), 2u);
  // Relabel p2: it must leave the old index bucket.
  store_.Upsert("a/p2", Obj("a", "p2", "j1", "ps"));
  EXPECT_EQ(store_.ByIndex(LabelIndexName("role"), "worker").size(), 1u);
  EXPECT_EQ(store_.ByIndex(LabelIndexName("role"), "ps").size(), 2u);
  auto gone = store_.Erase("a/p1");
  ASSERT_NE(gone, nullptr);
  EXPECT_EQ(gone->meta.name, "p1");
  EXPECT_EQ(store_.ByIndex(kOwnerUidIndex, "a/j1").size(), 1u);
  EXPECT_EQ(store_.Erase("a/p1"), nullptr);
  EXPECT_TRUE(store_.ByIndex("no-such-index", "x").empty());
}

TEST_F(StoreTest, ReplaceSwapsContentAndIndexesAndReturnsOld) {
  store_.Upsert("a/p1", Obj("a", "p1", "j1", "ps"));
  Store<GenericObject>::Map fresh;
  fresh["c/p9"] = Obj("c", "p9", "j9", "chief");
  auto old = store_.Replace(std::move(fresh));
  EXPECT_EQ(old.size(), 1u);
  EXPECT_EQ(store_.size(), 1u);
  EXPECT_EQ(store_.Get("a/p1"), nullptr);
  EXPECT_TRUE(store_.ByIndex(kOwnerUidIndex, "a/j1").empty());
  EXPECT_EQ(store_.ByIndex(kOwnerUidIndex, "c/j9").size(), 1u);
}

// An ownerReference names no namespace: a pod in namespace b that claims the
// UID of a job in namespace a is not that job's child.
TEST_F(StoreTest, OwnerIndexMatchesTheNamespaceToo) {
  store_.Upsert("a/j1-worker-0", Obj("a", "j1-worker-0", "j1", "worker"));
  store_.Upsert("b/j1-worker-0", Obj("b", "j1-worker-0", "j1", "worker"));
  auto owned = store_.ByIndex(kOwnerUidIndex, OwnerIndexValue("a", "j1"));
  ASSERT_EQ(owned.size(), 1u);
  EXPECT_EQ(owned[0]->meta.ns, "a");
  EXPECT_EQ(OwnerIndexValue("a", "j1"), "a/j1");
  EXPECT_TRUE(store_.ByIndex(kOwnerUidIndex, "j1").empty());
}

TEST_F(StoreTest, SnapshotsSurviveLaterWrites) {
  store_.Upsert("a/p1", Obj("a", "p1", "j1", "ps"));
  auto snap = store_.Get("a/p1");
  store_.Erase("a/p1");
  ASSERT_NE(snap, nullptr);
  EXPECT_EQ(snap->meta.name, "p1");
}

}  // namespace
}  // namespace kubetrain::runtime

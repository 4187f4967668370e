#include "operator/runtime/reflector.h"

#include <spdlog/spdlog.h>

#include <random>
#include <thread>

namespace kubetrain::runtime {
namespace {

using json = nlohmann::json;

class KubeListerWatcher : public ListerWatcher {
 public:
  KubeListerWatcher(kube::Client* client, kube::ResourceRef ref, std::string ns,
                    std::string label_selector, std::string field_selector, int64_t page_size,
                    std::shared_ptr<const kube::FieldFilter> fields)
      : client_(client), ref_(std::move(ref)), ns_(std::move(ns)) {
    opts_.fields = std::move(fields);
    opts_.label_selector = std::move(label_selector);
    opts_.field_selector = std::move(field_selector);
    opts_.limit = page_size;
    opts_.drop_managed_fields = true;
  }

  StatusOr<std::string> ListPages(const ItemsFn& on_items,
                                  const std::function<void()>& restart) override {
    std::string rv;
    auto page_fn = [&](json&& page) -> Status {
      if (rv.empty()) rv = RvOf(page);
      on_items(ItemsOf(page));
      return Status::Ok();
    };
    Status s = client_->ListPages(ref_, ns_, opts_, page_fn);
    if (s.code() == StatusCode::kGone) {
      // The continue token expired mid-way: start over with one unpaged list.
      restart();
      rv.clear();
      kube::ListOptions full = opts_;
      full.limit = 0;
      s = client_->ListPages(ref_, ns_, full, page_fn);
    }
    if (!s.ok()) return s;
    return rv;
  }

  StatusOr<json> List() override {
    auto r = client_->ListAll(ref_, ns_, opts_);
    if (r.ok() || r.status().code() != StatusCode::kGone) return r;
    // The continue token expired mid-way: fall back to one unpaged list.
    kube::ListOptions full = opts_;
    full.limit = 0;
    return client_->List(ref_, ns_, full);
  }

  Status Watch(const std::string& rv, const kube::WatchHandler& handler,
               std::stop_token stop) override {
    kube::ListOptions w = opts_;
    w.limit = 0;
    w.resource_version = rv;
    w.allow_watch_bookmarks = true;
    // Spread reconnects out, as client-go does (5..10 minutes).
    static thread_local std::mt19937 rng(std::random_device{}());
    w.timeout_seconds = std::uniform_int_distribution<int>(300, 600)(rng);
    return client_->Watch(ref_, ns_, w, handler, stop);
  }

 private:
  kube::Client* const client_;
  const kube::ResourceRef ref_;
  const std::string ns_;
  kube::ListOptions opts_;
};

}  // namespace

std::string RvOf(const json& obj) {
  auto md = obj.find("metadata");
  if (md == obj.end() || !md->is_object()) return {};
  auto rv = md->find("resourceVersion");
  return rv != md->end() && rv->is_string() ? rv->get<std::string>() : std::string();
}

std::vector<json> ItemsOf(json& list) {
  std::vector<json> items;
  if (auto it = list.find("items"); it != list.end() && it->is_array()) {
    items.reserve(it->size());
    for (auto& item : *it) items.push_back(std::move(item));
  }
  return items;
}

StatusOr<std::string> ListerWatcher::ListPages(const ItemsFn& on_items,
                                               const std::function<void()>&) {
  KT_ASSIGN_OR_RETURN(json list, List());
  std::string rv = RvOf(list);
  on_items(ItemsOf(list));
  return rv;
}

std::unique_ptr<ListerWatcher> NewKubeListerWatcher(
    kube::Client* client, kube::ResourceRef ref, std::string ns, std::string label_selector,
    std::string field_selector, int64_t page_size,
    std::shared_ptr<const kube::FieldFilter> fields) {
  return std::make_unique<KubeListerWatcher>(client, std::move(ref), std::move(ns),
                                             std::move(label_selector), std::move(field_selector),
                                             page_size, std::move(fields));
}

Reflector::Reflector(std::unique_ptr<ListerWatcher> lw, ReflectorSink* sink, ReflectorOptions opts)
    : lw_(std::move(lw)), sink_(sink), opts_(std::move(opts)) {}

std::string Reflector::last_resource_version() const {
  MutexLock lock(mu_);
  return rv_;
}

Status Reflector::last_error() const {
  MutexLock lock(mu_);
  return last_error_;
}

std::string DescribeListError(std::string_view resource, const Status& error) {
  const std::string r(resource);
  const std::string& m = error.message();
  std::string cause;
  if (m.find("TLS") != std::string::npos || m.find("SSL") != std::string::npos ||
      m.find("certificate") != std::string::npos) {
    cause = "TLS: the apiserver's certificate is not trusted (check the CA in the kubeconfig)";
  } else {
    switch (error.code()) {
      case StatusCode::kUnauthenticated:
        cause =
            "401 Unauthorized: the apiserver rejected the credentials (expired or wrong "
            "token, client certificate or exec plugin output)";
        break;
      case StatusCode::kPermissionDenied:
        cause = "403 Forbidden: RBAC does not let the operator list and watch " + r +
                " (see deploy/kustomize/rbac)";
        break;
      case StatusCode::kNotFound:
        cause = r == "trainingjobs"
                    ? "404: the TrainingJob CRD is not installed (kubectl apply -f crds/)"
                    : "404: the apiserver does not serve " + r;
        break;
      case StatusCode::kUnavailable:
      case StatusCode::kDeadlineExceeded:
        cause = "the apiserver is unreachable or not answering";
        break;
      default:
        cause = "listing failed";
    }
  }
  return r + ": " + cause + ": " + error.ToString();
}

void Reflector::SetRv(std::string rv) {
  MutexLock lock(mu_);
  rv_ = std::move(rv);
}

void Reflector::Backoff(std::stop_token stop, std::chrono::milliseconds& delay) {
  state_ = State::kBackoff;
  static thread_local std::mt19937 rng(std::random_device{}());
  auto jittered = std::chrono::milliseconds(
      std::uniform_int_distribution<long>(delay.count() / 2 + 1, delay.count() + 1)(rng));
  (void)opts_.clock->SleepFor(jittered, stop);
  delay = std::min(delay * 2, opts_.max_backoff);
}

void Reflector::Run(std::stop_token stop) {
  auto delay = opts_.initial_backoff;
  State next = State::kEmpty;
  while (!stop.stop_requested()) {
    if (next == State::kEmpty) {
      state_ = State::kEmpty;
      auto list =
          lw_->ListPages([this](std::vector<json>&& items) { sink_->AddListed(std::move(items)); },
                         [this] { sink_->DropListed(); });
      if (!list.ok()) {
        sink_->DropListed();
        {
          MutexLock lock(mu_);
          last_error_ = list.status();
        }
        spdlog::warn("{}: list failed: {}", opts_.name, list.status().ToString());
        Backoff(stop, delay);
        continue;
      }
      std::string rv = std::move(*list);
      sink_->Replace(rv);
      {
        MutexLock lock(mu_);
        last_error_ = Status::Ok();
      }
      SetRv(rv);
      ++lists_;
      state_ = State::kListed;
      next = State::kWatching;
      continue;
    }
    // kWatching: resume from the last resourceVersion we saw.
    state_ = State::kWatching;
    const auto started = opts_.clock->Now();
    Status s = lw_->Watch(
        last_resource_version(),
        [this](kube::WatchEvent&& ev) -> Status {
          std::string rv = RvOf(ev.object);
          if (ev.type != kube::WatchEventType::kBookmark)
            sink_->Apply(ev.type, std::move(ev.object));
          if (!rv.empty()) SetRv(std::move(rv));
          return Status::Ok();
        },
        stop);
    if (stop.stop_requested()) break;
    if (opts_.clock->Now() - started >= opts_.healthy_watch) delay = opts_.initial_backoff;
    if (s.ok()) {
      // The server closed the watch on its timeout: re-watch at once. A watch
      // that ends cleanly at once, again and again, is a misbehaving server
      // or proxy; back off rather than spin.
      if (opts_.clock->Now() - started < std::chrono::seconds(1)) Backoff(stop, delay);
      continue;
    }
    if (s.code() == StatusCode::kGone) {
      spdlog::info("{}: resourceVersion {} expired, relisting", opts_.name,
                   last_resource_version());
      next = State::kEmpty;
      continue;
    }
    spdlog::warn("{}: watch failed, resuming from {}: {}", opts_.name, last_resource_version(),
                 s.ToString());
    Backoff(stop, delay);
  }
  state_ = State::kStopped;
}

}  // namespace kubetrain::runtime

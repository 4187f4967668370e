#include "operator/progress/reader.h"

#include <curl/curl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>

namespace kubetrain::progress {
namespace {

constexpr std::string_view kReads = "kubetrain_progress_reads_total";
constexpr std::string_view kPublished = "kubetrain_progress_updates_total";
constexpr std::string_view kTargets = "kubetrain_progress_targets";

// The longest the reader thread waits without looking at the schedule; any
// change (a new target, Stop) wakes it earlier.
constexpr std::chrono::milliseconds kIdleWait{1000};

std::once_flag g_curl_init;

// One read in flight: its buffers and what the callbacks saw.
struct Transfer {
  uint64_t id = 0;
  CURL* easy = nullptr;
  size_t max_header_bytes = 0;
  size_t max_body_bytes = 0;
  size_t header_bytes = 0;
  std::string body;
  bool too_large = false;
  std::array<char, CURL_ERROR_SIZE> error{};
};

// Counts every header line (interim 1xx answers included) against the cap:
// libcurl keeps the headers it has read, so an endless stream of them must
// end the read.
size_t OnHeader(char* /*data*/, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  t->header_bytes += size * n;
  if (t->header_bytes > t->max_header_bytes) {
    t->too_large = true;
    return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
  }
  return size * n;
}

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  if (t->body.size() + size * n > t->max_body_bytes) {
    t->too_large = true;
    return 0;
  }
  t->body.append(data, size * n);
  return size * n;
}

StatusOr<std::string> Outcome(Transfer& t, CURLcode code) {
  const std::string detail = t.error[0] != '\0' ? t.error.data() : curl_easy_strerror(code);
  // libcurl 7.x ends a header line longer than its own limit (100 KiB,
  // CURL_MAX_HTTP_HEADER) with "out of memory"; that is a line too large.
  if (t.too_large || code == CURLE_FILESIZE_EXCEEDED || code == CURLE_OUT_OF_MEMORY) {
    return Status(StatusCode::kResourceExhausted, "metrics answer over the size limit");
  }
  switch (code) {
    case CURLE_OK: {
      long status = 0;
      curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &status);
      if (status != 200) return FailedPrecondition("HTTP " + std::to_string(status));
      return std::move(t.body);
    }
    case CURLE_OPERATION_TIMEDOUT: {
      curl_off_t connected = 0;
      curl_easy_getinfo(t.easy, CURLINFO_CONNECT_TIME_T, &connected);
      if (connected == 0) return Unavailable(detail);  // never connected: no answer
      return Status(StatusCode::kDeadlineExceeded, detail);
    }
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
      return Unavailable(detail);
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
      return InvalidArgument(detail);
    default:
      return FailedPrecondition(detail);
  }
}

// Flow: Start() adds an easy handle per read to one multi handle; Wait()
// lets libcurl move every read forward (curl_multi_poll, woken by
// curl_multi_wakeup) and collects those that ended.
// Guarantees: each read is bounded by the options on its own handle (total
// time, connect time, header and body bytes), so a read's cost does not
// depend on the others; connections are not kept between reads (a socket per
// read in flight, none idle).
class CurlMultiFetcher final : public AsyncFetcher {
 public:
  CurlMultiFetcher(const ReaderOptions& options, CURLM* multi) : options_(options), multi_(multi) {}
  ~CurlMultiFetcher() override {
    CancelAll();
    curl_multi_cleanup(multi_);
  }

  void Start(uint64_t id, const std::string& url) override {
    auto t = std::make_unique<Transfer>();
    t->id = id;
    t->max_header_bytes = options_.max_header_bytes;
    t->max_body_bytes = options_.max_body_bytes;
    t->easy = curl_easy_init();
    if (t->easy == nullptr) {
      failed_.push_back({id, Status(StatusCode::kInternal, "curl_easy_init failed")});
      return;
    }
    CURL* h = t->easy;
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_PRIVATE, t.get());
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, t->error.data());
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http");
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_PROXY, "");  // not from the environment
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
    curl_easy_setopt(h, CURLOPT_FORBID_REUSE, 1L);
    curl_easy_setopt(
        h, CURLOPT_CONNECTTIMEOUT_MS,
        static_cast<long>(std::min(options_.connect_timeout, options_.total_timeout).count()));
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(options_.total_timeout.count()));
    curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE,
                     static_cast<curl_off_t>(options_.max_body_bytes));
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &OnHeader);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, t.get());
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &OnBody);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, t.get());
    curl_easy_setopt(h, CURLOPT_USERAGENT, "kubetrain-operator");
    if (const CURLMcode mc = curl_multi_add_handle(multi_, h); mc != CURLM_OK) {
      curl_easy_cleanup(h);
      failed_.push_back({id, Status(StatusCode::kInternal, curl_multi_strerror(mc))});
      return;
    }
    transfers_.emplace(h, std::move(t));
  }

  std::vector<Done> Wait(std::chrono::milliseconds timeout) override {
    std::vector<Done> done = std::move(failed_);
    failed_.clear();
    int running = 0;
    curl_multi_perform(multi_, &running);
    Collect(&done);
    if (!done.empty()) return done;
    const int ms =
        static_cast<int>(std::clamp<std::chrono::milliseconds::rep>(timeout.count(), 0, 60'000));
    curl_multi_poll(multi_, nullptr, 0, ms, nullptr);
    curl_multi_perform(multi_, &running);
    Collect(&done);
    return done;
  }

  void Wakeup() override { curl_multi_wakeup(multi_); }

  void CancelAll() override {
    for (auto& [easy, t] : transfers_) {
      curl_multi_remove_handle(multi_, easy);
      curl_easy_cleanup(easy);
    }
    transfers_.clear();
    failed_.clear();
  }

 private:
  void Collect(std::vector<Done>* done) {
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi_, &left)) {
      if (msg->msg != CURLMSG_DONE) continue;
      auto it = transfers_.find(msg->easy_handle);
      if (it == transfers_.end()) continue;
      const CURLcode code = msg->data.result;  // msg is invalid after remove_handle
      Transfer& t = *it->second;
      done->push_back({t.id, Outcome(t, code)});
      curl_multi_remove_handle(multi_, t.easy);
      curl_easy_cleanup(t.easy);
      transfers_.erase(it);
    }
  }

  const ReaderOptions options_;
  CURLM* const multi_;
  std::map<CURL*, std::unique_ptr<Transfer>> transfers_;
  std::vector<Done> failed_;  // reads that could not start
};

std::unique_ptr<AsyncFetcher> DefaultFetcher(const ReaderOptions& options) {
  auto f = CurlFetcher(options);
  if (!f.ok()) {
    spdlog::error("status.progress is not read: {}", f.status().ToString());
    return nullptr;
  }
  return std::move(*f);
}

}  // namespace

StatusOr<std::unique_ptr<AsyncFetcher>> CurlFetcher(const ReaderOptions& options) {
  std::call_once(g_curl_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  CURLM* multi = curl_multi_init();
  if (multi == nullptr) return Status(StatusCode::kInternal, "curl_multi_init failed");
  // No idle connections kept (each read forbids reuse anyway).
  curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, 1L);
  return std::unique_ptr<AsyncFetcher>(new CurlMultiFetcher(options, multi));
}

FetchFn HttpFetcher(const ReaderOptions& options) {
  return [options](const std::string& url) -> StatusOr<std::string> {
    if (url.rfind("http://", 0) != 0) return InvalidArgument("not an http URL: " + url);
    auto fetcher = CurlFetcher(options);
    if (!fetcher.ok()) return fetcher.status();
    (*fetcher)->Start(0, url);
    // Each Wait() is bounded, and the read ends by total_timeout.
    while (true) {
      auto done = (*fetcher)->Wait(kIdleWait);
      if (!done.empty()) return std::move(done.front().body);
    }
  };
}

ProgressReader::ProgressReader(ReaderOptions options,
                               std::function<void(const std::string&)> on_change,
                               runtime::Metrics* metrics, std::unique_ptr<AsyncFetcher> fetcher)
    : options_(options),
      on_change_(std::move(on_change)),
      metrics_(metrics),
      fetcher_(fetcher ? std::move(fetcher) : DefaultFetcher(options)),
      scheduler_(options.schedule) {
  metrics_->Help(kReads, "counter",
                 "Reads of trainers' metrics endpoints for status.progress, by result.");
  metrics_->Help(kPublished, "counter", "status.progress changes handed to the reconcile.");
  metrics_->Help(kTargets, "gauge", "Jobs whose deciding replica's metrics are being read.");
}

ProgressReader::~ProgressReader() {
  Stop();
}

void ProgressReader::Start() {
  MutexLock lock(mu_);
  if (thread_.joinable() || !fetcher_) return;
  stopping_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void ProgressReader::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  if (fetcher_) fetcher_->Wakeup();
  if (thread_.joinable()) thread_.join();
}

void ProgressReader::SetTarget(const std::string& key, const std::optional<ScrapeTarget>& target) {
  {
    MutexLock lock(mu_);
    if (target) {
      scheduler_.Set(key, *target, options_.clock->Now());
    } else {
      scheduler_.Remove(key);
    }
    metrics_->Set(kTargets, "", static_cast<double>(scheduler_.size()));
  }
  if (fetcher_) fetcher_->Wakeup();
}

void ProgressReader::Forget(const std::string& key) {
  MutexLock lock(mu_);
  scheduler_.Remove(key);
  trackers_.erase(key);
  metrics_->Set(kTargets, "", static_cast<double>(scheduler_.size()));
}

std::optional<api::Progress> ProgressReader::Latest(const std::string& key) const {
  MutexLock lock(mu_);
  auto it = trackers_.find(key);
  if (it == trackers_.end()) return std::nullopt;
  return it->second.published();
}

void ProgressReader::Loop() {
  const size_t max_in_flight = static_cast<size_t>(std::max(1, options_.max_in_flight));
  std::vector<std::pair<uint64_t, ScrapeScheduler::Due>> starts;
  while (true) {
    auto wait = kIdleWait;
    starts.clear();
    {
      MutexLock lock(mu_);
      if (stopping_) break;
      const auto now = options_.clock->Now();
      while (reads_.size() + starts.size() < max_in_flight) {
        ScrapeScheduler::Clock::duration until{};
        auto due = scheduler_.Next(now, &until);
        if (!due) {
          if (until != ScrapeScheduler::Clock::duration::max()) {
            wait = std::min(wait, std::chrono::ceil<std::chrono::milliseconds>(until));
          }
          break;
        }
        starts.emplace_back(next_id_++, std::move(*due));
      }
    }
    for (auto& [id, due] : starts) {
      const std::string url = due.target.url;
      reads_.emplace(id, std::move(due));
      fetcher_->Start(id, url);
    }
    for (auto& done : fetcher_->Wait(wait)) {
      auto it = reads_.find(done.id);
      if (it == reads_.end()) continue;
      Finish(it->second, done.body);
      reads_.erase(it);
    }
  }
  // Reads in flight are dropped, not waited for; their jobs are due again.
  fetcher_->CancelAll();
  MutexLock lock(mu_);
  for (auto& [id, due] : reads_) scheduler_.Cancel(due);
  reads_.clear();
}

void ProgressReader::Finish(const ScrapeScheduler::Due& due, const StatusOr<std::string>& body) {
  // The thread's boundary: a workload's bytes never end the process.
  StatusOr<TrainerSample> sample = Status(StatusCode::kInternal, "not read");
  try {
    sample = body.ok() ? TrainerSampleFromText(*body) : StatusOr<TrainerSample>(body.status());
  } catch (const std::exception& e) {
    sample = Status(StatusCode::kInternal, e.what());
  }
  const char* result = "error";
  if (sample.ok()) {
    result = "ok";
  } else {
    switch (sample.status().code()) {
      case StatusCode::kNotFound:
        result = "no_metrics";
        break;
      case StatusCode::kUnavailable:
        result = "unreachable";
        break;
      case StatusCode::kDeadlineExceeded:
        result = "timeout";
        break;
      case StatusCode::kResourceExhausted:
        result = "too_large";
        break;
      default:
        break;
    }
  }
  metrics_->Add(kReads, std::string("result=\"") + result + "\"");
  bool changed = false;
  {
    MutexLock lock(mu_);
    const auto now = options_.clock->Now();
    const bool current = scheduler_.Done(due, sample.ok(), now);
    if (sample.ok() && current) {
      auto [it, added] = trackers_.try_emplace(due.key, options_.tracker);
      changed = it->second.Observe(*sample, due.target.replica, now, api::Now(*options_.clock))
                    .has_value();
    }
  }
  if (!sample.ok()) {
    spdlog::debug("progress of {}: {} ({})", due.key, sample.status().ToString(), due.target.url);
  }
  if (changed) {
    metrics_->Add(kPublished);
    on_change_(due.key);
  }
}

}  // namespace kubetrain::progress

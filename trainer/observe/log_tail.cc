#include "trainer/observe/log_tail.h"

#include <spdlog/sinks/base_sink.h>

#include <algorithm>
#include <mutex>

namespace kubetrain::trainer::observe {

LogTail::LogTail(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

void LogTail::Append(std::string_view text) {
  MutexLock lock(mu_);
  total_ += text.size();
  if (text.size() >= capacity_) {
    ring_.assign(text.substr(text.size() - capacity_));
    head_ = 0;
    return;
  }
  if (ring_.size() < capacity_) {
    const size_t room = capacity_ - ring_.size();
    ring_.append(text.substr(0, room));
    text.remove_prefix(std::min(room, text.size()));
    if (text.empty()) return;
  }
  // Full: overwrite the oldest bytes, wrapping once at most.
  const size_t first = std::min(text.size(), capacity_ - head_);
  ring_.replace(head_, first, text.substr(0, first));
  ring_.replace(0, text.size() - first, text.substr(first));
  head_ = (head_ + text.size()) % capacity_;
}

std::string LogTail::Contents() const {
  MutexLock lock(mu_);
  if (total_ <= ring_.size()) return ring_;
  std::string kept = ring_.substr(head_) + ring_.substr(0, head_);
  uint64_t dropped = total_ - kept.size();
  if (const size_t nl = kept.find('\n'); nl != std::string::npos && nl + 1 < kept.size()) {
    kept.erase(0, nl + 1);
    dropped += nl + 1;
  }
  return "[kubetrain: the first " + std::to_string(dropped) +
         " bytes of this log were dropped; the last " + std::to_string(capacity_) +
         " bytes are kept]\n" + kept;
}

uint64_t LogTail::dropped_bytes() const {
  MutexLock lock(mu_);
  return total_ - ring_.size();
}

namespace {

class LogTailSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit LogTailSink(std::shared_ptr<LogTail> tail) : tail_(std::move(tail)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    tail_->Append(std::string_view(line.data(), line.size()));
  }
  void flush_() override {}

 private:
  const std::shared_ptr<LogTail> tail_;
};

}  // namespace

std::shared_ptr<spdlog::sinks::sink> MakeLogTailSink(std::shared_ptr<LogTail> tail) {
  return std::make_shared<LogTailSink>(std::move(tail));
}

}  // namespace kubetrain::trainer::observe

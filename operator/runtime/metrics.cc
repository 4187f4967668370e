#include "operator/runtime/metrics.h"

#include <cmath>
#include <sstream>

namespace kubetrain::runtime {

void Metrics::Add(std::string_view name, std::string_view labels, double delta) {
  MutexLock lock(mu_);
  auto& f = families_[std::string(name)];
  if (f.type == "untyped") f.type = "counter";
  f.series[std::string(labels)] += delta;
}

void Metrics::Set(std::string_view name, std::string_view labels, double value) {
  MutexLock lock(mu_);
  auto& f = families_[std::string(name)];
  if (f.type == "untyped") f.type = "gauge";
  f.series[std::string(labels)] = value;
}

void Metrics::Help(std::string_view name, std::string_view type, std::string_view help) {
  MutexLock lock(mu_);
  auto& f = families_[std::string(name)];
  f.type = type;
  f.help = help;
}

double Metrics::Get(std::string_view name, std::string_view labels) const {
  MutexLock lock(mu_);
  auto f = families_.find(name);
  if (f == families_.end()) return 0;
  auto s = f->second.series.find(std::string(labels));
  return s == f->second.series.end() ? 0 : s->second;
}

std::string Metrics::Render() const {
  MutexLock lock(mu_);
  std::ostringstream out;
  for (const auto& [name, f] : families_) {
    if (!f.help.empty()) out << "# HELP " << name << " " << f.help << "\n";
    out << "# TYPE " << name << " " << f.type << "\n";
    for (const auto& [labels, v] : f.series) {
      out << name;
      if (!labels.empty()) out << "{" << labels << "}";
      out << " " << v << "\n";
    }
  }
  return out.str();
}

Metrics& DefaultMetrics() {
  static Metrics* m = new Metrics();  // never destroyed: used from detached threads
  return *m;
}

}  // namespace kubetrain::runtime

#include "runtime/base/profiler.h"

#include <algorithm>
#include <iomanip>
#include <map>
#include <sstream>

namespace metafuse::runtime {
namespace {

thread_local ProfileSession* active_session = nullptr;

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

}  // namespace

ProfileSession::ProfileSession()
    : origin_(std::chrono::steady_clock::now()), previous_(active_session) {
  active_session = this;
}

ProfileSession::~ProfileSession() { active_session = previous_; }

ProfileSession* ProfileSession::Active() { return active_session; }

ProfileScope::ProfileScope(const std::string& scope) : session_(active_session) {
  if (session_ == nullptr) return;
  previous_ = session_->scope_;
  session_->scope_ = scope;
}

ProfileScope::~ProfileScope() {
  if (session_ != nullptr) session_->scope_ = previous_;
}

void ProfileSession::Record(const std::string& program, const std::string& op,
                            int64_t index, std::chrono::steady_clock::time_point start,
                            std::chrono::steady_clock::time_point end) {
  using us = std::chrono::duration<double, std::micro>;
  events_.push_back({scope_.empty() ? program : scope_ + "/" + program, op, index, us(start - origin_).count(),
                     us(end - start).count()});
}

std::string ProfileSession::Summary() const {
  struct Row {
    int64_t calls = 0;
    double total = 0;
  };
  std::map<std::pair<std::string, std::string>, Row> rows;
  double all = 0;
  for (const auto& e : events_) {
    Row& r = rows[{e.program, e.op}];
    ++r.calls;
    r.total += e.duration_us;
    all += e.duration_us;
  }
  std::vector<std::pair<std::pair<std::string, std::string>, Row>> sorted(rows.begin(),
                                                                          rows.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.second.total > b.second.total; });
  std::ostringstream os;
  os << std::left << std::setw(18) << "program" << std::setw(28) << "op" << std::right
     << std::setw(8) << "calls" << std::setw(12) << "total us" << std::setw(10)
     << "mean us" << std::setw(8) << "share" << "\n";
  for (const auto& [key, r] : sorted) {
    os << std::left << std::setw(18) << key.first << std::setw(28) << key.second
       << std::right << std::setw(8) << r.calls << std::setw(12) << std::fixed
       << std::setprecision(1) << r.total << std::setw(10) << r.total / r.calls
       << std::setw(7) << (all > 0 ? 100.0 * r.total / all : 0.0) << "%\n";
  }
  os << "total " << std::fixed << std::setprecision(1) << all << " us in "
     << events_.size() << " instructions\n";
  return os.str();
}

std::string ProfileSession::ChromeTrace() const {
  std::ostringstream os;
  os << "{\"traceEvents\":[";
  for (size_t i = 0; i < events_.size(); ++i) {
    const auto& e = events_[i];
    os << (i ? "," : "") << "{\"name\":\"" << JsonEscape(e.op) << "\",\"cat\":\""
       << JsonEscape(e.program) << "\",\"ph\":\"X\",\"ts\":" << std::fixed
       << std::setprecision(3) << e.start_us << ",\"dur\":" << e.duration_us
       << ",\"pid\":1,\"tid\":\"" << JsonEscape(e.program)
       << "\",\"args\":{\"instruction\":" << e.index << "}}";
  }
  os << "],\"displayTimeUnit\":\"ms\"}";
  return os.str();
}

}  // namespace metafuse::runtime

// Per-instruction profiling of compiled programs.
//
// While a ProfileSession is active on a thread, every Program::Run on that
// thread records one event per instruction (operator name, program label,
// start and duration). Summaries group by operator; ChromeTrace() renders the
// events in the Chrome trace-event JSON format (chrome://tracing, Perfetto).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace metafuse::runtime {

struct ProfileEvent {
  std::string program;  // e.g. "forward", "backward"
  std::string op;       // e.g. "aten::mm"
  int64_t index = 0;    // instruction index within the program
  double start_us = 0;  // since the session began
  double duration_us = 0;
};

class ProfileSession {
 public:
  ProfileSession();   // becomes the active session of this thread
  ~ProfileSession();  // restores the previous one
  ProfileSession(const ProfileSession&) = delete;
  ProfileSession& operator=(const ProfileSession&) = delete;

  const std::vector<ProfileEvent>& events() const { return events_; }
  // One line per (program, op): calls, total and mean microseconds, share.
  std::string Summary() const;
  std::string ChromeTrace() const;

  // The active session of this thread, or nullptr (the common case: one
  // thread-local load per Program::Run).
  static ProfileSession* Active();
  // Programs run while a ProfileScope is open are recorded as
  // "<scope>/<program>" (e.g. "recompute/forward": a looped inner loop's
  // recomputed steps).
  const std::string& scope() const { return scope_; }
  void Record(const std::string& program, const std::string& op, int64_t index,
              std::chrono::steady_clock::time_point start,
              std::chrono::steady_clock::time_point end);

 private:
  friend class ProfileScope;
  std::string scope_;
  std::chrono::steady_clock::time_point origin_;
  std::vector<ProfileEvent> events_;
  ProfileSession* previous_;
};

// Names the programs recorded while it is open on this thread (nothing when
// no session is active).
class ProfileScope {
 public:
  explicit ProfileScope(const std::string& scope);
  ~ProfileScope();
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  ProfileSession* session_;
  std::string previous_;
};

}  // namespace metafuse::runtime

// runtime/base/profiler: sessions are per thread and nest (the inner one
// records, the outer one resumes after it), ProfileScope names what is
// recorded and nests, nothing is recorded without a session; events carry
// the times they were given; Summary's calls, totals, means and shares and
// ChromeTrace's events are checked against the durations recorded here; and
// Program::Run records one event per instruction, in order.
#include "runtime/base/profiler.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/executor/program.h"

namespace metafuse::runtime {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::microseconds;

// Records an event of `us` microseconds starting at `at`.
void RecordFor(ProfileSession* s, const std::string& program, const std::string& op,
               int64_t index, Clock::time_point at, int64_t us) {
  s->Record(program, op, index, at, at + microseconds(us));
}

TEST(Profiler, NoSessionUntilOneIsOpen) {
  EXPECT_EQ(ProfileSession::Active(), nullptr);
  {
    ProfileSession session;
    EXPECT_EQ(ProfileSession::Active(), &session);
  }
  EXPECT_EQ(ProfileSession::Active(), nullptr);
}

TEST(Profiler, SessionsNestAndTheOuterOneResumes) {
  ProfileSession outer;
  const Clock::time_point t = Clock::now();
  {
    ProfileSession inner;
    EXPECT_EQ(ProfileSession::Active(), &inner);
    RecordFor(ProfileSession::Active(), "forward", "aten::mm", 0, t, 5);
    EXPECT_EQ(inner.events().size(), 1u);
  }
  EXPECT_EQ(ProfileSession::Active(), &outer);
  EXPECT_TRUE(outer.events().empty());
}

TEST(Profiler, AnEventKeepsItsTimes) {
  const Clock::time_point before = Clock::now();
  ProfileSession session;
  const Clock::time_point after = Clock::now();
  // 100 us after `after`, lasting 250 us: the duration is exact (a whole
  // number of nanoseconds converted once); the start is 100 us plus the
  // session's age at `after`, which lies in [0, after - before].
  session.Record("forward", "aten::add", 3, after + microseconds(100),
                 after + microseconds(350));
  ASSERT_EQ(session.events().size(), 1u);
  const ProfileEvent& e = session.events()[0];
  EXPECT_EQ(e.program, "forward");
  EXPECT_EQ(e.op, "aten::add");
  EXPECT_EQ(e.index, 3);
  EXPECT_EQ(e.duration_us, 250.0);
  const double slack =
      std::chrono::duration<double, std::micro>(after - before).count();
  EXPECT_GE(e.start_us, 100.0);
  EXPECT_LE(e.start_us, 100.0 + slack);
}

TEST(Profiler, ScopesNameProgramsAndNest) {
  ProfileSession session;
  const Clock::time_point t = Clock::now();
  RecordFor(&session, "forward", "a", 0, t, 1);
  {
    ProfileScope recompute("recompute");
    EXPECT_EQ(session.scope(), "recompute");
    RecordFor(&session, "forward", "b", 0, t, 1);
    {
      // An inner scope replaces the name; it does not append to it.
      ProfileScope step("step3");
      RecordFor(&session, "backward", "c", 0, t, 1);
    }
    RecordFor(&session, "forward", "d", 0, t, 1);
  }
  RecordFor(&session, "forward", "e", 0, t, 1);
  const std::vector<std::string> want = {"forward", "recompute/forward", "step3/backward",
                                         "recompute/forward", "forward"};
  ASSERT_EQ(session.events().size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(session.events()[i].program, want[i]) << "event " << i;
  }
  EXPECT_EQ(session.scope(), "");
}

TEST(Profiler, AScopeWithoutASessionDoesNothing) {
  {
    ProfileScope orphan("ignored");
    // A session opened inside a scope starts unnamed: a scope names only
    // the session that was active when it opened.
    ProfileSession session;
    EXPECT_EQ(session.scope(), "");
    RecordFor(&session, "forward", "a", 0, Clock::now(), 1);
    ASSERT_EQ(session.events().size(), 1u);
    EXPECT_EQ(session.events()[0].program, "forward");
  }
  EXPECT_EQ(ProfileSession::Active(), nullptr);
}

TEST(Profiler, SessionsArePerThread) {
  ProfileSession mine;
  ProfileSession* seen_there = &mine;
  size_t recorded_there = 0;
  std::thread other([&] {
    seen_there = ProfileSession::Active();
    ProfileSession theirs;
    RecordFor(&theirs, "forward", "x", 0, Clock::now(), 1);
    recorded_there = theirs.events().size();
  });
  other.join();
  EXPECT_EQ(seen_there, nullptr);
  EXPECT_EQ(recorded_there, 1u);
  EXPECT_EQ(ProfileSession::Active(), &mine);
  EXPECT_TRUE(mine.events().empty());
}

// The Summary's row of (program, op), split on white space.
std::vector<std::string> Row(const std::string& summary, const std::string& program,
                             const std::string& op) {
  std::istringstream lines(summary);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string word; words >> word;) w.push_back(word);
    if (w.size() == 6 && w[0] == program && w[1] == op) return w;
  }
  ADD_FAILURE() << "no row for " << program << " " << op << " in\n" << summary;
  return std::vector<std::string>(6);
}

TEST(Profiler, SummaryCountsAndTotals) {
  ProfileSession session;
  const Clock::time_point t = Clock::now();
  // mm: 3 calls, 100 + 200 + 300 = 600 us; add: 2 calls, 50 + 150 = 200
  // us, and add in another program: 200 us. All: 1000 us.
  RecordFor(&session, "forward", "aten::mm", 0, t, 100);
  RecordFor(&session, "forward", "aten::add", 1, t, 50);
  RecordFor(&session, "forward", "aten::mm", 2, t, 200);
  RecordFor(&session, "forward", "aten::add", 3, t, 150);
  RecordFor(&session, "forward", "aten::mm", 4, t, 300);
  RecordFor(&session, "backward", "aten::add", 0, t, 200);
  const std::string summary = session.Summary();
  EXPECT_EQ(Row(summary, "forward", "aten::mm"),
            (std::vector<std::string>{"forward", "aten::mm", "3", "600.0", "200.0", "60.0%"}));
  EXPECT_EQ(Row(summary, "forward", "aten::add"),
            (std::vector<std::string>{"forward", "aten::add", "2", "200.0", "100.0", "20.0%"}));
  EXPECT_EQ(Row(summary, "backward", "aten::add"),
            (std::vector<std::string>{"backward", "aten::add", "1", "200.0", "200.0", "20.0%"}));
  // Rows by total time, largest first.
  EXPECT_LT(summary.find("aten::mm"), summary.find("aten::add"));
  EXPECT_NE(summary.find("total 1000.0 us in 6 instructions"), std::string::npos) << summary;
}

TEST(Profiler, EmptySummary) {
  ProfileSession session;
  EXPECT_NE(session.Summary().find("total 0.0 us in 0 instructions"), std::string::npos);
  EXPECT_EQ(session.ChromeTrace(), "{\"traceEvents\":[],\"displayTimeUnit\":\"ms\"}");
}

TEST(Profiler, ChromeTraceHasOneCompleteEventPerRecord) {
  ProfileSession session;
  const Clock::time_point t = Clock::now();
  RecordFor(&session, "forward", "aten::mm", 7, t, 42);
  {
    ProfileScope scope("re\"compute");  // a quote in a name is escaped
    RecordFor(&session, "back\\ward", "aten::add", 1, t, 5);
  }
  const std::string trace = session.ChromeTrace();
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = trace.find(what); at != std::string::npos; at = trace.find(what, at + 1)) {
      ++n;
    }
    return n;
  };
  EXPECT_EQ(count("\"ph\":\"X\""), 2u) << trace;
  EXPECT_NE(trace.find("\"name\":\"aten::mm\",\"cat\":\"forward\""), std::string::npos) << trace;
  EXPECT_NE(trace.find("\"dur\":42.000"), std::string::npos) << trace;
  EXPECT_NE(trace.find("\"args\":{\"instruction\":7}"), std::string::npos) << trace;
  EXPECT_NE(trace.find("\"cat\":\"re\\\"compute/back\\\\ward\""), std::string::npos) << trace;
  EXPECT_NE(trace.find("\"dur\":5.000"), std::string::npos) << trace;
  EXPECT_EQ(trace.front(), '{');
  EXPECT_EQ(trace.back(), '}');
}

// relu then neg of the one input: two operator instructions.
ProgramCode TwoInstructions() {
  ProgramCode code;
  // Register k + 1 holds instruction k's result; register 0 the input.
  for (const char* op : {"relu", "neg"}) {
    const int64_t in = static_cast<int64_t>(code.instructions.size());
    code.instructions.push_back({InstructionKind::kOperator, std::string("aten::") + op,
                                 std::string("aten::") + op + "(Tensor self) -> Tensor", -1,
                                 {in}, {in + 1}});
  }
  code.label = "forward";
  code.num_registers = static_cast<int64_t>(code.instructions.size()) + 1;
  code.input_registers = {0};
  code.output_registers = {code.num_registers - 1};
  return code;
}

TEST(Profiler, ProgramRunRecordsEachInstruction) {
  Program program(TwoInstructions());
  const at::Tensor x = torch::tensor({-1.0, 2.0});
  program.Run({x});  // no session: nothing recorded, nothing fails
  ProfileSession session;
  for (int run = 0; run < 3; ++run) {
    const auto out = program.Run({x});
    EXPECT_TRUE(at::equal(out[0].toTensor(), torch::tensor({0.0, -2.0})));
  }
  {
    ProfileScope scope("recompute");
    program.Run({x});
  }
  ASSERT_EQ(session.events().size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    const ProfileEvent& e = session.events()[i];
    EXPECT_EQ(e.index, static_cast<int64_t>(i % 2)) << i;
    EXPECT_EQ(e.op, i % 2 == 0 ? "aten::relu" : "aten::neg") << i;
    EXPECT_EQ(e.program, i < 6 ? "forward" : "recompute/forward") << i;
    EXPECT_GE(e.duration_us, 0.0) << i;
    // Events are recorded as the instructions end: each starts no earlier
    // than the one before.
    if (i > 0) EXPECT_GE(e.start_us, session.events()[i - 1].start_us) << i;
  }
}

}  // namespace
}  // namespace metafuse::runtime

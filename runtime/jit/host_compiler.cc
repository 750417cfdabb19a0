#include "runtime/jit/host_compiler.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "runtime/base/options.h"

extern char** environ;

namespace metafuse::runtime {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// The first `lines` lines of compiler output, for an error message.
std::string Head(const std::string& text, int lines) {
  std::vector<std::string> all = absl::StrSplit(text, '\n');
  if (static_cast<int>(all.size()) <= lines) return text;
  all.resize(lines);
  return absl::StrCat(absl::StrJoin(all, "\n"), "\n...");
}

// An executable `name` on PATH (or `name` itself when it has a slash).
std::string OnPath(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    return access(name.c_str(), X_OK) == 0 ? name : "";
  }
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "", ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

struct Finished {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs argv[0] (a path) with `argv`, output to `log`, and waits.
absl::StatusOr<Finished> RunTool(const std::vector<std::string>& argv, const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot start ", argv[0], ": ", std::strerror(spawned)));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      return absl::InternalError(absl::StrCat("waiting for ", argv[0], ": ", std::strerror(errno)));
    }
  }
  Finished f;
  f.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  f.output = ReadFile(log);
  return f;
}

// A private directory removed with everything in it when it goes out of scope.
class TempDir {
 public:
  TempDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/metafuse-cxx-XXXXXX");
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    if (path_.empty()) return;
    for (const char* name : {"kernels.cc", "kernels.so", "compiler.log", "probe.log"}) {
      unlink(absl::StrCat(path_, "/", name).c_str());
    }
    rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

absl::StatusOr<std::string> FindHostCompiler() {
  if (const std::string chosen = OptionsFromEnvironment().cxx; !chosen.empty()) {
    std::string found = OnPath(chosen);
    if (found.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "METAFUSE_CXX='", chosen, "' is not an executable (expected a C++ compiler such as "
          "g++ or clang++, a path or a name on PATH)"));
    }
    return found;
  }
  for (const char* name : {"c++", "g++", "clang++"}) {
    if (std::string found = OnPath(name); !found.empty()) return found;
  }
  return absl::NotFoundError(
      "no C++ compiler found (looked for c++, g++ and clang++ on PATH); install g++ "
      "(apt-get install -y g++) or set METAFUSE_CXX to one");
}

absl::StatusOr<std::string> HostCompilerVersion() {
  auto compiler = FindHostCompiler();
  if (!compiler.ok()) return compiler.status();
  static std::mutex mu;
  static auto* versions = new std::map<std::string, std::string>();
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = versions->find(*compiler); it != versions->end()) return it->second;
  TempDir dir;
  if (dir.path().empty()) return absl::InternalError("cannot create a temporary directory");
  auto ran = RunTool({*compiler, "--version"}, dir.path() + "/probe.log");
  if (!ran.ok()) return ran.status();
  if (ran->exit_code != 0) {
    return absl::FailedPreconditionError(absl::StrCat(*compiler, " --version failed: ",
                                                      Head(ran->output, 5)));
  }
  std::string first = ran->output.substr(0, ran->output.find('\n'));
  std::string version = absl::StrCat(*compiler, ": ", first);
  versions->emplace(*compiler, version);
  return version;
}

std::string HostCodeTarget() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) return "x86-64-v4";
  if (__builtin_cpu_supports("x86-64-v3")) return "x86-64-v3";
  if (__builtin_cpu_supports("x86-64-v2")) return "x86-64-v2";
  return "x86-64";
#elif defined(__aarch64__)
  return "aarch64 baseline";
#else
  return "unknown baseline";
#endif
}

std::string MarchFlagFor(const std::string& target) {
  if (target.rfind("x86-64", 0) == 0) return "-march=" + target;
  return "";
}

absl::Status CpuCanRun(const std::string& target) {
  const std::string host = HostCodeTarget();
  if (target == host) return absl::OkStatus();
  // x86-64 levels are ordered: code for a level runs on every higher one.
  const std::vector<std::string> levels = {"x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4"};
  auto rank = [&](const std::string& t) {
    for (size_t i = 0; i < levels.size(); ++i) {
      if (levels[i] == t) return static_cast<int>(i);
    }
    return -1;
  };
  if (rank(target) >= 0 && rank(host) >= rank(target)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "its shared object was compiled for '", target, "' and this CPU is '", host, "'"));
}

absl::StatusOr<std::string> CompileSharedObject(const std::string& source,
                                                const std::string& label) {
  auto compiler = FindHostCompiler();
  if (!compiler.ok()) return compiler.status();
  TempDir dir;
  if (dir.path().empty()) {
    return absl::InternalError(absl::StrCat("compiling ", label,
                                            ": cannot create a temporary directory (TMPDIR)"));
  }
  const std::string src = dir.path() + "/kernels.cc", out = dir.path() + "/kernels.so";
  {
    std::ofstream f(src, std::ios::binary);
    f << source;
    if (!f.good()) return absl::InternalError(absl::StrCat("cannot write ", src));
  }
  std::vector<std::string> argv = {*compiler};
  for (absl::string_view flag : absl::StrSplit(kSharedObjectFlags, ' ', absl::SkipEmpty())) {
    argv.emplace_back(flag);
  }
  if (std::string march = MarchFlagFor(HostCodeTarget()); !march.empty()) argv.push_back(march);
  argv.insert(argv.end(), {"-o", out, src});
  auto ran = RunTool(argv, dir.path() + "/compiler.log");
  if (!ran.ok()) return ran.status();
  if (ran->exit_code != 0) {
    return absl::InternalError(absl::StrCat("compiling ", label, " with ", *compiler,
                                            " failed (exit ", ran->exit_code, "):\n",
                                            Head(ran->output, 20)));
  }
  std::string bytes = ReadFile(out);
  if (bytes.empty()) {
    return absl::InternalError(absl::StrCat(*compiler, " wrote no shared object for ", label));
  }
  return bytes;
}

}  // namespace metafuse::runtime

#include "runtime/base/kernel_cache.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace metafuse::runtime {
namespace {

std::string FreshDirectory(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp ? tmp : "/tmp") + "/" + name + "_" +
                    std::to_string(getpid());
  std::string cmd = "rm -rf '" + dir + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  return dir;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

std::vector<std::string> ListDirectory(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    closedir(d);
  }
  return names;
}

const KernelKey kKey{"define void @k() { ret void }", "x86_64 avx2", "metafuse 0.1"};

TEST(KernelCache, StoresAndLoadsAcrossInstances) {
  const std::string dir = FreshDirectory("roundtrip");
  {
    auto cache = KernelCache::Open(dir);
    ASSERT_TRUE(cache.ok()) << cache.status();
    EXPECT_FALSE((*cache)->Lookup(kKey).has_value());
    ASSERT_TRUE((*cache)->Store(kKey, std::string("\0binary\xff", 8)).ok());
    EXPECT_EQ((*cache)->Lookup(kKey).value(), std::string("\0binary\xff", 8));
    EXPECT_EQ((*cache)->stats().memory_hits, 1);
  }
  auto again = KernelCache::Open(dir);  // a new process would do the same
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->Lookup(kKey).value(), std::string("\0binary\xff", 8));
  EXPECT_EQ((*again)->stats().disk_hits, 1);
  KernelKey other = kKey;
  other.target = "x86_64 avx512";  // a different target is a different kernel
  EXPECT_FALSE((*again)->Lookup(other).has_value());
}

TEST(KernelCache, DirectoryIsPrivateToTheUser) {
  const std::string dir = FreshDirectory("private");
  ASSERT_EQ(mkdir(dir.c_str(), 0777), 0);
  chmod(dir.c_str(), 0777);
  ASSERT_TRUE(KernelCache::Open(dir).ok());
  struct stat st;
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_FALSE(KernelCache::Open("relative/path").ok());
}

TEST(KernelCache, DefaultDirectoryFollowsXdgCacheHome) {
  setenv("XDG_CACHE_HOME", "/some/cache", 1);
  EXPECT_EQ(DefaultKernelCacheDirectory(), "/some/cache/metafuse/kernels");
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(DefaultKernelCacheDirectory(), "/home/someone/.cache/metafuse/kernels");
}

class DamagedEntry : public ::testing::TestWithParam<int> {};

// 0: truncated, 1: a flipped byte in the artifact, 2: another key's entry
// under this key's file name (a hash collision).
TEST_P(DamagedEntry, IsNeverLoadedAndIsRebuilt) {
  const std::string dir = FreshDirectory("damaged" + std::to_string(GetParam()));
  const std::string artifact(1000, 'k');
  {
    auto cache = KernelCache::Open(dir);
    ASSERT_TRUE((*cache)->Store(kKey, artifact).ok());
  }
  auto cache = KernelCache::Open(dir);
  const std::string path = (*cache)->PathFor(kKey);
  std::string data = ReadFile(path);
  if (GetParam() == 0) {
    data.resize(data.size() / 2);
  } else if (GetParam() == 1) {
    data[data.size() - 100] ^= 0x01;
  } else {
    auto other = KernelCache::Open(FreshDirectory("collision"));
    KernelKey different = kKey;
    different.ir = "define void @other() { ret void }";
    ASSERT_TRUE((*other)->Store(different, artifact).ok());
    data = ReadFile((*other)->PathFor(different));
  }
  WriteFile(path, data);
  EXPECT_FALSE((*cache)->Lookup(kKey).has_value());
  EXPECT_EQ((*cache)->stats().corrupted, 1);
  bool built = false;
  auto rebuilt = (*cache)->GetOrBuild(kKey, [&] { return absl::StatusOr<std::string>(artifact); },
                                      &built);
  ASSERT_TRUE(rebuilt.ok());
  EXPECT_TRUE(built);
  EXPECT_EQ(*rebuilt, artifact);
  auto fresh = KernelCache::Open(dir);
  EXPECT_EQ((*fresh)->Lookup(kKey).value(), artifact);
}

INSTANTIATE_TEST_SUITE_P(Kinds, DamagedEntry, ::testing::Values(0, 1, 2));

TEST(KernelCache, ConcurrentProcessesNeverSeeAPartialEntry) {
  const std::string dir = FreshDirectory("concurrent");
  ASSERT_TRUE(KernelCache::Open(dir).ok());
  constexpr int kProcesses = 6, kRounds = 40;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int bad = 0;
      for (int r = 0; r < kRounds; ++r) {
        KernelKey key = kKey;
        key.ir += std::to_string(r % 5);  // a few kernels, all contended
        const std::string artifact(200000 + r % 5, static_cast<char>('a' + r % 5));
        auto cache = KernelCache::Open(dir);
        if (!cache.ok()) _exit(2);
        auto got = (*cache)->GetOrBuild(key, [&] {
          return absl::StatusOr<std::string>(artifact);
        });
        if (!got.ok() || *got != artifact) ++bad;
      }
      _exit(bad == 0 ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child failed";
  }
  for (const std::string& name : ListDirectory(dir)) {
    EXPECT_EQ(name.find(".tmp."), std::string::npos) << "leftover " << name;
  }
  EXPECT_EQ(ListDirectory(dir).size(), 5u);
}

}  // namespace
}  // namespace metafuse::runtime

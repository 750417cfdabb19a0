#include "runtime/tuning/measured_choice.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "runtime/base/kernel_cache.h"

namespace metafuse::runtime {
namespace {

// FNV-1a, enough to name a file after the machine's identity.
uint64_t Hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// One table: its choices by "<identity>|<key>" and the lock its lookups
// and measurements hold.
struct Table {
  std::mutex mutex;
  std::map<std::string, std::string> choices;
};

std::mutex tables_mutex;

// The report: records in first-made order, one per (table, key).
std::mutex report_mutex;
std::vector<ChoiceRecord>& Report() {
  static auto* report = new std::vector<ChoiceRecord>();
  return *report;
}
std::map<std::string, size_t>& ReportIndex() {
  static auto* index = new std::map<std::string, size_t>();
  return *index;
}

std::map<std::string, std::unique_ptr<Table>>& Tables() {
  static auto* tables = new std::map<std::string, std::unique_ptr<Table>>();
  return *tables;
}

Table& TableNamed(const std::string& name) {
  std::lock_guard<std::mutex> lock(tables_mutex);
  auto& slot = Tables()[name];
  if (!slot) slot = std::make_unique<Table>();
  return *slot;
}

void ReadChoices(int fd, const std::string& prefix, std::map<std::string, std::string>* into) {
  std::string data;
  char buffer[4096];
  lseek(fd, 0, SEEK_SET);
  for (ssize_t got; (got = read(fd, buffer, sizeof buffer)) > 0;) data.append(buffer, got);
  std::istringstream lines(data);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t tab = line.find('\t');
    if (tab == std::string::npos || tab == 0) continue;  // also a partial last line
    const size_t end = line.find('\t', tab + 1);
    if (end == std::string::npos || end == tab + 1) continue;
    into->emplace(prefix + line.substr(0, tab), line.substr(tab + 1, end - tab - 1));
  }
}

}  // namespace

const char* ChoiceSourceName(ChoiceSource source) {
  switch (source) {
    case ChoiceSource::kMeasured: return "measured";
    case ChoiceSource::kMachineFile: return "machine file";
    case ChoiceSource::kSetting: return "setting";
  }
  return "?";
}

void RecordChoice(const ChoiceRecord& record) {
  std::lock_guard<std::mutex> lock(report_mutex);
  const std::string id = record.table + "\t" + record.key;
  if (ReportIndex().count(id)) return;
  ReportIndex()[id] = Report().size();
  Report().push_back(record);
}

std::vector<ChoiceRecord> ChoiceReport() {
  std::lock_guard<std::mutex> lock(report_mutex);
  return Report();
}

const std::string& CpuModel() {
  static const std::string model = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("model name", 0) == 0) {
        const size_t colon = line.find(':');
        return colon == std::string::npos ? line : line.substr(colon + 1);
      }
    }
    return std::string("unknown cpu");
  }();
  return model;
}

std::string MeasuredChoiceFile(const std::string& table, const std::string& identity) {
  KernelCache* cache = ProcessKernelCache();
  if (cache == nullptr) return "";
  char name[32];
  std::snprintf(name, sizeof name, "-%016llx.txt",
                static_cast<unsigned long long>(Hash(identity)));
  return absl::StrCat(cache->directory(), "/", table, name);
}

std::string ChooseMeasured(const std::string& table_name, const std::string& identity,
                           const std::string& key,
                           const std::function<std::string(std::string* note)>& measure) {
  Table& table = TableNamed(table_name);
  const std::string prefix = identity + "|";
  std::lock_guard<std::mutex> lock(table.mutex);
  if (auto it = table.choices.find(prefix + key); it != table.choices.end()) return it->second;
  const std::string path = MeasuredChoiceFile(table_name, identity);
  const int fd = path.empty() ? -1 : open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  // Measured and written under the file lock: a second process waits, then
  // reads this one's choice instead of making its own.
  const bool locked = fd >= 0 && flock(fd, LOCK_EX) == 0;
  if (locked) {
    ReadChoices(fd, prefix, &table.choices);
    if (auto it = table.choices.find(prefix + key); it != table.choices.end()) {
      flock(fd, LOCK_UN);
      close(fd);
      RecordChoice({table_name, key, it->second, ChoiceSource::kMachineFile, path});
      return it->second;
    }
  }
  std::string note;
  std::string chosen;
  try {
    chosen = measure(&note);
  } catch (...) {
    if (fd >= 0) close(fd);  // also releases the lock
    throw;
  }
  table.choices.emplace(prefix + key, chosen);
  RecordChoice({table_name, key, chosen, ChoiceSource::kMeasured, note});
  if (locked) {
    const std::string line = absl::StrCat(key, "\t", chosen, "\t", note, "\n");
    lseek(fd, 0, SEEK_END);
    // A short write leaves a partial last line, which ReadChoices skips.
    [[maybe_unused]] const ssize_t written = write(fd, line.data(), line.size());
    flock(fd, LOCK_UN);
  }
  if (fd >= 0) close(fd);
  return chosen;
}

at::Tensor RunFastest(const std::string& table, const std::string& identity,
                      const std::string& key, const std::vector<Candidate>& candidates) {
  TORCH_INTERNAL_ASSERT(!candidates.empty());
  if (candidates.size() == 1) return candidates[0].run();
  std::vector<at::Tensor> results(candidates.size());
  const std::string chosen =
      ChooseMeasured(table, identity, key, [&](std::string* note) {
        std::vector<TimedCandidate> timed;
        for (size_t i = 0; i < candidates.size(); ++i) {
          timed.push_back({candidates[i].name, [&, i] { results[i] = candidates[i].run(); }});
        }
        const Timing timing = TimeCandidates(timed);
        *note = timing.note;
        return candidates[timing.winner].name;
      });
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (candidates[i].name != chosen) continue;
    return results[i].defined() ? results[i] : candidates[i].run();
  }
  // A file written with other candidates under this key (it names them, so
  // only a damaged file): the first.
  return candidates[0].run();
}

void ClearMeasuredChoicesForTesting() {
  {
    std::lock_guard<std::mutex> lock(report_mutex);
    Report().clear();
    ReportIndex().clear();
  }
  std::lock_guard<std::mutex> lock(tables_mutex);
  // Tables stay (a reference may be held); their choices go.
  for (auto& [name, table] : Tables()) {
    std::lock_guard<std::mutex> table_lock(table->mutex);
    table->choices.clear();
  }
}

}  // namespace metafuse::runtime

// The tuning library's cache and report. Every measured choice between
// interchangeable implementations goes through it: which GEMM runs a small
// product and which algorithm a convolution (runtime/compute), whether a
// grouped convolution is split (compiler/fusion), and through
// metafuse._C._tuning the fusion check and metafuse.vmap's strategy
// (Python). Candidates are timed by one rule (timing_rule.h). The
// first call of a key measures, and the winner is kept per process and on
// disk, in the kernel cache directory, one file per table and machine
// identity (appended under a file lock). Every later process on the machine
// reads the file instead of measuring, so it runs the same implementation
// for a key and computes the same bits; and nobody pays the measurement
// twice.
//
// Lines of a file: "<key>\t<choice>\t<note>" (the note: the times measured,
// for a reader); the first line of a key wins (a later one can only come
// from a process that measured before it saw the file, which the lock
// prevents).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/tuning/timing_rule.h"

#include <ATen/ATen.h>

namespace metafuse::runtime {

// The CPU's model name (/proc/cpuinfo), part of every machine identity.
const std::string& CpuModel();

// The file table `table` of machine `identity` is kept in ("" when the
// cache directory is not usable: the choices then last one process).
std::string MeasuredChoiceFile(const std::string& table, const std::string& identity);

// The choice for `key` in `table` on `identity`: from this process's table,
// else the file, else `measure` (which returns the choice and writes a note
// of its times), recorded in both. Keys and choices hold no tab or newline.
// Measurements of one table run one at a time (under its lock), so that two
// threads never time against each other.
std::string ChooseMeasured(const std::string& table, const std::string& identity,
                           const std::string& key,
                           const std::function<std::string(std::string* note)>& measure);

// Where a choice came from.
enum class ChoiceSource {
  kMeasured,     // timed in this process
  kMachineFile,  // read from the machine's file (timed by an earlier process)
  kSetting,      // an environment variable or argument chose it
};
const char* ChoiceSourceName(ChoiceSource source);

// One line of the report: what was chosen for what, and why.
struct ChoiceRecord {
  std::string table, key, choice;
  ChoiceSource source = ChoiceSource::kMeasured;
  std::string note;  // the times measured, or the setting
};

// Adds a choice made outside ChooseMeasured (a setting, or a choice kept on
// the object it belongs to) to the report; the first record of a
// (table, key) stays.
void RecordChoice(const ChoiceRecord& record);

// Every choice this process made or read, in the order first made.
std::vector<ChoiceRecord> ChoiceReport();

// One way to compute a value, for RunFastest.
struct Candidate {
  std::string name;  // no space, tab or newline
  std::function<at::Tensor()> run;
};

// The result of the winner of `candidates` (interchangeable ways to compute
// one value; the first is the default), chosen by ChooseMeasured: the first
// call of a key on the machine times them by the timing rule
// (timing_rule.h; a candidate that throws is out of the running, and only
// if every one throws does the call fail, with the first error) and returns
// the winner's last result; later calls run the winner alone.
at::Tensor RunFastest(const std::string& table, const std::string& identity,
                      const std::string& key, const std::vector<Candidate>& candidates);

// Forgets this process's tables and report (tests; the files stay).
void ClearMeasuredChoicesForTesting();

}  // namespace metafuse::runtime

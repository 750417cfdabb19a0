// A machine's measured choices between interchangeable implementations
// (which GEMM runs a small product, which algorithm a convolution): the
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

// One way to compute a value, for RunFastest.
struct Candidate {
  std::string name;  // no space, tab or newline
  std::function<at::Tensor()> run;
};

// The result of the fastest of `candidates` (interchangeable ways to
// compute one value), chosen by ChooseMeasured. The first call of a key on
// the machine runs every candidate once to warm it (oneDNN builds its
// primitives on first use), then twice more, alternating, each timed, and
// keeps the best time of each; a candidate over 4x the warm-up's fastest is
// not repeated, and one that throws is out of the running (only if every
// one throws does the call fail, with the first error). That call returns
// the winner's last result; later calls run the winner alone.
at::Tensor RunFastest(const std::string& table, const std::string& identity,
                      const std::string& key, const std::vector<Candidate>& candidates);

// Forgets this process's tables (tests; the files stay).
void ClearMeasuredChoicesForTesting();

}  // namespace metafuse::runtime

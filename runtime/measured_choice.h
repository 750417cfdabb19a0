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

// Forgets this process's tables (tests; the files stay).
void ClearMeasuredChoicesForTesting();

}  // namespace metafuse::runtime

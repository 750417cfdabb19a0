// Checks LibTorch pickle archives (torch.save's format, what
// torch::jit::pickle_save writes) before LibTorch reads them.
//
// LibTorch 1.13's zip reader (miniz behind PyTorchStreamReader) and its
// unpickler trust their input: a damaged archive makes them read outside it,
// leak, allocate what a size field claims, pop an empty stack, or give a
// tensor more elements than its storage holds. CheckPickleArchive accepts
// only archives as LibTorch's writer makes them, every member inside the
// bytes with its CRC-32, and a pickle that replays cleanly on a model of
// the unpickler's stack; the error says what is wrong, and where.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace metafuse::runtime {

absl::Status CheckPickleArchive(const std::string& bytes);

}  // namespace metafuse::runtime

// An error inside one pass, with the pass named.
//
// The driver (pipeline.cc) runs every pass through RunPass. An exception a
// pass throws names the pass and its file: a c10::Error gets it as context
// (its Python type, ValueError or RuntimeError, is kept), any other becomes
// a PassFailure. UnsupportedOp (autodiff/autodiff.h) passes unchanged: an
// operator outside the primitive set is the user's program, not a bug, and
// stays a user-facing fallback (the call runs eagerly, with a warning).
//
// What a PassFailure does depends on METAFUSE_STRICT (runtime/base/options.h):
// off (the default for users), the driver's fallbacks keep results correct
// (fusion abandoned with a warning, or the call run eagerly); on (the test
// suite sets it), it propagates and raises, so a bug in a pass fails the
// test that meets it instead of hiding behind a warning.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include <c10/util/Exception.h>

#include "compiler/autodiff/autodiff.h"
#include "runtime/base/options.h"

namespace metafuse::compiler {

class PassFailure : public std::runtime_error {
 public:
  PassFailure(const std::string& pass, const std::string& file, const std::string& what)
      : std::runtime_error("metafuse: internal error in pass '" + pass + "' (" + file +
                           "): " + what),
        pass_(pass) {}
  const std::string& pass() const { return pass_; }

 private:
  std::string pass_;
};

// Runs `run()` as pass `name` (in `file`), naming it in any error it throws.
// METAFUSE_FAIL_PASS=<name> makes that pass throw (tests of the fallbacks
// and of strict mode).
template <typename F>
void RunPass(const char* name, const char* file, F&& run) {
  try {
    if (runtime::OptionsFromEnvironment().fail_pass == name) {
      throw std::runtime_error("failure injected by METAFUSE_FAIL_PASS");
    }
    run();
  } catch (const UnsupportedOp&) {
    throw;
  } catch (const PassFailure&) {
    throw;
  } catch (c10::Error& e) {
    e.add_context(std::string("in pass '") + name + "' (" + file + ")");
    throw;
  } catch (const std::exception& e) {
    throw PassFailure(name, file, e.what());
  }
}

}  // namespace metafuse::compiler

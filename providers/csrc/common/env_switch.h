// On/off testing and benchmarking switches read from the environment (README's table):
// read on every call, so a test can flip one between calls (getenv costs next to nothing).
#pragma once

#include <cstdlib>
#include <string>

#include "status.h"

namespace aotinfer {

// Unset or empty: on. "on" / "off" as given; any other value is an ArgumentError naming the
// variable (a ValueError in Python) before any launch.
inline bool env_switch_on(const char* name) {
  const char* pin = std::getenv(name);
  if (!pin || !*pin) return true;
  const std::string want(pin);
  if (want != "on" && want != "off") fail_argument(std::string(name) + " must be on or off, got '" + want + "'");
  return want == "on";
}

}  // namespace aotinfer

// On/off testing and benchmarking switches read from the environment (README's table):
// read on every call, so a test can flip one between calls (getenv costs next to nothing).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <initializer_list>
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

// A switch that picks one of `choices`: "" when unset or empty, else its value, which must be
// one of them; any other value is an ArgumentError ("NAME must be a, b or c, got 'x'") before
// any launch.
inline std::string env_choice(const char* name, std::initializer_list<const char*> choices) {
  const char* pin = std::getenv(name);
  std::string want = pin ? pin : "";
  if (want.empty()) return want;
  for (const char* c : choices)
    if (want == c) return want;
  std::string listed;
  std::size_t i = 0;
  for (const char* c : choices) {
    listed += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ");
    listed += c;
    ++i;
  }
  fail_argument(std::string(name) + " must be " + listed + ", got '" + want + "'");
}

}  // namespace aotinfer

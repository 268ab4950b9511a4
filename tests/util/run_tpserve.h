// Runs the real tpserve binary (TPSERVE_BIN, set by the test's CMake) as a user would, through popen, and
// returns its exit code and everything it printed (stdout + stderr).
#pragma once
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace tp::test {

struct Result {
  int code;         // exit status, or 128 + signal
  std::string out;  // stdout + stderr
};

inline Result run_tpserve(const std::string& args) {
  const std::string cmd = std::string(TPSERVE_BIN) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

}  // namespace tp::test

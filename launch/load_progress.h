// Weight-loading progress for people watching a start-up: layers loaded / total and MiB of weights this rank
// holds so far. On a terminal, one line redrawn in place (a bar) at most every 100 ms and once when done; on
// anything else (a log file, CI) at most four plain lines, at 25, 50, 75 and 100 % — never one per layer, and
// no timings, so two runs log the same text.
// Only rank 0 prints (ModelGroup gives the other ranks no printer).
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace tp {

class LoadProgressPrinter {
 public:
  // out: where to print (stderr); terminal: whether out is one (isatty).
  LoadProgressPrinter(std::FILE* out, bool terminal);
  // The plain lines (never a bar) handed to `line` instead, e.g. a Logger writing JSON lines.
  explicit LoadProgressPrinter(std::function<void(const std::string&)> line);
  // Ends a bar left unfinished (loading failed) with a newline, so the error that follows starts a line.
  ~LoadProgressPrinter();
  LoadProgressPrinter(const LoadProgressPrinter&) = delete;
  LoadProgressPrinter& operator=(const LoadProgressPrinter&) = delete;

  // done of total layers loaded, bytes of weights held so far. done == total ends the display.
  void update(int64_t done, int64_t total, int64_t bytes);

 private:
  using Clock = std::chrono::steady_clock;
  std::FILE* out_;
  bool terminal_;
  std::function<void(const std::string&)> line_;  // set: plain lines go here, not to out_
  Clock::time_point start_, last_draw_;
  int64_t quarters_printed_ = 0;  // plain lines: the last quarter printed
  bool drawn_ = false;     // terminal: a bar is on the line
  bool finished_ = false;
};

}  // namespace tp

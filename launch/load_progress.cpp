#include "launch/load_progress.h"

#include <algorithm>
#include <utility>

namespace tp {
namespace {

constexpr int kBarWidth = 30;
constexpr auto kRedrawEvery = std::chrono::milliseconds(100);

double mib(int64_t bytes) { return double(bytes) / double(int64_t(1) << 20); }

}  // namespace

LoadProgressPrinter::LoadProgressPrinter(std::FILE* out, bool terminal)
    : out_(out), terminal_(terminal), start_(Clock::now()), last_draw_(start_ - kRedrawEvery) {}

LoadProgressPrinter::LoadProgressPrinter(std::function<void(const std::string&)> line)
    : LoadProgressPrinter(nullptr, false) {
  line_ = std::move(line);
}

LoadProgressPrinter::~LoadProgressPrinter() {
  if (drawn_ && !finished_) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
}

void LoadProgressPrinter::update(int64_t done, int64_t total, int64_t bytes) {
  if (finished_ || total <= 0) return;
  done = std::clamp<int64_t>(done, 0, total);
  const bool last = done == total;
  const auto now = Clock::now();
  if (terminal_) {
    if (!last && now - last_draw_ < kRedrawEvery) return;
    last_draw_ = now;
    drawn_ = true;
    const int filled = int(done * kBarWidth / total);
    std::fprintf(out_, "\rloading weights [%s%s] %lld/%lld layers, %.1f MiB", std::string(size_t(filled), '#').c_str(),
                 std::string(size_t(kBarWidth - filled), '-').c_str(), (long long)done, (long long)total, mib(bytes));
    if (last) std::fprintf(out_, " in %.1f s\n", std::chrono::duration<double>(now - start_).count());
  } else {
    const int64_t quarter = done * 4 / total;
    if (quarter <= quarters_printed_) return;
    quarters_printed_ = quarter;
    char line[128];
    std::snprintf(line, sizeof line, "loading weights: %lld/%lld layers, %.1f MiB (%lld%%)", (long long)done,
                  (long long)total, mib(bytes), (long long)(done * 100 / total));
    if (line_) {
      line_(line);
      finished_ = last;
      return;
    }
    std::fprintf(out_, "%s\n", line);
  }
  std::fflush(out_);
  finished_ = last;
}

}  // namespace tp

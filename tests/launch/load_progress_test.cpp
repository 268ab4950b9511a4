// The weight-loading progress display: a log gets at most four plain lines (25/50/75/100 %) whatever the layer
// count; a terminal gets one line redrawn in place with a bar, throttled, ended by a newline; nothing after
// the end.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "launch/load_progress.h"

namespace tp {
namespace {

constexpr int64_t kMiB = int64_t(1) << 20;

// Runs `updates` through a printer writing to memory; returns what it printed.
// stop_at < n_layers: loading fails after that layer.
std::string printed(bool terminal, int64_t n_layers, int extra_updates_after_end = 0, int64_t stop_at = -1) {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  {
    LoadProgressPrinter p(f, terminal);
    for (int64_t i = 1; i <= (stop_at >= 0 ? stop_at : n_layers); ++i) p.update(i, n_layers, i * kMiB);
    for (int i = 0; i < extra_updates_after_end; ++i) p.update(n_layers, n_layers, 0);
  }
  std::fclose(f);
  std::string s(buf, len);
  std::free(buf);
  return s;
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t end = s.find('\n', pos);
    out.push_back(s.substr(pos, end - pos));
    pos = end == std::string::npos ? s.size() : end + 1;
  }
  return out;
}

TEST(LoadProgress, LogGetsAtMostFourLines) {
  const auto l = lines(printed(false, 30, 3));
  ASSERT_EQ(l.size(), 4u);
  EXPECT_EQ(l[0], "loading weights: 8/30 layers, 8.0 MiB (26%)");
  EXPECT_EQ(l[1], "loading weights: 15/30 layers, 15.0 MiB (50%)");
  EXPECT_EQ(l[2], "loading weights: 23/30 layers, 23.0 MiB (76%)");
  EXPECT_EQ(l[3], "loading weights: 30/30 layers, 30.0 MiB (100%)");  // no timing: runs log the same text
  EXPECT_EQ(lines(printed(false, 1000)).size(), 4u);
  const auto two = lines(printed(false, 2));
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0], "loading weights: 1/2 layers, 1.0 MiB (50%)");
}

TEST(LoadProgress, TerminalRedrawsOneLineWithABar) {
  const std::string s = printed(true, 2000, 5);
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(s.back(), '\n');
  EXPECT_EQ(lines(s).size(), 1u) << s;  // one line, redrawn with \r
  size_t redraws = 0;
  for (char c : s) redraws += c == '\r';
  EXPECT_GE(redraws, 2u);   // the first update and the end
  EXPECT_LT(redraws, 50u);  // 2000 quick updates, throttled to one redraw per 100 ms
  EXPECT_NE(s.find("\rloading weights [" + std::string(30, '#') + "] 2000/2000 layers, 2000.0 MiB in "),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("\rloading weights [" + std::string(30, '-') + "] 1/2000 layers, 1.0 MiB"), std::string::npos) << s;
}

TEST(LoadProgress, AnUnfinishedBarIsEndedSoTheErrorStartsALine) {
  const std::string s = printed(true, 30, 0, 3);
  EXPECT_EQ(s.rfind("\rloading weights [#-----------------------------] 1/30 layers, 1.0 MiB", 0), 0u) << s;
  EXPECT_EQ(lines(s).size(), 1u) << s;
  EXPECT_TRUE(s.ends_with(" MiB\n")) << s;
  EXPECT_EQ(printed(false, 30, 0, 3), "");  // a log: nothing printed before 25 %, nothing to end
}

}  // namespace
}  // namespace tp

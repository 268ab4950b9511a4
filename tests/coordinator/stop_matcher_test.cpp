// StopMatcher: stop strings across piece boundaries, minimal hold-back, never emitting the stop or after it.
#include "coordinator/stop_matcher.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tp {
namespace {

struct Run {
  std::string emitted;          // everything emitted, flush included when not stopped
  bool stopped = false;
  std::vector<std::string> per_push;
  std::optional<size_t> stop_index;
};

Run feed(std::vector<std::string> stops, const std::vector<std::string>& pieces) {
  StopMatcher m(std::move(stops));
  Run run;
  for (const auto& p : pieces) {
    auto r = m.push(p);
    run.per_push.push_back(r.text);
    run.emitted += r.text;
    if (r.stopped) {
      run.stopped = true;
      run.stop_index = r.stop_index;
      EXPECT_TRUE(m.stopped());
      EXPECT_EQ(m.flush(), "");
      return run;
    }
  }
  run.emitted += m.flush();
  return run;
}

TEST(StopMatcher, NoStopsPassesThrough) {
  auto r = feed({}, {"ab", "cd"});
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.per_push, (std::vector<std::string>{"ab", "cd"}));
}

TEST(StopMatcher, StopInsideOnePiece) {
  auto r = feed({"END"}, {"hello END world"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emitted, "hello ");
  EXPECT_EQ(r.stop_index, 0u);
}

TEST(StopMatcher, StopSplitOverThreePieces) {
  auto r = feed({"STOP"}, {"abc S", "T", "Oxx", "P tail", "more"});
  // "S" "T" "O" then "x" breaks it: the held "STO" is released once it cannot begin a stop.
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.emitted, "abc STOxxP tailmore");

  auto s = feed({"STOP"}, {"abc S", "T", "OP tail", "more"});
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.emitted, "abc ");
  EXPECT_EQ(s.per_push, (std::vector<std::string>{"abc ", "", ""}));
}

TEST(StopMatcher, HoldsOnlyMinimalSuffix) {
  StopMatcher m({"</end>"});
  auto r = m.push("text </e");
  EXPECT_EQ(r.text, "text ");
  EXPECT_EQ(m.n_held(), 3u);
  r = m.push("x");  // "</ex" cannot begin "</end>": all released
  EXPECT_EQ(r.text, "</ex");
  EXPECT_EQ(m.n_held(), 0u);
  r = m.push("<");
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(m.flush(), "<");
}

TEST(StopMatcher, OverlappingPrefix) {
  // "aab" with stop "ab": the first "a" is safe once the second arrives; the match starts at index 1.
  auto r = feed({"ab"}, {"a", "a", "b", "c"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emitted, "a");
  EXPECT_EQ(r.per_push, (std::vector<std::string>{"", "a", ""}));
  // Self-overlapping stop: "aaab" held as "aa" then "aaa" must keep a suffix that still begins "aab".
  auto s = feed({"aab"}, {"a", "a", "a", "b"});
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.emitted, "a");
}

TEST(StopMatcher, MultipleStopsEarliestWins) {
  auto r = feed({"world", "lo w"}, {"hel", "lo world"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emitted, "hel");
  EXPECT_EQ(r.stop_index, 1u);
  // The longer candidate prefix governs the hold-back.
  StopMatcher m({"x", "yz"});
  EXPECT_EQ(m.push("ay").text, "a");
  EXPECT_EQ(m.push("q").text, "yq");
}

TEST(StopMatcher, EmptyStopIgnoredIndexKept) {
  auto r = feed({"", "b"}, {"ab"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emitted, "a");
  EXPECT_EQ(r.stop_index, 1u);
}

TEST(StopMatcher, NoStopFlushesEverything) {
  auto r = feed({"\n\n"}, {"line\n"});
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.per_push, (std::vector<std::string>{"line"}));
  EXPECT_EQ(r.emitted, "line\n");
}

TEST(StopMatcher, Unicode) {
  // "😀" is 4 bytes; the stop "é😀" spans pieces, and a partial match on "é" is released whole.
  auto r = feed({"é😀"}, {"caf", "é", "😀 après"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emitted, "caf");
  auto s = feed({"é😀"}, {"café", " ok", "ü"});
  EXPECT_FALSE(s.stopped);
  EXPECT_EQ(s.per_push, (std::vector<std::string>{"caf", "é ok", "ü"}));
  EXPECT_EQ(s.emitted, "café okü");
}

TEST(StopMatcher, StopAtVeryStart) {
  auto r = feed({"###"}, {"#", "##", "rest"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emitted, "");
}

// Against a naive oracle: the emitted text always equals the full text cut at the first stop, for every
// way of splitting the text into pieces of 1..3 bytes.
TEST(StopMatcher, MatchesOracleForAllSplits) {
  const std::vector<std::string> stops = {"aba", "bb", "cab"};
  const std::vector<std::string> texts = {"abababba", "ccabx", "aabbaab", "xyz", "abcabab", "ab"};
  for (const auto& text : texts) {
    size_t cut = text.size();
    for (const auto& s : stops) cut = std::min(cut, text.find(s) == std::string::npos ? text.size() : text.find(s));
    // Enumerate splits via a bit mask over the n-1 gaps.
    size_t n = text.size();
    for (uint32_t mask = 0; mask < (1u << (n - 1)); ++mask) {
      std::vector<std::string> pieces;
      size_t start = 0;
      for (size_t i = 1; i <= n; ++i) {
        if (i == n || (mask >> (i - 1)) & 1u) {
          pieces.push_back(text.substr(start, i - start));
          start = i;
        }
      }
      auto r = feed(stops, pieces);
      ASSERT_EQ(r.emitted, text.substr(0, cut)) << text << " mask " << mask;
      ASSERT_EQ(r.stopped, cut < text.size()) << text;
    }
  }
}

}  // namespace
}  // namespace tp

// The logprobs JSON shapes (coordinator/openai_logprobs.h) with a fake token table: chat entries with bytes
// and top alternatives, completions' parallel arrays with the sampled token added to its top dict, -inf as
// -9999.0, and character offsets.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "coordinator/openai_logprobs.h"

namespace tp {
namespace {

using json = nlohmann::json;

std::string piece(int32_t id) {
  switch (id) {
    case 0: return " Paris";
    case 1: return ".";
    case 2: return "\xc3\xa9";   // "é", 2 bytes, 1 character
    case 3: return "\xe2\x80";   // half of a 3-byte character
    default: return "<" + std::to_string(id) + ">";
  }
}

TEST(OpenAiLogprobs, ChatEntriesWithBytesAndTopAlternatives) {
  json lp;
  append_logprobs(lp, true, piece, 0, {-0.25f, {0, 1}, {-0.25f, -2.0f}}, 0);
  append_logprobs(lp, true, piece, 2, {-1.5f, {}, {}}, 6);
  ASSERT_EQ(lp["content"].size(), 2u);
  const json& a = lp["content"][0];
  EXPECT_EQ(a["token"], " Paris");
  EXPECT_DOUBLE_EQ(a["logprob"].get<double>(), -0.25);
  EXPECT_EQ(a["bytes"], json::array({32, 80, 97, 114, 105, 115}));
  ASSERT_EQ(a["top_logprobs"].size(), 2u);
  EXPECT_EQ(a["top_logprobs"][1]["token"], ".");
  EXPECT_DOUBLE_EQ(a["top_logprobs"][1]["logprob"].get<double>(), -2.0);
  EXPECT_EQ(a["top_logprobs"][1]["bytes"], json::array({46}));
  EXPECT_EQ(lp["content"][1]["bytes"], json::array({0xc3, 0xa9}));
  EXPECT_TRUE(lp["content"][1]["top_logprobs"].empty());  // top_logprobs = 0
  EXPECT_EQ(empty_logprobs(true), json({{"content", json::array()}}));
}

TEST(OpenAiLogprobs, CompletionsArraysAddTheSampledTokenToItsTopDict) {
  json lp;
  const float ninf = -std::numeric_limits<float>::infinity();
  append_logprobs(lp, false, piece, 1, {-3.0f, {0}, {-0.1f}}, 0);  // sampled "." is not among the top 1
  append_logprobs(lp, false, piece, 0, {ninf, {0, 5}, {-0.2f, ninf}}, 1);
  EXPECT_EQ(lp["tokens"], json::array({".", " Paris"}));
  EXPECT_DOUBLE_EQ(lp["token_logprobs"][0].get<double>(), -3.0);
  EXPECT_DOUBLE_EQ(lp["token_logprobs"][1].get<double>(), kMinReportedLogprob);  // -inf
  ASSERT_EQ(lp["top_logprobs"][0].size(), 2u);  // the top 1 + the sampled token
  EXPECT_NEAR(lp["top_logprobs"][0][" Paris"].get<double>(), -0.1, 1e-6);
  EXPECT_DOUBLE_EQ(lp["top_logprobs"][0]["."].get<double>(), -3.0);
  ASSERT_EQ(lp["top_logprobs"][1].size(), 2u);  // sampled token already among the top: not added again
  EXPECT_DOUBLE_EQ(lp["top_logprobs"][1]["<5>"].get<double>(), kMinReportedLogprob);
  EXPECT_EQ(lp["text_offset"], json::array({0, 1}));
  EXPECT_FALSE(lp.dump().find("inf") != std::string::npos || lp.dump().find("null") != std::string::npos);
  EXPECT_EQ(empty_logprobs(false).size(), 4u);
}

TEST(OpenAiLogprobs, Utf8CharsCountsCodePoints) {
  EXPECT_EQ(utf8_chars(""), 0);
  EXPECT_EQ(utf8_chars("abc"), 3);
  EXPECT_EQ(utf8_chars("\xc3\xa9t\xc3\xa9"), 3);        // "été"
  EXPECT_EQ(utf8_chars("\xf0\x9f\x98\x80!"), 2);        // an emoji and "!"
  EXPECT_EQ(utf8_chars(piece(3)), 1);                   // a lone lead byte counts as one
}

}  // namespace
}  // namespace tp

// Tests of the byte-level BPE tokenizer: llama.cpp's token ids on the peer fixture (the oracle), known
// SmolLM2 ids, round trips over fixed and random UTF-8, special-token parsing, pre-tokenizer splits,
// BPE merge order on a synthetic vocabulary, the incremental decoder, and error reporting.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "coordinator/pre_tokenizer.h"
#include "coordinator/tokenizer.h"
#include "common/unicode_bytes.h"
#include "rank/model_file.h"

namespace tp {
namespace {

std::string source_dir() {
  const char* env = std::getenv("TPSERVE_SOURCE_DIR");
  return env ? env : TPSERVE_SOURCE_DIR;
}

std::string model_path() { return source_dir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf"; }

std::string utf8(uint32_t cpt) {
  std::string s;
  append_utf8(s, cpt);
  return s;
}

// SmolLM2's tokenizer, loaded once from the real GGUF through rank's model reader.
class SmolLM2Tokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(model_path())) return;
    tok_ = new Tokenizer(open_model(model_path())->tokenizer());
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(tok_, nullptr) << "model file missing: " << model_path() << " (run launch/setup)";
  }
  static const Tokenizer& tok() { return *tok_; }
  static Tokenizer* tok_;
};
Tokenizer* SmolLM2Tokenizer::tok_ = nullptr;

// ---- the oracle: llama.cpp's ids (add_special=false, parse_special=true) ----

TEST_F(SmolLM2Tokenizer, MatchesLlamaCppFixture) {
  const std::string path = source_dir() + "/tests/peers/fixtures/tokenizer_ids.json";
  ASSERT_TRUE(std::filesystem::exists(path)) << "fixture missing: " << path << " (tests/peers/make_fixtures.sh)";
  std::ifstream in(path);
  const auto fixture = nlohmann::json::parse(in);
  const auto& cases = fixture.at("cases");
  ASSERT_GE(cases.size(), 200u) << "the fixture must hold at least 200 strings";
  size_t n_match = 0;
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const auto expected = c.at("ids").get<std::vector<int32_t>>();
    const auto got = tok().encode(text, /*add_bos=*/false, /*parse_special=*/true);
    EXPECT_EQ(got, expected) << "text: " << nlohmann::json(text).dump(-1, ' ', true);
    n_match += (got == expected);
  }
  std::printf("llama.cpp fixture (%s): %zu / %zu cases match\n",
              fixture.value("llama_cpp_version", std::string("?")).c_str(), n_match, cases.size());
}

// ---- known SmolLM2 ids (llama.cpp and HF tokenizers agree on these) ----

TEST_F(SmolLM2Tokenizer, KnownIds) {
  const std::vector<std::pair<std::string, std::vector<int32_t>>> table = {
      {"Hello, we can use", {19556, 28, 392, 416, 722}},
      {"The capital of France is", {504, 3575, 282, 4649, 314}},
      {"\n", {198}},
      {"Hello world! 123", {19556, 905, 17, 216, 33, 34, 35}},
      {"Café déjà vu.", {51, 1939, 2756, 32564, 90, 16739, 386, 101, 30}},
      {"  multiple   spaces", {216, 2701, 256, 5600}},
      {"<|im_start|>user\nhi<|im_end|>", {1, 4093, 198, 6004, 2}},
  };
  for (const auto& [text, ids] : table) EXPECT_EQ(tok().encode(text, false, true), ids) << text;
}

TEST_F(SmolLM2Tokenizer, VocabularyFacts) {
  EXPECT_EQ(tok().vocab_size(), 49152);
  EXPECT_EQ(tok().bos_id(), 1);
  EXPECT_EQ(tok().eos_id(), 2);
  EXPECT_FALSE(tok().add_bos());  // SmolLM2's GGUF sets tokenizer.ggml.add_bos_token = false
  EXPECT_EQ(tok().encode("hi", /*add_bos=*/true, false), tok().encode("hi", false, false));
  EXPECT_TRUE(tok().is_eog(2));   // <|im_end|> = eos
  EXPECT_TRUE(tok().is_eog(0));   // <|endoftext|>
  EXPECT_TRUE(tok().is_eog(4));   // <reponame>: llama.cpp's FIM repo token
  EXPECT_FALSE(tok().is_eog(1));  // <|im_start|>
  EXPECT_FALSE(tok().is_eog(19556));
  EXPECT_FALSE(tok().is_eog(-1));
  EXPECT_FALSE(tok().is_eog(49152));
  EXPECT_EQ(tok().token_to_piece(19556), "Hello");
  EXPECT_EQ(tok().token_to_piece(2), "<|im_end|>");
  EXPECT_EQ(tok().token_to_piece(198), "\n");
}

TEST_F(SmolLM2Tokenizer, SpecialTokens) {
  const std::string text = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>";
  const auto with = tok().encode(text, false, true);
  EXPECT_EQ(std::count(with.begin(), with.end(), 1), 2);
  EXPECT_EQ(std::count(with.begin(), with.end(), 2), 2);
  EXPECT_EQ(with.front(), 1);
  EXPECT_EQ(with.back(), 2);
  EXPECT_EQ(tok().decode(with), text);

  // Without parse_special the markers are plain text.
  const auto without = tok().encode(text, false, false);
  for (int32_t id : without) EXPECT_FALSE(tok().is_control(id)) << id;
  EXPECT_EQ(tok().decode(without), text);
  EXPECT_GT(without.size(), with.size());

  // Adjacent and partial markers.
  EXPECT_EQ(tok().encode("<|im_end|><|im_end|>", false, true), (std::vector<int32_t>{2, 2}));
  const auto partial = tok().encode("<|im_end|", false, true);
  EXPECT_EQ(std::count(partial.begin(), partial.end(), 2), 0);

  // decode(special=false) drops control tokens.
  EXPECT_EQ(tok().decode(with, /*special=*/false), "system\nBe brief.\nuser\n2+2?");
}

TEST_F(SmolLM2Tokenizer, RoundTripFixedStrings) {
  const std::vector<std::string> strings = {
      "",
      " ",
      "   ",
      "\n\n\n",
      "\t \t",
      "a",
      "Hello world",
      "hello world   ",
      "   leading spaces",
      "x \n y",
      "1234567890 3.14159 -42 1e10 0x1F",
      "don't can't WON'T I'M she'd",
      "def f(x):\n    return x * 2  # comment\n",
      "for (int i = 0; i < n; ++i) { sum += a[i]; }",
      "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
      "https://example.com/path?q=1&r=2#frag",
      "中文分词测试，日本語のテキスト、한국어 텍스트",
      "Здравствуй, мир! Ελληνικά. العربية. हिन्दी",
      "emoji 😀👍🏽 👨‍👩‍👧‍👦 🇫🇷 ✨",
      "ZWJ\u200Dand\u200Bzero width, NBSP\u00A0here, ideographic\u3000space",
      "combining e\u0301 a\u0308 and precomposed é ä",
      "٣٤٥ Arabic-Indic digits, ①②③, Ⅻ roman, ½ fractions",
      "line\r\nwindows\rold mac\u2028sep\u2029para\u0085nel",
      std::string("nul\0byte", 8),
      "\x7f control \x01\x02\x1b[0m",
      "<|im_start|>literal marker in text<|im_end|>",
      "<<<|>>>|||<|im_start",
      "\U0010FFFF\U000E0001 plane-16 and tags",
  };
  for (const auto& s : strings) {
    EXPECT_EQ(tok().decode(tok().encode(s, false, false)), s) << s;
    EXPECT_EQ(tok().decode(tok().encode(s, false, true)), s) << s;
  }
}

// Random valid UTF-8 from a mix of ranges that stress the pre-tokenizer and the byte-level alphabet.
// Code points whose UTF-8 bytes all have a byte token are kept; SmolLM2's vocabulary lacks 21 byte tokens
// (0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, 0xF5..0xFF), which llama.cpp drops.
std::string random_utf8(std::mt19937& rng, const Tokenizer& tok) {
  static const std::vector<std::pair<uint32_t, uint32_t>> ranges = {
      {0x20, 0x7E},       {0x20, 0x20},       {0x09, 0x0D},      {0x30, 0x39},       {0x41, 0x5A},
      {0x61, 0x7A},       {0x27, 0x27},       {0x00, 0x1F},      {0x80, 0xFF},       {0x100, 0x24F},
      {0x300, 0x36F},     {0x370, 0x3FF},     {0x400, 0x4FF},    {0x600, 0x6FF},     {0x900, 0x97F},
      {0x2000, 0x206F},   {0x3000, 0x303F},   {0x3040, 0x30FF},  {0x4E00, 0x9FFF},   {0xAC00, 0xD7A3},
      {0xE000, 0xF8FF},   {0xFF00, 0xFFEF},   {0x1F300, 0x1FAFF}, {0x10000, 0x10FFFF}, {0x0800, 0xD7FF},
  };
  std::uniform_int_distribution<size_t> pick_range(0, ranges.size() - 1);
  std::uniform_int_distribution<int> pick_len(0, 48);
  std::string s;
  const int n = pick_len(rng);
  for (int i = 0; i < n; ++i) {
    const auto [lo, hi] = ranges[pick_range(rng)];
    uint32_t cpt = std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
    if (cpt >= 0xD800 && cpt <= 0xDFFF) cpt = 0xFFFD;
    const std::string c = utf8(cpt);
    bool representable = true;
    for (char b : c) representable = representable && tok.token_id(byte_to_unicode(static_cast<uint8_t>(b))) >= 0;
    if (representable) s += c;
  }
  return s;
}

TEST_F(SmolLM2Tokenizer, RoundTripRandomUtf8) {
  std::mt19937 rng(12345);
  for (int i = 0; i < 3000; ++i) {
    const std::string s = random_utf8(rng, tok());
    ASSERT_TRUE(is_valid_utf8(s));
    const auto ids = tok().encode(s, false, i % 2 == 0);
    ASSERT_EQ(tok().decode(ids), s) << "case " << i;
    if (!s.empty()) {
      EXPECT_FALSE(ids.empty());
    }
  }
}

TEST_F(SmolLM2Tokenizer, ConcurrentEncodeGivesTheSameIds) {
  std::mt19937 rng(99);
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back(random_utf8(rng, tok()) + " <|im_end|> 12 ab");
  std::vector<std::vector<int32_t>> expected;
  for (const auto& t : texts) expected.push_back(tok().encode(t, false, true));
  std::vector<int> n_wrong(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 5; ++rep)
        for (size_t i = 0; i < texts.size(); ++i) n_wrong[k] += tok().encode(texts[i], false, true) != expected[i];
    });
  for (auto& t : threads) t.join();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(n_wrong[k], 0) << "thread " << k;
}

TEST_F(SmolLM2Tokenizer, InvalidUtf8BecomesReplacementCharacters) {
  // llama.cpp decodes leniently: each ill-formed byte is U+FFFD, so the ids are those of the replaced text.
  const std::string fffd = utf8(kReplacementChar);
  EXPECT_EQ(tok().encode("a\xff" "b", false, false), tok().encode("a" + fffd + "b", false, false));
  EXPECT_EQ(tok().decode(tok().encode("a\xff" "b", false, false)), "a" + fffd + "b");
  EXPECT_EQ(tok().decode(tok().encode("x\xe2\x82", false, false)), "x" + fffd + fffd);
  EXPECT_EQ(tok().decode(tok().encode("\x80\x80 z", false, false)), fffd + fffd + " z");
  // Overlong encodings are accepted and re-encoded canonically, as llama.cpp does.
  EXPECT_EQ(tok().encode("\xc1\x81", false, false), tok().encode("A", false, false));
  // A surrogate passes through as its 3 bytes.
  EXPECT_EQ(tok().decode(tok().encode("s\xed\xa0\x80t", false, false)), "s\xed\xa0\x80t");
}

TEST_F(SmolLM2Tokenizer, BytesWithoutTokenAreDroppedLikeLlamaCpp) {
  // U+80000 is F2 80 80 80; SmolLM2 has no token for the byte 0xF2 (nor for 0x04), so llama.cpp emits nothing
  // for them while the continuation bytes keep their tokens.
  ASSERT_LT(tok().token_id(byte_to_unicode(0xF2)), 0);
  EXPECT_EQ(tok().decode(tok().encode("a\U00080000b", false, false)), "a\x80\x80\x80" "b");
  EXPECT_EQ(tok().encode("\x04", false, false), std::vector<int32_t>{});
}

TEST_F(SmolLM2Tokenizer, IncrementalDecoderHoldsBackSplitCharacters) {
  const std::string emoji = "\xF0\x9F\x98\x80";  // U+1F600 as single-byte tokens
  std::vector<int32_t> ids;
  for (char c : emoji) {
    const int32_t id = tok().token_id(byte_to_unicode(static_cast<uint8_t>(c)));
    ASSERT_GE(id, 0);
    ids.push_back(id);
  }
  IncrementalDecoder dec(tok());
  EXPECT_EQ(dec.push(tok().token_id("Hi")), "Hi");
  EXPECT_EQ(dec.push(ids[0]), "");
  EXPECT_EQ(dec.push(ids[1]), "");
  EXPECT_EQ(dec.push(ids[2]), "");
  EXPECT_EQ(dec.n_pending(), 3u);
  EXPECT_EQ(dec.push(ids[3]), emoji);
  EXPECT_EQ(dec.n_pending(), 0u);
  EXPECT_EQ(dec.push(2), "<|im_end|>");
  EXPECT_EQ(dec.flush(), "");

  // A partial character at the end of the stream flushes as U+FFFD; a stray byte is replaced at once.
  IncrementalDecoder cut(tok());
  EXPECT_EQ(cut.push(ids[0]), "");
  EXPECT_EQ(cut.push(ids[1]), "");
  EXPECT_EQ(cut.flush(), utf8(kReplacementChar) + utf8(kReplacementChar));
  EXPECT_EQ(cut.push(ids[3]), utf8(kReplacementChar));

  // Streaming a real encoding reproduces the text exactly, whatever the token boundaries.
  const std::string text = "Grüße 😀👍🏽 中文 👨‍👩‍👧 done";
  IncrementalDecoder stream(tok());
  std::string streamed;
  for (int32_t id : tok().encode(text, false, false)) {
    const std::string part = stream.push(id);
    EXPECT_TRUE(is_valid_utf8(part));
    streamed += part;
  }
  streamed += stream.flush();
  EXPECT_EQ(streamed, text);
  EXPECT_THROW(stream.push(-1), InputError);
}

TEST_F(SmolLM2Tokenizer, DecodeRejectsOutOfRangeIds) {
  EXPECT_THROW(tok().decode({19556, 49152}), InputError);
  EXPECT_THROW(tok().decode({-1}), InputError);
  EXPECT_THROW(tok().token_to_piece(1 << 20), InputError);
}

// ---- pre-tokenizer splits (llama.cpp's unicode_regex_split behaviour) ----

std::vector<std::string> split(const std::string& pre, const std::string& text) {
  PreTokenizer p(PreTokenizer::patterns_for(pre));
  std::vector<ByteRange> ranges;
  p.split(text, ranges);
  std::vector<std::string> words;
  for (const auto& r : ranges) words.push_back(text.substr(r.begin, r.end - r.begin));
  return words;
}

using Words = std::vector<std::string>;

TEST(PreTokenizer, SmolLMDigitsAndWhitespace) {
  EXPECT_EQ(split("smollm", "abc 123"), (Words{"abc", " ", "1", "2", "3"}));
  EXPECT_EQ(split("smollm", "a   b"), (Words{"a", "  ", " b"}));
  EXPECT_EQ(split("smollm", "a   "), (Words{"a", "   "}));
  EXPECT_EQ(split("smollm", "x\n!"), (Words{"x", "\n", "!"}));
  EXPECT_EQ(split("smollm", "\t\t!"), (Words{"\t", "\t", "!"}));
  EXPECT_EQ(split("smollm", "it's 'twas"), (Words{"it", "'s", " '", "twas"}));
  EXPECT_EQ(split("smollm", "IT'S"), (Words{"IT", "'", "S"}));
  EXPECT_EQ(split("smollm", " ?!.. x"), (Words{" ?!..", " x"}));
  EXPECT_EQ(split("smollm", "٣٤"), (Words{"٣", "٤"}));  // \p{N} beyond ASCII
  // U+180E is whitespace to PCRE2 but not to llama.cpp; U+0085 is whitespace to both.
  EXPECT_EQ(split("smollm", "a\u180Eb"), (Words{"a", "\u180E", "b"}));
  EXPECT_EQ(split("smollm", "a\u0085\u0085b"), (Words{"a", "\u0085", "\u0085", "b"}));
  EXPECT_EQ(split("smollm", ""), Words{});
}

TEST(PreTokenizer, Gpt2KeepsNumberRuns) {
  EXPECT_EQ(split("gpt2", "abc 123"), (Words{"abc", " 123"}));
}

TEST(PreTokenizer, Llama3) {
  EXPECT_EQ(split("llama3", "1234567"), (Words{"123", "456", "7"}));
  EXPECT_EQ(split("llama3", "IT'S ok"), (Words{"IT", "'S", " ok"}));
  EXPECT_EQ(split("llama3", "a\n\n  b"), (Words{"a", "\n\n", " ", " b"}));
  EXPECT_EQ(split("llama3", "\"hi\"\n"), (Words{"\"hi", "\"\n"}));
}

TEST(PreTokenizer, UnsupportedTypeIsAnInputError) {
  try {
    PreTokenizer::patterns_for("bloom");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'bloom'"), std::string::npos);
  }
}

// ---- BPE on a synthetic vocabulary ----

TokenizerData synthetic_vocab() {
  TokenizerData d;
  d.model = "gpt2";
  d.pre = "gpt2";
  for (int b = 0; b < 256; ++b) d.tokens.emplace_back(byte_to_unicode(static_cast<uint8_t>(b)));
  const std::vector<std::string> extra = {"ab", "bc", "abc", "aa", "aaaa", "Ġa", "<ctl>", "<user>"};
  d.tokens.insert(d.tokens.end(), extra.begin(), extra.end());
  d.token_types.assign(d.tokens.size(), TokenType::Normal);
  d.token_types[256 + 6] = TokenType::Control;
  d.token_types[256 + 7] = TokenType::UserDefined;
  d.merges = {"b c", "a b", "a bc", "a a", "aa aa", "Ġ a"};
  d.eos_id = 256 + 6;
  return d;
}

TEST(TokenizerBpe, MergesByRankThenLeftmost) {
  const Tokenizer t(synthetic_vocab());
  const int32_t a = 'a', b = 'b', c = 'c', ab = 256, bc = 257, abc = 258, aa = 259, aaaa = 260;
  EXPECT_EQ(t.encode("abc", false, false), (std::vector<int32_t>{abc}));  // "b c" (rank 0) before "a b"
  EXPECT_EQ(t.encode("abab", false, false), (std::vector<int32_t>{ab, ab}));
  EXPECT_EQ(t.encode("aaa", false, false), (std::vector<int32_t>{aa, a}));  // leftmost wins a tie
  EXPECT_EQ(t.encode("aaaaa", false, false), (std::vector<int32_t>{aaaa, a}));
  EXPECT_EQ(t.encode("cb", false, false), (std::vector<int32_t>{c, b}));
  EXPECT_EQ(t.encode("x a", false, false), (std::vector<int32_t>{'x', 256 + 5}));
  (void)bc;
}

TEST(TokenizerBpe, ControlAndUserDefinedTokens) {
  const Tokenizer t(synthetic_vocab());
  const int32_t ctl = 262, user = 263;
  EXPECT_EQ(t.encode("a<ctl>b", false, true), (std::vector<int32_t>{'a', ctl, 'b'}));
  EXPECT_NE(t.encode("a<ctl>b", false, false), (std::vector<int32_t>{'a', ctl, 'b'}));
  // User-defined tokens are matched even without parse_special, as in llama.cpp.
  EXPECT_EQ(t.encode("<user>", false, false), (std::vector<int32_t>{user}));
  EXPECT_TRUE(t.is_eog(ctl));
  EXPECT_EQ(t.decode({ctl, 'a'}, true), "<ctl>a");
  EXPECT_EQ(t.decode({ctl, 'a'}, false), "a");
}

TEST(TokenizerBpe, UnsupportedModelOrPreIsAnInputError) {
  TokenizerData d = synthetic_vocab();
  d.model = "llama";
  try {
    Tokenizer t(d);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "tokenizer model 'llama' is not supported (byte-level BPE 'gpt2' only)");
  }
  d = synthetic_vocab();
  d.pre = "qwen2";
  EXPECT_THROW(Tokenizer{d}, InputError);
  d = synthetic_vocab();
  d.token_types.pop_back();
  EXPECT_THROW(Tokenizer{d}, InputError);
}

// ---- UTF-8 helpers ----

TEST(Utf8, CompletePrefix) {
  EXPECT_EQ(utf8_complete_prefix_len("abc"), 3u);
  EXPECT_EQ(utf8_complete_prefix_len("a\xF0\x9F\x98"), 1u);
  EXPECT_EQ(utf8_complete_prefix_len("a\xF0\x9F\x98\x80"), 5u);
  EXPECT_EQ(utf8_complete_prefix_len("a\xC3"), 1u);
  EXPECT_EQ(utf8_complete_prefix_len("a\xE0\x80"), 3u);  // can never complete: not held back
  EXPECT_EQ(utf8_complete_prefix_len("a\x80"), 2u);
  EXPECT_EQ(utf8_complete_prefix_len(""), 0u);
}

TEST(Utf8, ByteLevelAlphabetRoundTrips) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::string level;
  append_byte_level(level, all);
  EXPECT_TRUE(is_valid_utf8(level));
  EXPECT_EQ(byte_level_to_bytes(level), all);
  EXPECT_EQ(byte_to_unicode(' '), "\xC4\xA0");  // 'Ġ'
  EXPECT_EQ(byte_to_unicode('\n'), "\xC4\x8A");  // 'Ċ'
  EXPECT_EQ(byte_to_unicode('A'), "A");
}

}  // namespace
}  // namespace tp

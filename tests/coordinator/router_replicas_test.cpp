// The router's live state (coordinator/router_replicas.h) and its stream bookkeeping (router_stream.h,
// router_request.h) as pure units, table-driven where it fits: KV event batches in -> routing choice out; a
// replica down or rejoined drops its entries; the prompt's block chain equals the hashes a BlockManager
// publishes; SSE split across pieces; token ids tracked and stripped; a replay's chunks given the original
// response's identity; where a replay resumes when the dying replica held text back (a partial stop-string match,
// a token whose text was cut, an incomplete UTF-8 character; on a byte-level BPE vocabulary) and what of the
// continuation the client already has (text, ids, logprobs entries); the choices of an n > 1 stream continued
// one at a time; the replay body is the request again with the output tokens as tpserve_continuation, with the
// seed (seed + i for choice i of n); a chat stream of tool calls cut before, in and between its calls, and two
// choices' tool-call streams cut after every event.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/chat_template.h"
#include "coordinator/http_server.h"
#include "coordinator/router_replicas.h"
#include "coordinator/router_request.h"
#include "coordinator/router_stream.h"
#include "common/unicode_bytes.h"
#include "coordinator/tokenizer.h"
#include "coordinator/tool_call_response.h"
#include "kvstore/block_manager.h"

namespace tp {
namespace {

using json = nlohmann::json;

KvEventBatch stored(const std::vector<uint64_t>& h) {
  KvEventBatch b;
  KvEvent e;
  e.block_hashes = h;
  e.block_size = 4;
  b.events = {e};
  return b;
}

KvEventBatch removed(const std::vector<uint64_t>& h) {
  KvEventBatch b = stored(h);
  b.events[0].kind = KvEventKind::BlockRemoved;
  return b;
}

KvEventBatch cleared() {
  KvEventBatch b;
  KvEvent e;
  e.kind = KvEventKind::AllBlocksCleared;
  b.events = {e};
  return b;
}

TEST(RouterReplicas, EventBatchesInChoiceOut) {
  struct Step {
    int replica;
    KvEventBatch batch;
  };
  struct Case {
    std::string name;
    std::vector<Step> events;
    int want;  // the choice for the chain {1, 2, 3} with 12 prompt tokens
    int64_t overlap;
  };
  const std::vector<Case> cases = {
      {"nothing known: the lowest id", {}, 0, 0},
      {"replica 1 holds the prefix", {{1, stored({1, 2})}}, 1, 2},
      {"replica 1's middle block removed", {{1, stored({1, 2, 3})}, {1, removed({2})}, {0, stored({1})}}, 0, 1},
      {"longest prefix wins", {{0, stored({1})}, {1, stored({1, 2, 3})}}, 1, 3},
      {"all cleared on 1", {{1, stored({1, 2, 3})}, {1, cleared()}}, 0, 0},
  };
  for (const Case& c : cases) {
    RouterReplicas rs(RoutePolicy::PrefixAware, {4, 4096});
    rs.join("http://127.0.0.1:1");
    rs.join("http://127.0.0.1:2");
    for (int id : {0, 1}) rs.health(id, true, "", "tcp://x", 0, 2);
    for (const Step& s : c.events) rs.apply(s.replica, 1, s.batch);
    const RouteChoice ch = rs.choose({1, 2, 3}, 12, 20);
    EXPECT_EQ(ch.replica, c.want) << c.name;
    EXPECT_EQ(ch.overlap_blocks, c.overlap) << c.name;
    rs.release(ch.ticket);
  }
}

TEST(RouterReplicas, DownRejoinAndStaleGenerations) {
  RouterReplicas rs(RoutePolicy::PrefixAware, {4, 4096});
  EXPECT_EQ(rs.join("http://a:1"), 0);
  EXPECT_EQ(rs.join("http://b:2"), 1);
  EXPECT_EQ(rs.join("http://a:1"), 0);  // the same URL keeps its id
  EXPECT_EQ(rs.choose({}, 1, 1).replica, -1) << "nothing is up before a health check passes";
  rs.health(0, true, "", "", 0, 2);
  rs.health(1, true, "", "", 0, 2);
  EXPECT_EQ(rs.n_up(), 2);
  rs.apply(1, 1, stored({9}));
  RouteChoice c = rs.choose({9}, 4, 4);
  EXPECT_EQ(c.replica, 1);
  rs.release(c.ticket);
  // One failed check is not enough (unhealthy_after 2); two are; the entries go with it.
  rs.health(1, false, "timeout", "", 0, 2);
  EXPECT_EQ(rs.n_up(), 2);
  rs.health(1, false, "timeout", "", 0, 2);
  EXPECT_EQ(rs.n_up(), 1);
  EXPECT_EQ(rs.snapshot()[1].down_reason, "timeout");
  c = rs.choose({9}, 4, 4);
  EXPECT_EQ(c.replica, 0);
  rs.release(c.ticket);
  // Back up as generation 2: a batch of generation 1 (the dead process) is dropped.
  rs.health(1, true, "", "tcp://new", 0, 2);
  EXPECT_EQ(rs.snapshot()[1].generation, 2);
  EXPECT_EQ(rs.snapshot()[1].events_endpoint, "tcp://new");
  rs.apply(1, 1, stored({9}));
  EXPECT_EQ(rs.snapshot()[1].n_blocks, 0);
  rs.apply(1, 2, stored({9}));
  EXPECT_EQ(rs.snapshot()[1].n_blocks, 1);
  // Excluded (a replay), marked down (a failed call), left: never chosen.
  c = rs.choose({9}, 4, 4, {1});
  EXPECT_EQ(c.replica, 0);
  rs.release(c.ticket);
  rs.mark_down(0, "connection refused");
  EXPECT_EQ(rs.choose({9}, 4, 4, {1}).replica, -1);
  EXPECT_TRUE(rs.leave("http://b:2"));
  EXPECT_FALSE(rs.leave("http://nope:3"));
  EXPECT_EQ(rs.n_joined(), 1);
  EXPECT_EQ(rs.choose({9}, 4, 4).replica, -1);
}

TEST(RouterReplicas, LoadCountsAndKvFetchHolder) {
  RouterReplicas rs(RoutePolicy::LeastLoad, {4, 4096});
  rs.join("http://a:1");
  rs.join("http://b:2");
  rs.health(0, true, "", "", 0, 2);
  rs.health(1, true, "", "", 0, 2);
  rs.apply(0, 1, stored({5, 6}));
  const RouteChoice c0 = rs.choose({5, 6}, 8, 100);
  EXPECT_EQ(c0.replica, 0);
  EXPECT_EQ(c0.load_tokens, 92) << "100 less the 2 blocks of 4 it holds";
  EXPECT_EQ(rs.snapshot()[0].in_flight_tokens, 92);
  const RouteChoice c = rs.choose({5, 6}, 8, 100);  // replica 0 carries 92 tokens now
  EXPECT_EQ(c.replica, 1);
  EXPECT_EQ(c.load_tokens, 100);
  EXPECT_EQ(c.holder, 0);
  EXPECT_EQ(c.holder_url, "http://a:1");
  EXPECT_EQ(c.holder_overlap, 2);
  EXPECT_EQ(c.overlap_blocks, 0);
  EXPECT_EQ(rs.snapshot()[0].in_flight, 1);
  rs.release(c0.ticket);
  rs.release(c.ticket);
  EXPECT_EQ(rs.snapshot()[0].in_flight_tokens, 0);
}

// A request in flight: its load counts on its replica (prefill until its first token, then decode) and its prompt
// blocks count as held there before any KV event says so, until it ends; a KV fetch holder is a replica that has
// stored the blocks, not one still computing them.
TEST(RouterReplicas, RequestsInFlightCountTheirLoadAndExpectedBlocks) {
  RouterReplicas rs(RoutePolicy::PrefixAware, {4, 0});
  rs.join("http://a:1");
  rs.join("http://b:2");
  rs.health(0, true, "", "", 0, 2);
  rs.health(1, true, "", "", 0, 2);
  const RouteChoice c1 = rs.choose({1, 2, 3}, 12, 14);  // 12 prompt tokens + 2 to generate
  EXPECT_EQ(c1.replica, 0);
  EXPECT_EQ(c1.load_tokens, 14);
  EXPECT_EQ(c1.prefill_tokens, 12);
  // The same prefix before any event: replica 0 is computing it. 14 + 4 vs 0 + 16 + 12.
  const RouteChoice c2 = rs.choose({1, 2, 3, 4}, 16, 18);
  EXPECT_EQ(c2.replica, 0);
  EXPECT_EQ(c2.overlap_blocks, 3);
  EXPECT_EQ(c2.holder, -1) << "nothing is stored yet: nothing to fetch";
  EXPECT_EQ(c2.load_tokens, 6);
  EXPECT_EQ(c2.prefill_tokens, 4);
  EXPECT_NE(c1.ticket, c2.ticket);
  ReplicaView v = rs.snapshot()[0];
  EXPECT_EQ(v.in_flight, 2);
  EXPECT_EQ(v.in_flight_tokens, 20);
  EXPECT_EQ(v.prefill_tokens, 16);
  rs.prefilled(c1.ticket);  // c1's first token: its 12 prompt tokens are done
  rs.prefilled(c1.ticket);  // once
  v = rs.snapshot()[0];
  EXPECT_EQ(v.in_flight_tokens, 8);
  EXPECT_EQ(v.prefill_tokens, 4);
  rs.release(c1.ticket);
  rs.release(c1.ticket);  // once
  v = rs.snapshot()[0];
  EXPECT_EQ(v.in_flight, 1);
  EXPECT_EQ(v.in_flight_tokens, 6);
  EXPECT_EQ(v.prefill_tokens, 4);
  RouteChoice c = rs.choose({1, 2, 3}, 12, 12);
  EXPECT_EQ(c.overlap_blocks, 3) << "c2 still runs: its prompt stays expected";
  rs.release(c.ticket);
  rs.release(c2.ticket);  // ended before its first token
  v = rs.snapshot()[0];
  EXPECT_EQ(v.in_flight, 0);
  EXPECT_EQ(v.in_flight_tokens, 0);
  EXPECT_EQ(v.prefill_tokens, 0);
  c = rs.choose({1, 2, 3}, 12, 12);
  EXPECT_EQ(c.overlap_blocks, 0) << "no request left and no event came: nothing expected";
  rs.release(c.ticket);
  // Stored on replica 1 (its events): it holds them and is named for a fetch.
  rs.apply(1, 1, stored({1, 2}));
  c = rs.choose({1, 2, 3}, 12, 12);
  EXPECT_EQ(c.replica, 1);
  EXPECT_EQ(c.holder, 1);
  EXPECT_EQ(c.holder_overlap, 2);
  rs.release(c.ticket);
  rs.release(12345);  // unknown: ignored
  EXPECT_EQ(rs.snapshot()[1].in_flight, 0);
}

// Under KV pressure (the replicas' pools full, evicting LRU, tail blocks first): a conversation stays on the
// replica that still holds its history whatever that replica's KV usage (router.kv_usage_tokens 0, the
// default), follows what is left of it after evictions, spills to the other replica only when the holder's load
// outweighs twice the part it still holds (recomputed and duplicated; then the holder is named for a KV fetch),
// and goes by load once its history is gone. With kv_usage_tokens > 0 a full holder loses even a long history to an emptier replica.
TEST(RouterReplicas, KvPressureKeepsConversationsWhereTheirHistoryIs) {
  struct Case {
    std::string name;
    double kv_usage_tokens;
    double usage0, usage1;            // KV usage at the last health check
    std::vector<uint64_t> evicted0;   // conversation A's blocks replica 0 evicted
    int64_t load0;                    // tokens already in flight on replica 0
    int want;
    int64_t overlap, holder_overlap;
  };
  std::vector<uint64_t> a(10);  // conversation A: 10 blocks of 4 tokens on replica 0
  std::iota(a.begin(), a.end(), 1);
  const std::vector<uint64_t> tail(a.begin() + 5, a.end());
  const std::vector<Case> cases = {
      {"holder full, usage not counted: stays", 0, 1.0, 0.2, {}, 0, 0, 10, 10},
      {"holder busy (30 tokens in flight) but holds 40 of 48: stays", 0, 1.0, 0.2, {}, 30, 0, 10, 10},
      {"tail evicted: what is left (5 blocks) still keeps it", 0, 1.0, 0.2, tail, 0, 0, 5, 5},
      // 30 + 28 vs 0 + 48 + 20 (the 5 blocks replica 0 holds would be cached a second time): stays
      {"tail evicted and 30 tokens in flight: what is left still keeps it", 0, 1.0, 0.2, tail, 30, 0, 5, 5},
      {"tail evicted and 60 tokens in flight: spills, holder named for a fetch", 0, 1.0, 0.2, tail, 60, 1, 0, 5},
      {"all evicted: by load (the lowest id on a tie)", 0, 1.0, 0.2, a, 0, 0, 0, 0},
      {"kv_usage_tokens 4096: a full holder loses 40 cached tokens to an emptier replica", 4096, 1.0, 0.2, {}, 0, 1,
       0, 10},
  };
  for (const Case& c : cases) {
    RouterReplicas rs(RoutePolicy::PrefixAware, {4, c.kv_usage_tokens});
    rs.join("http://a:1");
    rs.join("http://b:2");
    rs.health(0, true, "", "", c.usage0, 2);
    rs.health(1, true, "", "", c.usage1, 2);
    rs.apply(0, 1, stored(a));
    rs.apply(1, 1, stored({100, 101, 102, 103}));  // conversation B on replica 1
    if (!c.evicted0.empty()) rs.apply(0, 1, removed(c.evicted0));
    if (c.load0) {
      EXPECT_EQ(rs.choose({200}, 1, c.load0, {1}).replica, 0) << c.name;  // a request in flight on replica 0
    }
    std::vector<uint64_t> next = a;  // A's next turn: its history + 2 new blocks
    next.insert(next.end(), {11, 12});
    const RouteChoice ch = rs.choose(next, 48, 52);
    EXPECT_EQ(ch.replica, c.want) << c.name;
    EXPECT_EQ(ch.overlap_blocks, c.overlap) << c.name;
    EXPECT_EQ(ch.holder_overlap, c.holder_overlap) << c.name;
    EXPECT_EQ(ch.holder, c.holder_overlap ? 0 : -1) << c.name;
  }
}

TEST(RouterRequest, BlockChainEqualsTheBlockManagersPublishedHashes) {
  BlockManagerOptions o;
  o.record_events = true;
  BlockManager bm(16, 4, std::move(o));
  std::vector<int32_t> p(14);
  std::iota(p.begin(), p.end(), 300);
  AllocPlan plan = bm.can_allocate(1, p);
  ASSERT_TRUE(plan.fits);
  bm.allocate(plan);
  bm.commit_tokens(1, p);
  std::vector<uint64_t> published;
  for (const KvEvent& e : bm.take_events()) published.insert(published.end(), e.block_hashes.begin(), e.block_hashes.end());
  EXPECT_EQ(block_chain(p, 4), published);
  EXPECT_EQ(block_chain(p, 4).size(), 3u);
  EXPECT_TRUE(block_chain({1, 2, 3}, 4).empty());
}

TEST(RouterStream, SplitsEventsAcrossPieces) {
  SseSplitter s;
  EXPECT_TRUE(s.feed("data: {\"a\"").empty());
  const auto a = s.feed(":1}\n\ndata: [DONE]\n");
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0], "{\"a\":1}");
  const auto b = s.feed("\n: comment\n\n");
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0], "[DONE]");
}

// Byte-level BPE: ids 0..255 the bytes, 256 "ab", 257 "bc", 258 "<eos>" (control, end of generation).
const Tokenizer& byte_tokenizer() {
  static const Tokenizer t = [] {
    TokenizerData d;
    d.model = "gpt2";
    d.pre = "gpt2";
    for (int b = 0; b < 256; ++b) d.tokens.emplace_back(byte_to_unicode(static_cast<uint8_t>(b)));
    d.tokens.insert(d.tokens.end(), {"ab", "bc", "<eos>"});
    d.token_types.assign(d.tokens.size(), TokenType::Normal);
    d.token_types[258] = TokenType::Control;
    d.merges = {"a b", "b c"};
    d.eos_id = 258;
    return Tokenizer(d);
  }();
  return t;
}

// A completions chunk of choice 0 as a replica streams it with return_token_ids.
std::string chunk(const std::string& text, const std::vector<int32_t>& ids, const char* finish = nullptr) {
  json c = {{"index", 0}, {"text", text}, {"token_ids", ids}, {"finish_reason", nullptr}};
  if (finish) c["finish_reason"] = finish;
  return json{{"id", "cmpl-1"}, {"object", "text_completion"}, {"created", 1}, {"model", "m"}, {"choices", {c}}}.dump();
}

struct ClientView {
  std::string text;
  std::vector<int32_t> ids;
};

// What the client gets from `out` (one SSE event) for choice 0.
void take(const StreamEvent& e, ClientView& v) {
  ASSERT_EQ(e.out.rfind("data: ", 0), 0u);
  const json j = json::parse(e.out.substr(6));
  const json& c = j["choices"][0];
  v.text += c.value("text", std::string());
  if (c.contains("token_ids"))
    for (const json& id : c["token_ids"]) v.ids.push_back(id.get<int32_t>());
}

// Held-back text is not lost: the replica died while holding text the client never got.
TEST(RouterStream, ReplayResumesFromTheTokensWhoseTextWasSent) {
  const Tokenizer& tok = byte_tokenizer();
  const int32_t x = 'x', c = 'c', d = 'd', ab = 256, bc = 257, eos = 258;
  const uint8_t e_acute[2] = {0xC3, 0xA9};  // "é"
  struct Case {
    const char* name;
    std::vector<std::pair<std::string, std::vector<int32_t>>> before;  // chunks before the replica died
    std::vector<int32_t> resume;      // where the continuation starts
    std::vector<std::pair<std::string, std::vector<int32_t>>> after;   // the continuation's chunks
    std::string client_text;          // all the client reads, in order
    std::vector<int32_t> client_ids;
    int64_t echo = 0;
  };
  const std::string e2(reinterpret_cast<const char*>(e_acute), 2);
  const std::vector<Case> cases = {
      {"all text out: resume after every id", {{"x", {x}}, {"ab", {ab}}}, {x, ab}, {{"c", {c}}}, "xabc", {x, ab, c}},
      {"stop 'abz' held 'ab' back", {{"x", {x, ab}}}, {x}, {{"abc", {ab, c}}}, "xabc", {x, ab, c}},
      {"a token's text cut: 'b' of 'bc' sent, 'c' held (stop 'cz')", {{"xb", {x, bc}}}, {x}, {{"bcd", {bc, d}}},
       "xbcd", {x, bc, d}},
      {"an incomplete UTF-8 character held back", {{"x", {x, int32_t(e_acute[0])}}}, {x},
       {{"", {int32_t(e_acute[0])}}, {e2, {int32_t(e_acute[1])}}}, "x" + e2, {x, int32_t(e_acute[0]), int32_t(e_acute[1])}},
      {"nothing out yet", {{"", {ab}}}, {}, {{"abx", {ab, x}}}, "abx", {ab, x}},
      {"echo 'pq' leads the text, not counted as output", {{"pqx", {x, ab}}}, {x}, {{"ab", {ab}}}, "pqxab", {x, ab}, 2},
      {"an end-of-generation id (the finish chunk lost): generated again", {{"x", {x}}, {"", {eos}}}, {x},
       {{"", {eos}}}, "x", {x, eos}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    StreamTracker t(false, true, 1, k.echo);
    ClientView v;
    for (const auto& [text, ids] : k.before) take(t.on_event(chunk(text, ids)), v);
    t.begin_replay(tok, false);
    EXPECT_EQ(t.resume_tokens(), k.resume);
    t.continue_choice(t.next_choice());
    for (const auto& [text, ids] : k.after) take(t.on_event(chunk(text, ids)), v);
    EXPECT_EQ(v.text, k.client_text);
    EXPECT_EQ(v.ids, k.client_ids);
  }
}

// Two replays in a row, the second before the first continuation caught up with what the client had.
TEST(RouterStream, ASecondReplayBeforeTheFirstCaughtUp) {
  const Tokenizer& tok = byte_tokenizer();
  const int32_t x = 'x', y = 'y', ab = 256;
  StreamTracker t(false, true);
  ClientView v;
  take(t.on_event(chunk("xy", {x, y, ab})), v);  // "ab" held back
  t.begin_replay(tok, false);
  EXPECT_EQ(t.resume_tokens(), (std::vector<int32_t>{x, y}));
  t.begin_replay(tok, false);  // the next replica died before its first chunk
  EXPECT_EQ(t.resume_tokens(), (std::vector<int32_t>{x, y}));
  take(t.on_event(chunk("ab", {ab})), v);
  take(t.on_event(chunk("x", {x}, "length")), v);
  EXPECT_EQ(v.text, "xyabx");
  EXPECT_EQ(v.ids, (std::vector<int32_t>{x, y, ab, x}));
  EXPECT_TRUE(t.finished());
}

TEST(RouterStream, TracksTokensStripsThemAndRewritesAReplay) {
  StreamTracker t(true, false);
  const auto chat_chunk = [](const char* id, json delta, std::vector<int32_t> ids, json finish = nullptr) {
    return json{{"id", id}, {"object", "chat.completion.chunk"}, {"created", id[9] - '0'}, {"model", "m"},
                {"choices", {{{"index", 0}, {"delta", delta}, {"token_ids", ids}, {"finish_reason", finish}}}}}
        .dump();
  };
  StreamEvent e = t.on_event(chat_chunk("chatcmpl-1", {{"role", "assistant"}, {"content", ""}}, {}));
  EXPECT_NE(e.out.find("assistant"), std::string::npos) << "the role chunk, once";
  EXPECT_EQ(t.n_output_chunks(), 0) << "a role chunk is no output (a replica sends it before the prefill)";
  e = t.on_event(chat_chunk("chatcmpl-1", {{"content", "Hi"}}, {7, 8}));
  EXPECT_EQ(t.n_output_chunks(), 1);
  EXPECT_EQ(e.kind, StreamEvent::Kind::Chunk);
  EXPECT_EQ(e.out.find("token_ids"), std::string::npos) << "the client did not ask for them";
  EXPECT_EQ(t.resume_tokens(), (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(t.text_bytes(), 2);
  EXPECT_EQ(t.on_event("{\"error\": {\"message\": \"rank 1 died\"}}").kind, StreamEvent::Kind::Error);
  t.begin_replay(byte_tokenizer(), false);
  EXPECT_EQ(t.next_choice(), 0);
  t.continue_choice(0);
  EXPECT_FALSE(t.replay_from_start());
  EXPECT_EQ(t.resume_tokens(), (std::vector<int32_t>{7, 8})) << "both tokens' text was sent (bytes 7 and 8)";
  // The continuation is a chat stream too (same endpoint): its role chunk is dropped, its identity replaced.
  EXPECT_TRUE(t.on_event(chat_chunk("chatcmpl-9", {{"role", "assistant"}, {"content", ""}}, {})).out.empty());
  e = t.on_event(chat_chunk("chatcmpl-9", {{"content", " there"}}, {9}, "stop"));
  ASSERT_EQ(e.out.rfind("data: ", 0), 0u);
  const json out = json::parse(e.out.substr(6));
  EXPECT_EQ(out["id"], "chatcmpl-1");
  EXPECT_EQ(out["object"], "chat.completion.chunk");
  EXPECT_EQ(out["created"], 1);
  EXPECT_EQ(out["choices"][0]["delta"]["content"], " there");
  EXPECT_TRUE(t.finished());
  EXPECT_EQ(t.n_output_chunks(), 2);
  EXPECT_EQ(t.resume_tokens(), (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(t.on_event("[DONE]").kind, StreamEvent::Kind::Done);
  EXPECT_TRUE(t.done());
}

// Logprobs entries travel with the ids: those of tokens generated again are dropped from the continuation, in
// both shapes; the echo's entries (completions echo + logprobs) are not output.
TEST(RouterStream, AReplayDropsTheLogprobsTheClientHas) {
  const Tokenizer& tok = byte_tokenizer();
  const int32_t x = 'x', c = 'c', ab = 256;
  // completions: stop "abz" held "ab" back; the prompt "pq" echoed with its 2 entries
  const auto lp_chunk = [](const std::string& text, std::vector<int32_t> ids, std::vector<std::string> toks,
                           std::vector<int64_t> offsets) {
    json lp = {{"tokens", toks}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
               {"text_offset", offsets}};
    for (size_t i = 0; i < toks.size(); ++i) {
      lp["token_logprobs"].push_back(-double(offsets[i]));
      lp["top_logprobs"].push_back({{toks[i], -double(offsets[i])}});
    }
    return json{{"id", "cmpl-1"}, {"object", "text_completion"}, {"created", 1}, {"model", "m"},
                {"choices", {{{"index", 0}, {"text", text}, {"token_ids", ids}, {"logprobs", lp}, {"finish_reason", nullptr}}}}}
        .dump();
  };
  StreamTracker t(false, true, 1, 2, 2);
  json got = json::array();
  const auto take_lp = [&](const StreamEvent& e) {
    const json j = json::parse(e.out.substr(6));
    for (const json& tk : j["choices"][0]["logprobs"]["tokens"]) got.push_back(tk);
    const json& lp = j["choices"][0]["logprobs"];
    EXPECT_EQ(lp["tokens"].size(), lp["text_offset"].size());
    EXPECT_EQ(lp["tokens"].size(), lp["top_logprobs"].size());
    EXPECT_EQ(lp["tokens"].size(), lp["token_logprobs"].size());
    return lp;
  };
  take_lp(t.on_event(lp_chunk("pqx", {x, ab}, {"p", "q", "x", "ab"}, {0, 1, 2, 3})));
  t.begin_replay(tok, false);
  EXPECT_EQ(t.resume_tokens(), (std::vector<int32_t>{x}));
  const json lp = take_lp(t.on_event(lp_chunk("abc", {ab, c}, {"ab", "c"}, {3, 5})));
  EXPECT_EQ(lp["text_offset"], json::array({5})) << "ab's entry dropped";
  EXPECT_EQ(lp["token_logprobs"], json::array({-5.0}));
  EXPECT_EQ(got, json::array({"p", "q", "x", "ab", "c"}));

  // chat: the same, in content[]
  StreamTracker ct(true, false);
  const auto chat_lp = [](const std::string& text, std::vector<int32_t> ids, std::vector<std::string> toks) {
    json content = json::array();
    for (const std::string& tk : toks) content.push_back({{"token", tk}, {"logprob", -1.0}, {"top_logprobs", json::array()}});
    return json{{"id", "chatcmpl-1"}, {"object", "chat.completion.chunk"}, {"created", 1}, {"model", "m"},
                {"choices", {{{"index", 0}, {"delta", {{"content", text}}}, {"token_ids", ids},
                              {"logprobs", {{"content", content}}}, {"finish_reason", nullptr}}}}}
        .dump();
  };
  json chat_got = json::array();
  const auto take_chat = [&](const StreamEvent& e) {
    const json j = json::parse(e.out.substr(6));
    for (const json& en : j["choices"][0]["logprobs"]["content"]) chat_got.push_back(en["token"]);
  };
  take_chat(ct.on_event(chat_lp("x", {x, ab, ab}, {"x", "ab", "ab"})));  // "abab" held back
  ct.begin_replay(tok, false);
  EXPECT_EQ(ct.resume_tokens(), (std::vector<int32_t>{x}));
  take_chat(ct.on_event(chat_lp("ab", {ab}, {"ab"})));
  ct.begin_replay(tok, false);  // a second replay before the first caught up: the first "ab"'s text is out now
  EXPECT_EQ(ct.resume_tokens(), (std::vector<int32_t>{x, ab}));
  take_chat(ct.on_event(chat_lp("ab", {ab}, {"ab"})));
  take_chat(ct.on_event(chat_lp("c", {c}, {"c"})));
  EXPECT_EQ(chat_got, json::array({"x", "ab", "ab", "c"}));
}

// A replica that died before its first chunk: the client has no echo, so the replay is the request again.
// Output chunks (what tells the router a replica has computed the prompt): generated ids, text past the echo, a
// finish_reason; not the echo alone, nor a usage chunk.
TEST(RouterStream, CountsChunksWithGeneratedOutput) {
  StreamTracker t(false, true, 1, 3);
  ClientView v;
  take(t.on_event(chunk("pqr", {})), v);
  EXPECT_EQ(t.n_output_chunks(), 0) << "the echo only";
  take(t.on_event(chunk("", {'x'})), v);
  EXPECT_EQ(t.n_output_chunks(), 1) << "an id";
  take(t.on_event(chunk("x", {})), v);
  EXPECT_EQ(t.n_output_chunks(), 2) << "text";
  EXPECT_FALSE(t.on_event(json{{"choices", json::array()}, {"usage", {{"prompt_tokens", 3}}}}.dump()).out.empty());
  EXPECT_EQ(t.n_output_chunks(), 2) << "usage";
}

TEST(RouterStream, AReplayBeforeTheEchoStartsOver) {
  StreamTracker t(false, true, 1, 3);
  t.begin_replay(byte_tokenizer(), false);
  EXPECT_TRUE(t.replay_from_start());
  ClientView v;
  take(t.on_event(chunk("pqrx", {'x'})), v);
  EXPECT_EQ(v.text, "pqrx");
  EXPECT_FALSE(t.replay_from_start());
  EXPECT_EQ(t.text_bytes(), 1) << "the echo is not output";
}

// A stream the router cannot resume on another replica says why (the error its client gets when the replica dies
// mid-stream names it), table-driven over completions bodies.
TEST(RouterRequest, WhyAStreamCannotResume) {
  const ChatTemplate tmpl(ChatStyle::ChatML, "", "<eos>");
  struct Case {
    json extra;
    std::string why;  // "" : replayable
  };
  const std::vector<Case> cases = {
      {json::object(), ""},
      {{{"temperature", 0.7}, {"seed", 3}}, ""},
      {{{"n", 2}}, ""},
      {{{"n", 2}, {"stream_options", {{"include_usage", true}}}}, ""},
      {{{"logprobs", 2}}, ""},
      {{{"echo", true}, {"logprobs", 0}}, ""},
      {{{"prompt_logprobs", 1}}, ""},
      {{{"guided_choice", {"ab", "bc"}}}, ""},
      {{{"prompt", json::array({"ab", "bc"})}}, ""},
      {{{"n", 2}, {"logprobs", 1}}, ""},
      {{{"max_tokens", "many"}}, "a body the router could not parse"},
      {{{"tpserve_continuation", {97}}}, "its own continuation"},
      {{{"prompt", {97, 98}}, {"resumed_output_tokens", 1}}, "its own continuation"},
  };
  for (const Case& c : cases) {
    json body = {{"prompt", "abcab"}, {"max_tokens", 8}, {"stream", true}};
    body.update(c.extra);
    const RouteInfo info = route_info(body, false, byte_tokenizer(), tmpl, 64, 4);
    EXPECT_EQ(info.not_replayable, c.why) << body.dump();
    EXPECT_EQ(info.replayable, c.why.empty()) << body.dump();
  }
}

TEST(RouterRequest, ReplayBodyContinuesAfterTheSentTokens) {
  RouteInfo info;
  info.chat = true;
  info.stream = true;
  info.replayable = true;
  info.prompt = {1, 2, 3};
  info.max_tokens = 10;
  const json original = {{"model", "m"}, {"messages", json::array()}, {"temperature", 0.8}, {"seed", 4},
                         {"stop", {"\n"}}, {"max_tokens", 10}, {"logprobs", true}, {"top_logprobs", 2}, {"stream", true}};
  const json b = json::parse(replay_body(original, info, 0, {40, 41}));
  EXPECT_EQ(b["tpserve_continuation"], json({40, 41})) << "output already sent, not prompt";
  EXPECT_TRUE(b["return_token_ids"].get<bool>());
  json same = b;
  same.erase("tpserve_continuation");
  same.erase("return_token_ids");
  EXPECT_EQ(same, original) << "the same request otherwise: endpoint fields, max_tokens, logprobs, seed";
  EXPECT_FALSE(b.contains("kv_transfer_params"));
  const json f = json::parse(forward_body(original, info, "http://h:1"));
  EXPECT_TRUE(f["return_token_ids"].get<bool>());
  EXPECT_EQ(f["kv_transfer_params"]["fetch_from"], "http://h:1");
  EXPECT_FALSE(json::parse(forward_body(original, info, "")).contains("kv_transfer_params"));
  EXPECT_FALSE(f.contains("tpserve_continuation"));
  EXPECT_EQ(f["seed"], 4) << "the client's seed as it is";
  info.seed = 77;  // the router's pick for a client without one: forwarded and replayed alike
  json unseeded = original;
  unseeded.erase("seed");
  EXPECT_EQ(json::parse(forward_body(unseeded, info, ""))["seed"], 77);
  EXPECT_EQ(json::parse(replay_body(unseeded, info, 0, {40}))["seed"], 77);
  EXPECT_EQ(json::parse(replay_body(unseeded, info, 0, {}))["tpserve_continuation"], json::array());
  EXPECT_FALSE(json::parse(replay_body(unseeded, info, 0, {}, true)).contains("tpserve_continuation"))
      << "from the start: the client has nothing of the choice";
  // Choice 2 of n = 3: an n = 1 request sampled as the engine samples choice 2, with seed + 2.
  info.n_choices = 3;
  info.seed.reset();
  json three = original;
  three["n"] = 3;
  const json b2 = json::parse(replay_body(three, info, 2, {40}));
  EXPECT_FALSE(b2.contains("n"));
  EXPECT_EQ(b2["seed"], 6);
  EXPECT_EQ(b2["tpserve_continuation"], json({40}));
  // prompt_logprobs: the client has them from the choice's first chunk, so the continuation asks none (a
  // replica refuses them with tpserve_continuation); a replay from the start asks them again.
  json plp = original;
  plp["prompt_logprobs"] = 1;
  EXPECT_FALSE(json::parse(replay_body(plp, info, 0, {40})).contains("prompt_logprobs"));
  EXPECT_EQ(json::parse(replay_body(plp, info, 0, {}, true))["prompt_logprobs"], 1);
  three["seed"] = -1;
  EXPECT_EQ(json::parse(replay_body(three, info, 2, {40}))["seed"], 1) << "the seed's bits, as the replica reads them";
}

// n = 3: the replica died with choice 0 finished; choices 1 and 2 continue one after the other (n = 1 requests
// whose index 0 is the choice), and [DONE] reaches the client after the last.
TEST(RouterStream, ChoicesOfAnNRequestContinueOneAtATime) {
  const Tokenizer& tok = byte_tokenizer();
  const int32_t x = 'x', y = 'y', z = 'z', ab = 256;
  StreamTracker t(false, true, 3);
  const auto indexed = [](int index, const std::string& text, const std::vector<int32_t>& ids, const char* finish) {
    json j = json::parse(chunk(text, ids, finish));
    j["choices"][0]["index"] = index;
    return j.dump();
  };
  std::vector<ClientView> v(3);
  const auto take_i = [&](const StreamEvent& e) {
    const json j = json::parse(e.out.substr(6));
    const int i = j["choices"][0]["index"].get<int>();
    take(e, v.at(size_t(i)));
  };
  take_i(t.on_event(indexed(0, "x", {x}, nullptr)));
  take_i(t.on_event(indexed(1, "y", {y, ab}, nullptr)));  // "ab" held back
  take_i(t.on_event(indexed(0, "", {}, "length")));
  take_i(t.on_event(indexed(2, "z", {z}, nullptr)));
  EXPECT_FALSE(t.finished());
  t.begin_replay(tok, false);
  EXPECT_EQ(t.next_choice(), 1);
  EXPECT_EQ(t.resume_tokens(1), (std::vector<int32_t>{y}));
  EXPECT_EQ(t.resume_tokens(2), (std::vector<int32_t>{z}));
  t.continue_choice(1);
  take_i(t.on_event(indexed(0, "abx", {ab, x}, "length")));
  StreamEvent e = t.on_event("[DONE]");
  EXPECT_EQ(e.kind, StreamEvent::Kind::Done);
  EXPECT_TRUE(e.out.empty()) << "choice 2 still owes its text";
  EXPECT_FALSE(t.done());
  EXPECT_TRUE(t.segment_done());
  EXPECT_EQ(t.next_choice(), 2);
  t.continue_choice(2);
  EXPECT_FALSE(t.segment_done());
  take_i(t.on_event(indexed(0, "y", {y}, "length")));
  EXPECT_TRUE(t.finished());
  EXPECT_EQ(t.on_event("[DONE]").out, sse_event("[DONE]"));
  EXPECT_TRUE(t.done());
  EXPECT_EQ(v[0].text, "x");
  EXPECT_EQ(v[1].text, "yabx");
  EXPECT_EQ(v[1].ids, (std::vector<int32_t>{y, ab, x}));
  EXPECT_EQ(v[2].text, "zy");
  EXPECT_EQ(v[2].ids, (std::vector<int32_t>{z, y}));
}

// n = 2 with a usage chunk: the continuations' own usage chunks are not passed on; one chunk at the end counts
// the prompt once and the completion tokens of every choice (a continuation's count includes its continued
// output; a choice finished before the replay counts its ids), with the original response's identity.
TEST(RouterStream, AReplayOfNChoicesSendsOneUsageChunk) {
  const Tokenizer& tok = byte_tokenizer();
  const int32_t x = 'x', y = 'y', z = 'z';
  StreamTracker t(false, true, 2, 0, 0, /*include_usage=*/true, /*n_prompt_tokens=*/9);
  const auto indexed = [](int index, const std::string& text, const std::vector<int32_t>& ids, const char* finish) {
    json j = json::parse(chunk(text, ids, finish));
    j["choices"][0]["index"] = index;
    return j.dump();
  };
  const auto usage = [](const char* id, int64_t prompt, int64_t completion) {
    return json{{"id", id}, {"object", "text_completion"}, {"created", 5}, {"model", "m"}, {"choices", json::array()},
                {"usage", {{"prompt_tokens", prompt}, {"completion_tokens", completion},
                           {"total_tokens", prompt + completion}}}}
        .dump();
  };
  EXPECT_FALSE(t.on_event(indexed(0, "xy", {x, y}, nullptr)).out.empty());
  EXPECT_FALSE(t.on_event(indexed(0, "", {}, "length")).out.empty());
  EXPECT_FALSE(t.on_event(indexed(1, "z", {z}, nullptr)).out.empty());
  t.begin_replay(tok, false);
  ASSERT_EQ(t.next_choice(), 1);
  t.continue_choice(1);
  EXPECT_FALSE(t.on_event(indexed(0, "zz", {z, z}, "length")).out.empty());
  EXPECT_TRUE(t.on_event(usage("cmpl-7", 4, 3)).out.empty()) << "choice 1's own usage: not for the client";
  const StreamEvent e = t.on_event("[DONE]");
  EXPECT_TRUE(t.done());
  const std::string first = e.out.substr(0, e.out.find("\n\n") + 2);
  ASSERT_EQ(first.rfind("data: ", 0), 0u) << e.out;
  const json u = json::parse(first.substr(6));
  EXPECT_EQ(u["id"], "cmpl-1") << "the original response's identity";
  EXPECT_EQ(u["created"], 1);
  EXPECT_EQ(u["choices"], json::array());
  EXPECT_EQ(u["usage"], json({{"prompt_tokens", 4}, {"completion_tokens", 2 + 3}, {"total_tokens", 9}}))
      << "the replica's prompt count once; choice 0's 2 ids + choice 1's continuation's 3";
  EXPECT_EQ(e.out.substr(first.size()), sse_event("[DONE]"));

  // Every choice finished before the replica died (no usage chunk, no [DONE] came): close() owes both, the
  // prompt as the router counted it.
  StreamTracker a(false, true, 1, 0, 0, true, 9);
  a.on_event(chunk("xy", {x, y}, "stop"));
  ASSERT_TRUE(a.finished());
  const std::string closed = a.close();
  const json ua = json::parse(closed.substr(6, closed.find("\n\n") - 6));
  EXPECT_EQ(ua["usage"], json({{"prompt_tokens", 9}, {"completion_tokens", 2}, {"total_tokens", 11}}));
  EXPECT_TRUE(a.done());
  // The unbroken response's own usage chunk is passed on, and not sent twice.
  StreamTracker b(false, true, 1, 0, 0, true, 9);
  b.on_event(chunk("xy", {x, y}, "stop"));
  EXPECT_FALSE(b.on_event(usage("cmpl-1", 9, 2)).out.empty());
  EXPECT_EQ(b.close(), sse_event("[DONE]"));
  // Without include_usage, no usage chunk is made up.
  StreamTracker c(false, true, 1);
  c.on_event(chunk("xy", {x, y}, "stop"));
  EXPECT_EQ(c.close(), sse_event("[DONE]"));
}

// prompt_logprobs come with each choice's first output chunk (completions: in the choice; chat: beside it): a
// choice whose client has them continues; one whose client has not starts over (the replay computes them).
TEST(RouterStream, AChoiceWithoutItsPromptLogprobsStartsOver) {
  const int32_t x = 'x', y = 'y';
  StreamTracker t(false, true, 2, 0, 0, false, 3, /*prompt_logprobs=*/true);
  EXPECT_TRUE(t.replay_from_start(0));
  json c0 = json::parse(chunk("x", {x}, nullptr));
  c0["choices"][0]["prompt_logprobs"] = json::array({nullptr, {{"97", {{"logprob", -1.0}}}}});
  t.on_event(c0.dump());
  EXPECT_FALSE(t.replay_from_start(0));
  EXPECT_TRUE(t.replay_from_start(1)) << "choice 1's first chunk did not come";
  t.begin_replay(byte_tokenizer(), false);
  EXPECT_EQ(t.resume_tokens(0), std::vector<int32_t>{x});

  StreamTracker ct(true, false, 1, 0, 0, false, 3, true);
  EXPECT_TRUE(ct.replay_from_start(0));
  const json role = {{"id", "c"}, {"object", "chat.completion.chunk"}, {"created", 1}, {"model", "m"},
                     {"choices", {{{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"finish_reason", nullptr}}}}};
  ct.on_event(role.dump());
  EXPECT_TRUE(ct.replay_from_start(0)) << "the role chunk carries no prompt_logprobs";
  json first = role;
  first["choices"][0]["delta"] = {{"content", "y"}};
  first["choices"][0]["token_ids"] = {y};
  first["prompt_logprobs"] = json::array({nullptr});
  ct.on_event(first.dump());
  EXPECT_FALSE(ct.replay_from_start(0));
  // Without prompt_logprobs asked for, only the echo decides.
  StreamTracker p(false, true, 1, 0, 0, false, 3, false);
  EXPECT_FALSE(p.replay_from_start(0));
}

// Several prompts (completions, n = 2): choice j * 2 + i continues as prompt j alone (the client's element),
// n = 1, seed + i; each choice is led by its own prompt's echo; the usage counts every prompt's tokens.
TEST(RouterRequest, SeveralPromptsContinueOneChoiceAtATime) {
  const ChatTemplate tmpl(ChatStyle::ChatML, "", "<eos>");
  const json body = {{"prompt", {"ab", "abc"}}, {"n", 2}, {"seed", 10}, {"echo", true},
                     {"max_tokens", 8}, {"stream", true}, {"stream_options", {{"include_usage", true}}}};
  const RouteInfo info = route_info(body, false, byte_tokenizer(), tmpl, 64, 4);
  ASSERT_TRUE(info.replayable) << info.not_replayable;
  EXPECT_EQ(info.n_prompts, 2);
  EXPECT_EQ(info.prompt_sizes, (std::vector<int64_t>{1, 2})) << "\"ab\" is one merged token";
  EXPECT_EQ(info.prompt_echo_bytes, (std::vector<int64_t>{2, 3}));
  const json b3 = json::parse(replay_body(body, info, 3, {120}));
  EXPECT_EQ(b3["prompt"], "abc") << "choice 3 = prompt 1's choice 1";
  EXPECT_EQ(b3["seed"], 11);
  EXPECT_FALSE(b3.contains("n"));
  EXPECT_EQ(b3["tpserve_continuation"], json::array({120}));
  const json b0 = json::parse(replay_body(body, info, 0, {}, true));
  EXPECT_EQ(b0["prompt"], "ab");
  EXPECT_EQ(b0["seed"], 10);

  StreamTracker t(false, true, 4, 2, 0, true, 3);
  t.set_prompts(2, info.prompt_echo_bytes, info.prompt_echo_logprobs);
  const auto indexed = [](int index, const std::string& text, const std::vector<int32_t>& ids, const char* finish) {
    json j = json::parse(chunk(text, ids, finish));
    j["choices"][0]["index"] = index;
    return j.dump();
  };
  t.on_event(indexed(0, "abx", {'x'}, "length"));
  t.on_event(indexed(1, "abx", {'x'}, "length"));
  t.on_event(indexed(2, "abcy", {'y'}, nullptr));
  EXPECT_EQ(t.text_bytes(2), 1) << "prompt 1's echo is 3 bytes";
  EXPECT_TRUE(t.replay_from_start(3)) << "no chunk of choice 3: its echo is owed";
  t.begin_replay(byte_tokenizer(), false);
  ASSERT_EQ(t.next_choice(), 2);
  t.continue_choice(2);
  t.on_event(indexed(0, "z", {'z'}, "length"));
  t.on_event(json{{"id", "c"}, {"object", "text_completion"}, {"created", 1}, {"model", "m"}, {"choices", json::array()},
                  {"usage", {{"prompt_tokens", 2}, {"completion_tokens", 2}, {"total_tokens", 4}}}}.dump());
  EXPECT_TRUE(t.on_event("[DONE]").out.empty()) << "choice 3 still owes its text";
  ASSERT_EQ(t.next_choice(), 3);
  t.continue_choice(3);
  t.on_event(indexed(0, "abcw", {'w'}, "length"));
  const StreamEvent e = t.on_event("[DONE]");
  const json u = json::parse(e.out.substr(6, e.out.find("\n\n") - 6));
  EXPECT_EQ(u["usage"]["prompt_tokens"], 3) << "both prompts (1 + 2), not the continuation's one (its 2 came)";
  EXPECT_EQ(u["usage"]["completion_tokens"], 1 + 1 + 2 + 1);
  EXPECT_TRUE(t.done());
}

// A chat stream with tools, as a replica streams it (tool_call_response.h): content, then the held text's ids
// (empty deltas), then at the end per call a header chunk and argument fragments, then finish_reason
// "tool_calls". `ids` names the calls ("call_A0", ...), so a replica's fresh ids show where they came from.
// `index`: the choice index its chunks carry (an n > 1 response interleaves its choices' streams).
std::vector<std::string> tool_stream(const std::string& ids, bool continuation, int index = 0) {
  const auto chunk_of = [](json choice) {
    return json{{"id", "chatcmpl-x"}, {"object", "chat.completion.chunk"}, {"created", 2}, {"model", "m"},
                {"choices", {std::move(choice)}}}
        .dump();
  };
  const auto delta = [&](json d, std::vector<int32_t> tids, json finish = nullptr) {
    return chunk_of({{"index", index}, {"delta", std::move(d)}, {"logprobs", nullptr}, {"finish_reason", finish},
                     {"token_ids", tids}});
  };
  const auto call = [&](json tc) {
    return chunk_of({{"index", index}, {"delta", {{"tool_calls", json::array({std::move(tc)})}}}, {"logprobs", nullptr},
                     {"finish_reason", nullptr}});
  };
  std::vector<std::string> out = {delta({{"role", "assistant"}, {"content", ""}}, {})};
  if (!continuation) out.push_back(delta({{"content", "Hi "}}, {'H', 'i', ' '}));
  for (const int32_t t : {int32_t('<'), int32_t('x'), int32_t(258)}) out.push_back(delta(json::object(), {t}));
  const std::vector<std::pair<std::string, std::string>> calls = {
      {"get_time", R"({"tz":"Europe/Oslo","format":"24h"})"}, {"get_weather", R"({"city":"Zürich","days":3})"}};
  for (size_t k = 0; k < calls.size(); ++k) {
    out.push_back(call({{"index", k}, {"id", ids + std::to_string(k)}, {"type", "function"},
                        {"function", {{"name", calls[k].first}, {"arguments", ""}}}}));
    for (const std::string& f : argument_fragments(calls[k].second, 8))
      out.push_back(call({{"index", k}, {"function", {{"arguments", f}}}}));
  }
  out.push_back(delta(json::object(), {}, "tool_calls"));
  out.push_back("[DONE]");
  return out;
}

struct ToolClientView {
  std::string content;
  std::vector<int32_t> ids;
  std::vector<json> calls;  // [index] {"id", "name", "arguments", "headers": how many header chunks}
  int n_finish = 0, n_roles = 0, n_done = 0;
  json finish;
};

// One event as the client gets it, into the view of the choice it carries (views[index]; [DONE] counts in
// views[0]).
void take_tool(const StreamEvent& e, std::vector<ToolClientView>& views) {
  if (e.out.empty()) return;
  ASSERT_EQ(e.out.rfind("data: ", 0), 0u);
  if (e.out == sse_event("[DONE]")) {
    ++views.at(0).n_done;
    return;
  }
  const json j = json::parse(e.out.substr(6));
  EXPECT_EQ(j["id"], "chatcmpl-x");
  const json& c = j["choices"][0];
  ASSERT_LT(c["index"].get<size_t>(), views.size()) << c;
  ToolClientView& v = views[c["index"].get<size_t>()];
  const json& d = c["delta"];
  v.n_roles += d.contains("role");
  if (d.contains("content")) v.content += d["content"].get<std::string>();
  for (const json& id : c.value("token_ids", json::array())) v.ids.push_back(id.get<int32_t>());
  for (const json& tc : d.value("tool_calls", json::array())) {
    const size_t k = tc["index"].get<size_t>();
    if (v.calls.size() <= k) v.calls.resize(k + 1, json{{"headers", 0}, {"arguments", ""}});
    json& mine = v.calls[k];
    if (tc.contains("id")) {
      mine["id"] = tc["id"];
      mine["name"] = tc["function"]["name"];
      mine["headers"] = mine["headers"].get<int>() + 1;
    }
    EXPECT_TRUE(tc.contains("id") || tc["function"]["arguments"] != "") << "a chunk with nothing new: " << tc;
    mine["arguments"] = mine["arguments"].get<std::string>() + tc["function"]["arguments"].get<std::string>();
  }
  if (!c["finish_reason"].is_null()) {
    ++v.n_finish;
    v.finish = c["finish_reason"];
  }
}

void take_tool(const StreamEvent& e, ToolClientView& v) {
  std::vector<ToolClientView> one(1);
  std::swap(one[0], v);
  take_tool(e, one);
  std::swap(one[0], v);
}

// A resumed choice as the client sees it equals the unbroken run's: one role chunk, finish_reason "tool_calls"
// once, content "Hi ", the same ids, and its two calls each with one header, the same name and argument bytes
// and the id `id_of(k)` (that of the first replica whose header for call k the client got).
template <typename IdOf>
void expect_resumed_tool_choice(const ToolClientView& got, const ToolClientView& want, IdOf id_of) {
  EXPECT_EQ(got.n_roles, 1);
  EXPECT_EQ(got.n_finish, 1);
  EXPECT_EQ(got.finish, "tool_calls");
  EXPECT_EQ(got.content, "Hi ");
  EXPECT_EQ(got.ids, want.ids);
  ASSERT_EQ(got.calls.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(got.calls[k]["headers"], 1) << k;
    EXPECT_EQ(got.calls[k]["name"], want.calls[k]["name"]) << k;
    EXPECT_EQ(got.calls[k]["arguments"], want.calls[k]["arguments"]) << k;
    EXPECT_EQ(got.calls[k]["id"], id_of(k)) << k;
  }
}

// The replica dies at each point of a tool-call stream (before the calls, after a header, in the arguments,
// between the two calls, before the finish chunk); the continuation (the replica's calls again, with fresh ids)
// gives the client the unbroken run's calls: each header once with the id it saw first, the argument bytes once,
// finish_reason "tool_calls" once. A second cut in the continuation too.
TEST(RouterStream, AToolCallStreamResumesWithoutRepeatingItsCalls) {
  const Tokenizer& tok = byte_tokenizer();
  const std::vector<std::string> original = tool_stream("call_A", false);
  ToolClientView unbroken;
  {
    StreamTracker t(true, true);
    for (const std::string& ev : original) take_tool(t.on_event(ev), unbroken);
    ASSERT_EQ(unbroken.calls.size(), 2u);
    EXPECT_EQ(unbroken.calls[0]["arguments"], R"({"tz":"Europe/Oslo","format":"24h"})");
    EXPECT_EQ(unbroken.calls[1]["arguments"], R"({"city":"Zürich","days":3})");
  }
  const auto header_at = [&](const std::vector<std::string>& evs, size_t k) {  // the event index of call k's header
    for (size_t i = 0; i < evs.size(); ++i)
      if (evs[i].find("\"id\":\"call_A" + std::to_string(k) + "\"") != std::string::npos) return i;
    ADD_FAILURE() << "no header " << k;
    return evs.size();
  };
  const size_t h0 = header_at(original, 0), h1 = header_at(original, 1), fin = original.size() - 2;
  struct Case {
    const char* name;
    size_t cut;                // events the client got before the replica died
    size_t cut2 = 0;           // > 0: the first continuation dies too after this many events
    std::vector<int32_t> resume;
  };
  const std::vector<int32_t> hi = {'H', 'i', ' '};
  const std::vector<Case> cases = {
      {"mid-held text, before any call", 3, 0, hi},
      {"every id out, before the first header", h0, 0, hi},
      {"after call 0's header", h0 + 1, 0, hi},
      {"in call 0's arguments", h0 + 3, 0, hi},
      {"between the two calls", h1, 0, hi},
      {"after call 1's header", h1 + 1, 0, hi},
      {"in call 1's arguments", h1 + 2, 0, hi},
      {"every argument out, before the finish chunk", fin, 0, hi},
      {"in call 0's arguments, then the continuation dies in call 1's", h0 + 2, h1 - 1 + 2, hi},
      {"after call 0's header, then the continuation dies before any of its calls", h0 + 1, 3, hi},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    StreamTracker t(true, true);
    ToolClientView v;
    for (size_t i = 0; i < k.cut; ++i) take_tool(t.on_event(original[i]), v);
    t.begin_replay(tok, false);
    EXPECT_EQ(t.resume_tokens(), k.resume) << "the held text is not the client's: generated again";
    std::vector<std::string> cont = tool_stream("call_B", true);
    if (k.cut2 > 0) {
      t.continue_choice(t.next_choice());
      for (size_t i = 0; i < k.cut2; ++i) take_tool(t.on_event(cont[i]), v);
      t.begin_replay(tok, false);
      EXPECT_EQ(t.resume_tokens(), k.resume);
      cont = tool_stream("call_C", true);
    }
    t.continue_choice(t.next_choice());
    for (const std::string& ev : cont) take_tool(t.on_event(ev), v);
    EXPECT_TRUE(t.done());
    EXPECT_EQ(v.n_done, 1);
    expect_resumed_tool_choice(v, unbroken, [&](size_t c) {
      const size_t h = c == 0 ? h0 : h1;  // its header's event index; one less in a continuation (no "Hi ")
      const std::string from = k.cut > h ? "A" : k.cut2 == 0 || k.cut2 > h - 1 ? "B" : "C";
      return "call_" + from + std::to_string(c);
    });
    EXPECT_EQ(t.tool_call_bytes(), (std::vector<int64_t>{int64_t(unbroken.calls[0]["arguments"].get<std::string>().size()),
                                                          int64_t(unbroken.calls[1]["arguments"].get<std::string>().size())}));
  }
}

// n = 2 tool-call streams, the two choices' chunks interleaved as a replica sends them, and the replica dies
// after every event in turn: each unfinished choice resumes on its own continuation (n = 1, index 0, fresh ids),
// one after another; per choice the client gets each call's header once (with the id it saw first), its argument
// bytes once, finish_reason "tool_calls" once; one role chunk per choice and one [DONE].
TEST(RouterStream, ToolCallStreamsOfTwoChoicesResumeAtEveryCut) {
  const Tokenizer& tok = byte_tokenizer();
  std::vector<std::string> original;
  {
    std::vector<std::string> a = tool_stream("call_A0_", false, 0), b = tool_stream("call_A1_", false, 1);
    a.pop_back();  // their [DONE]: one at the end of the response
    b.pop_back();
    for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
      if (i < a.size()) original.push_back(a[i]);
      if (i < b.size()) original.push_back(b[i]);
    }
    original.push_back("[DONE]");
  }
  std::vector<ToolClientView> unbroken(2);
  {
    StreamTracker t(true, true, 2);
    for (const std::string& ev : original) take_tool(t.on_event(ev), unbroken);
    ASSERT_TRUE(t.done());
    for (int c = 0; c < 2; ++c) ASSERT_EQ(unbroken[size_t(c)].calls.size(), 2u) << c;
  }
  // The event index of choice c's call k's header in the original stream.
  const auto header_at = [&](int c, size_t k) {
    const std::string id = "\"id\":\"call_A" + std::to_string(c) + "_" + std::to_string(k) + "\"";
    for (size_t i = 0; i < original.size(); ++i)
      if (original[i].find(id) != std::string::npos) return i;
    ADD_FAILURE() << "no header " << c << " " << k;
    return original.size();
  };
  for (size_t cut = 1; cut + 1 < original.size(); ++cut) {
    SCOPED_TRACE("cut after event " + std::to_string(cut));
    StreamTracker t(true, true, 2);
    std::vector<ToolClientView> v(2);
    for (size_t i = 0; i < cut; ++i) take_tool(t.on_event(original[i]), v);
    t.begin_replay(tok, false);
    int resumed = 0;
    for (int32_t c = t.next_choice(); c >= 0; c = t.next_choice()) {
      ASSERT_LT(resumed++, 2) << "a choice resumed twice";
      EXPECT_TRUE(v[size_t(c)].content.empty() || v[size_t(c)].content == "Hi ");
      // What the choice's client has as text: nothing, or "Hi " (the held ids after it are generated again).
      const std::vector<int32_t>& from = t.resume_tokens(c);
      EXPECT_TRUE(from.empty() || from == (std::vector<int32_t>{'H', 'i', ' '}));
      t.continue_choice(c);
      for (const std::string& ev : tool_stream("call_B" + std::to_string(c) + "_", !from.empty()))
        take_tool(t.on_event(ev), v);
    }
    EXPECT_TRUE(t.done());
    EXPECT_EQ(v[0].n_done, 1);
    for (int c = 0; c < 2; ++c) {
      SCOPED_TRACE("choice " + std::to_string(c));
      expect_resumed_tool_choice(v[size_t(c)], unbroken[size_t(c)], [&](size_t k) {
        const std::string from = cut > header_at(c, k) ? "A" : "B";
        return "call_" + from + std::to_string(c) + "_" + std::to_string(k);
      });
    }
  }
}

}  // namespace
}  // namespace tp

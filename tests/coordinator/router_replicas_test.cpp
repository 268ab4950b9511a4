// The router's live state (coordinator/router_replicas.h) and its stream bookkeeping (router_stream.h,
// router_request.h) as pure units, table-driven where it fits: KV event batches in -> routing choice out; a
// replica down or rejoined drops its entries; the prompt's block chain equals the hashes a BlockManager
// publishes; SSE split across pieces; token ids tracked and stripped; a replay's completions chunks back in the
// original chat shape; the replay body continues after the sent tokens.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/router_replicas.h"
#include "coordinator/router_request.h"
#include "coordinator/router_stream.h"
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
    rs.release(ch.replica, 20);
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
  EXPECT_EQ(rs.choose({9}, 4, 4).replica, 1);
  rs.release(1, 4);
  // One failed check is not enough (unhealthy_after 2); two are; the entries go with it.
  rs.health(1, false, "timeout", "", 0, 2);
  EXPECT_EQ(rs.n_up(), 2);
  rs.health(1, false, "timeout", "", 0, 2);
  EXPECT_EQ(rs.n_up(), 1);
  EXPECT_EQ(rs.snapshot()[1].down_reason, "timeout");
  EXPECT_EQ(rs.choose({9}, 4, 4).replica, 0);
  rs.release(0, 4);
  // Back up as generation 2: a batch of generation 1 (the dead process) is dropped.
  rs.health(1, true, "", "tcp://new", 0, 2);
  EXPECT_EQ(rs.snapshot()[1].generation, 2);
  EXPECT_EQ(rs.snapshot()[1].events_endpoint, "tcp://new");
  rs.apply(1, 1, stored({9}));
  EXPECT_EQ(rs.snapshot()[1].n_blocks, 0);
  rs.apply(1, 2, stored({9}));
  EXPECT_EQ(rs.snapshot()[1].n_blocks, 1);
  // Excluded (a replay), marked down (a failed call), left: never chosen.
  EXPECT_EQ(rs.choose({9}, 4, 4, {1}).replica, 0);
  rs.release(0, 4);
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
  EXPECT_EQ(rs.choose({5, 6}, 8, 100).replica, 0);
  const RouteChoice c = rs.choose({5, 6}, 8, 100);  // replica 0 carries 100 tokens now
  EXPECT_EQ(c.replica, 1);
  EXPECT_EQ(c.holder, 0);
  EXPECT_EQ(c.holder_url, "http://a:1");
  EXPECT_EQ(c.holder_overlap, 2);
  EXPECT_EQ(c.overlap_blocks, 0);
  EXPECT_EQ(rs.snapshot()[0].in_flight, 1);
  rs.release(0, 100);
  rs.release(1, 100);
  EXPECT_EQ(rs.snapshot()[0].in_flight_tokens, 0);
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

TEST(RouterStream, TracksTokensStripsThemAndRewritesAReplay) {
  StreamTracker t(true, false);
  const json first = {{"id", "chatcmpl-1"}, {"object", "chat.completion.chunk"}, {"created", 5}, {"model", "m"},
                      {"choices", {{{"index", 0}, {"delta", {{"content", "Hi"}}}, {"token_ids", {7, 8}},
                                    {"finish_reason", nullptr}}}}};
  StreamEvent e = t.on_event(first.dump());
  EXPECT_EQ(e.kind, StreamEvent::Kind::Chunk);
  EXPECT_EQ(e.out.find("token_ids"), std::string::npos) << "the client did not ask for them";
  EXPECT_EQ(t.sent_tokens(), (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(t.on_event("{\"error\": {\"message\": \"rank 1 died\"}}").kind, StreamEvent::Kind::Error);
  t.begin_replay();
  const json cont = {{"id", "cmpl-9"}, {"object", "text_completion"}, {"created", 6}, {"model", "m"},
                     {"choices", {{{"index", 0}, {"text", " there"}, {"token_ids", {9}}, {"finish_reason", "stop"}}}}};
  e = t.on_event(cont.dump());
  ASSERT_EQ(e.out.rfind("data: ", 0), 0u);
  const json out = json::parse(e.out.substr(6));
  EXPECT_EQ(out["id"], "chatcmpl-1");
  EXPECT_EQ(out["object"], "chat.completion.chunk");
  EXPECT_EQ(out["created"], 5);
  EXPECT_EQ(out["choices"][0]["delta"]["content"], " there");
  EXPECT_FALSE(out["choices"][0].contains("text"));
  EXPECT_TRUE(t.finished());
  EXPECT_EQ(t.sent_tokens(), (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(t.on_event("[DONE]").kind, StreamEvent::Kind::Done);
  EXPECT_TRUE(t.done());
}

TEST(RouterRequest, ReplayBodyContinuesAfterTheSentTokens) {
  RouteInfo info;
  info.chat = true;
  info.prompt = {1, 2, 3};
  info.max_tokens = 10;
  const json original = {{"model", "m"}, {"messages", json::array()}, {"temperature", 0}, {"seed", 4},
                         {"stop", {"\n"}}, {"tools", json::array()}};
  const json b = json::parse(replay_body(original, info, {40, 41}));
  EXPECT_EQ(b["prompt"], json({1, 2, 3, 40, 41}));
  EXPECT_EQ(b["max_tokens"], 8);
  EXPECT_EQ(b["seed"], 4);
  EXPECT_EQ(b["temperature"], 0);
  EXPECT_EQ(b["stop"], json({"\n"}));
  EXPECT_TRUE(b["stream"].get<bool>());
  EXPECT_TRUE(b["return_token_ids"].get<bool>());
  EXPECT_FALSE(b.contains("messages"));
  info.stream = true;
  info.replayable = true;
  const json f = json::parse(forward_body(original, info, "http://h:1"));
  EXPECT_TRUE(f["return_token_ids"].get<bool>());
  EXPECT_EQ(f["kv_transfer_params"]["fetch_from"], "http://h:1");
  EXPECT_FALSE(json::parse(forward_body(original, info, "")).contains("kv_transfer_params"));
}

}  // namespace
}  // namespace tp

// The router's core as pure units, table-driven: events in (stored / removed / cleared per replica, replicas
// up or down, their load), choice out, for round_robin, least_load and prefix_aware (router_policy.h states the
// cost).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "coordinator/router_index.h"
#include "coordinator/router_policy.h"

namespace tp {
namespace {

// A chain of n block hashes for a conversation `conv` (distinct conversations share no block).
std::vector<uint64_t> chain(uint64_t conv, int n) {
  std::vector<uint64_t> c;
  for (int i = 0; i < n; ++i) c.push_back(conv * 1000 + uint64_t(i));
  return c;
}

TEST(PrefixIndex, EventsInOverlapOut) {
  struct Event {
    char kind;  // 's' stored, 'r' removed, 'c' cleared (or replica down), 'e' expected (a request in flight), 'u' unexpected (it ended)
    int replica;
    std::vector<uint64_t> hashes;
  };
  struct Case {
    std::string name;
    std::vector<Event> events;
    std::vector<uint64_t> query;
    std::vector<int64_t> overlap;  // [replica 0, 1]
  };
  const std::vector<Case> cases = {
      {"empty", {}, chain(1, 4), {0, 0}},
      {"stored on 0", {{'s', 0, chain(1, 4)}}, chain(1, 4), {4, 0}},
      {"longer query", {{'s', 1, chain(1, 2)}}, chain(1, 5), {0, 2}},
      {"middle block evicted cuts the prefix", {{'s', 0, chain(1, 4)}, {'r', 0, {1001}}}, chain(1, 4), {1, 0}},
      {"removal on another replica does not count", {{'s', 0, chain(1, 3)}, {'r', 1, chain(1, 3)}}, chain(1, 3), {3, 0}},
      {"both hold, one cleared (down)", {{'s', 0, chain(1, 3)}, {'s', 1, chain(1, 2)}, {'c', 0, {}}}, chain(1, 3), {0, 2}},
      {"other conversation", {{'s', 0, chain(2, 4)}}, chain(1, 4), {0, 0}},
      {"first block missing: nothing", {{'s', 0, {1001, 1002}}}, chain(1, 3), {0, 0}},
      {"expected on 0 (a request in flight) counts", {{'e', 0, chain(1, 3)}}, chain(1, 4), {3, 0}},
      {"stored head + expected tail", {{'s', 0, chain(1, 2)}, {'e', 0, chain(1, 4)}}, chain(1, 4), {4, 0}},
      {"expected then ended: gone", {{'e', 0, chain(1, 3)}, {'u', 0, chain(1, 3)}}, chain(1, 3), {0, 0}},
      {"two requests expect it, one ends: still expected",
       {{'e', 0, chain(1, 3)}, {'e', 0, chain(1, 2)}, {'u', 0, chain(1, 3)}}, chain(1, 3), {2, 0}},
      {"cleared keeps what requests in flight expect", {{'s', 0, chain(1, 2)}, {'e', 0, chain(1, 3)}, {'c', 0, {}}},
       chain(1, 3), {3, 0}},
      {"an end without a start is ignored", {{'u', 1, chain(1, 3)}, {'s', 1, chain(1, 2)}}, chain(1, 3), {0, 2}},
  };
  for (const Case& c : cases) {
    PrefixIndex idx;
    for (const Event& e : c.events) {
      if (e.kind == 's') idx.stored(e.replica, e.hashes);
      if (e.kind == 'r') idx.removed(e.replica, e.hashes);
      if (e.kind == 'c') idx.cleared(e.replica);
      if (e.kind == 'e') idx.expect(e.replica, e.hashes);
      if (e.kind == 'u') idx.unexpect(e.replica, e.hashes);
    }
    for (int r = 0; r < 2; ++r) EXPECT_EQ(idx.overlap(r, c.query), c.overlap[size_t(r)]) << c.name << " replica " << r;
  }
}

TEST(PrefixIndex, ExpectedBlocksAreNotStoredOnes) {
  PrefixIndex idx;
  idx.stored(0, chain(1, 2));
  idx.expect(0, chain(1, 5));
  EXPECT_EQ(idx.overlap(0, chain(1, 5)), 5);
  EXPECT_EQ(idx.overlap(0, chain(1, 5), false), 2) << "stored only: what a KV fetch can read";
  EXPECT_EQ(idx.n_blocks(0), 2);
  EXPECT_EQ(idx.n_expected(0), 5);
  EXPECT_EQ(idx.n_held_or_expected(0), 5);
  idx.stored(0, chain(2, 3));
  EXPECT_EQ(idx.n_held_or_expected(0), 8);
  EXPECT_EQ(idx.n_holders(1004), 0);
  idx.unexpect(0, chain(1, 5));
  EXPECT_EQ(idx.n_expected(0), 0);
  EXPECT_EQ(idx.overlap(0, chain(1, 5)), 2);
}

TEST(PrefixIndex, CountsFollowTheEvents) {
  PrefixIndex idx;
  idx.stored(0, chain(1, 3));
  idx.stored(1, chain(1, 2));
  EXPECT_EQ(idx.n_blocks(0), 3);
  EXPECT_EQ(idx.n_holders(1000), 2);
  idx.cleared(1);
  EXPECT_EQ(idx.n_holders(1000), 1);
  EXPECT_EQ(idx.n_blocks(1), 0);
  idx.removed(0, chain(1, 3));
  EXPECT_EQ(idx.n_holders(1000), 0);
  EXPECT_EQ(idx.n_blocks(0), 0);
}

TEST(RoutePolicy, TableOfChoices) {
  struct Case {
    std::string name;
    std::string policy;
    std::vector<ReplicaState> replicas;
    int64_t prompt_tokens;
    int expect;
  };
  // block_size 16, kv_usage_tokens 4096 (set here: the default is 0, router.kv_usage_tokens)
  const RouteCostParams cost{16, 4096};
  const ReplicaState idle{true, 0, 0, 0, 0};
  const std::vector<Case> cases = {
      {"least_load: fewer tokens", "least_load", {{true, 100, 50, 0, 0}, {true, 10, 20, 0, 0}}, 64, 1},
      {"least_load: kv usage counts", "least_load", {{true, 0, 0, 0.5, 0}, {true, 100, 0, 0, 0}}, 64, 1},
      {"least_load: tie to the lowest index", "least_load", {idle, idle}, 64, 0},
      {"least_load: a tie to the lowest index, whatever the caches", "least_load",
       {{true, 0, 0, 0, 0, 9}, {true, 0, 0, 0, 0, 3}}, 64, 0},
      {"prefix_aware: nobody holds it, idle: to the smaller cache", "prefix_aware",
       {{true, 0, 0, 0, 0, 300}, {true, 0, 0, 0, 0, 200}}, 160, 1},
      {"prefix_aware: the cost first, the cache size only on a tie", "prefix_aware",
       {{true, 0, 0, 0, 0, 300}, {true, 1, 0, 0, 0, 200}}, 160, 0},
      {"least_load: down is skipped", "least_load", {{false, 0, 0, 0, 0}, {true, 999, 0, 0, 0}}, 64, 1},
      {"prefix_aware: the holder wins when loads are equal", "prefix_aware", {idle, {true, 0, 0, 0, 8}}, 160, 1},
      {"prefix_aware: overlap 8 blocks (128 tokens) beats 100 tokens of load", "prefix_aware",
       {{true, 0, 0, 0, 0}, {true, 100, 0, 0, 8}}, 160, 1},
      // 0 + 160 + 128 (recomputed, and cached a second time) vs 200 + 32
      {"prefix_aware: 200 tokens of load do not outweigh 128 cached, counted twice", "prefix_aware",
       {{true, 0, 0, 0, 0}, {true, 200, 0, 0, 8}}, 160, 1},
      {"prefix_aware: 300 tokens of load outweigh 128 cached, counted twice", "prefix_aware",
       {{true, 0, 0, 0, 0}, {true, 300, 0, 0, 8}}, 160, 0},
      {"prefix_aware: waiting and running tokens both count", "prefix_aware",
       {{true, 0, 0, 0, 0}, {true, 150, 150, 0, 8}}, 160, 0},
      // both hold the first 4 blocks (a shared system prompt): only the 4 more that replica 1 holds are duplicated
      // 0 + 96 + 64 = 160 vs 150 + 32 = 182, and vs 100 + 32 = 132
      {"prefix_aware: only the part held elsewhere is duplicated (holder busy)", "prefix_aware",
       {{true, 0, 0, 0, 4}, {true, 150, 0, 0, 8}}, 160, 0},
      {"prefix_aware: only the part held elsewhere is duplicated (holder less busy)", "prefix_aware",
       {{true, 0, 0, 0, 4}, {true, 100, 0, 0, 8}}, 160, 1},
      {"prefix_aware: nobody holds it: by load", "prefix_aware", {{true, 100, 0, 0, 0}, {true, 99, 0, 0, 0}}, 160, 1},
      // a down replica's blocks are no one's to duplicate: 50 + 160 vs 0 + 160
      {"prefix_aware: what only a down replica holds is not duplicated", "prefix_aware",
       {{true, 50, 0, 0, 0}, {true, 0, 0, 0, 0}, {false, 0, 0, 0, 8}}, 160, 1},
      // capped: 70 + 0 vs 0 + 32 + 32 (uncapped, replica 0 would cost 70 + 32 - 1600 and win)
      {"prefix_aware: overlap capped at the prompt", "prefix_aware", {{true, 70, 0, 0, 100}, {true, 0, 0, 0, 0}}, 32, 1},
      {"prefix_aware: holder down", "prefix_aware", {{true, 50, 0, 0, 0}, {false, 0, 0, 0, 8}}, 160, 0},
      {"none up", "prefix_aware", {{false, 0, 0, 0, 0}, {false, 0, 0, 0, 0}}, 16, -1},
      {"none up (round_robin)", "round_robin", {{false, 0, 0, 0, 0}}, 16, -1},
      {"no replicas", "least_load", {}, 16, -1},
  };
  for (const Case& c : cases) {
    RoutePolicyState p(parse_route_policy(c.policy, "router.policy"), cost);
    EXPECT_EQ(p.choose(c.replicas, c.prompt_tokens), c.expect) << c.name;
  }
}

TEST(RoutePolicy, CostIsStatedInTokens) {
  const ReplicaState r{true, 10, 20, 0.5, 4};  // 30 tokens of load, holds 4 blocks (64 tokens)
  const RouteCostParams cost{16, 100};
  EXPECT_DOUBLE_EQ(RoutePolicyState(RoutePolicy::PrefixAware, cost).cost(r, 160, 8), 30 + 50 + 96 + 64);
  EXPECT_DOUBLE_EQ(RoutePolicyState(RoutePolicy::PrefixAware, cost).cost(r, 160, 2), 30 + 50 + 96)
      << "it is the best holder itself: nothing duplicated";
  EXPECT_DOUBLE_EQ(RoutePolicyState(RoutePolicy::PrefixAware, cost).cost(r, 160, 20), 30 + 50 + 96 + 96)
      << "the duplicate is capped at the prompt";
  EXPECT_DOUBLE_EQ(RoutePolicyState(RoutePolicy::LeastLoad, cost).cost(r, 160, 8), 30 + 50);
  EXPECT_DOUBLE_EQ(RoutePolicyState(RoutePolicy::RoundRobin, cost).cost(r, 160, 8), 0);
}

TEST(RoutePolicy, RoundRobinCyclesOverReplicasUp) {
  RoutePolicyState p(RoutePolicy::RoundRobin);
  std::vector<ReplicaState> r(3);
  std::vector<int> got;
  for (int i = 0; i < 4; ++i) got.push_back(p.choose(r, 16));
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2, 0}));
  r[1].up = false;
  got.clear();
  for (int i = 0; i < 3; ++i) got.push_back(p.choose(r, 16));
  EXPECT_EQ(got, (std::vector<int>{2, 0, 2}));
}

TEST(RoutePolicy, ConversationRoutedBackToItsHolder) {
  // Turn 1 lands somewhere (tie: replica 0); its blocks are stored there; turn 2 (a longer chain) goes back.
  PrefixIndex idx;
  RoutePolicyState p(RoutePolicy::PrefixAware);
  std::vector<ReplicaState> r(2);
  const int first = p.choose(r, 64);
  ASSERT_EQ(first, 0);
  idx.stored(first, chain(7, 4));
  r[1].waiting_tokens = 0;
  r[0].running_tokens = 30;  // busier, but holds 64 tokens of the prompt
  for (int i = 0; i < 2; ++i) r[size_t(i)].overlap_blocks = idx.overlap(i, chain(7, 6));
  EXPECT_EQ(p.choose(r, 96), 0);
  idx.cleared(0);  // replica 0 went down: its entries are gone, the conversation moves
  r[0].up = false;
  for (int i = 0; i < 2; ++i) r[size_t(i)].overlap_blocks = idx.overlap(i, chain(7, 6));
  EXPECT_EQ(p.choose(r, 96), 1);
}

TEST(RoutePolicy, UnknownNameIsRefusedNamingWhere) {
  try {
    parse_route_policy("random", "router.policy");
    FAIL() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("router.policy"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("random"), std::string::npos);
  }
}

}  // namespace
}  // namespace tp

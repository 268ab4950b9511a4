// KV events on the wire (kvstore/kv_event_wire.h, kv_event_publisher.h, kv_event_subscriber.h): the exact
// msgpack bytes of vLLM's KVEventBatch shape, round trips of what a real BlockManager records, vLLM's bytes
// hashes and data_parallel_rank, malformed payloads named, and a real ZeroMQ PUB -> SUB round trip over TCP on
// a free port.
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/error.h"
#include "kvstore/block_manager.h"
#include "kvstore/kv_event_publisher.h"
#include "kvstore/kv_event_subscriber.h"
#include "kvstore/kv_event_wire.h"

namespace tp {
namespace {

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s.push_back(char(x));
  return s;
}

std::vector<KvEvent> recorded_events() {
  BlockManagerOptions o;
  o.record_events = true;
  BlockManager bm(2, 4, std::move(o));
  auto admit = [&bm](int64_t id, std::vector<int32_t> p) {
    AllocPlan plan = bm.can_allocate(id, p);
    EXPECT_TRUE(plan.fits);
    const int64_t cached = bm.allocate(plan);
    bm.commit_tokens(id, std::span<const int32_t>(p).subspan(size_t(cached)));
    bm.free(id);
  };
  std::vector<int32_t> a(8), b(8);
  std::iota(a.begin(), a.end(), 10);
  std::iota(b.begin(), b.end(), 500);
  admit(1, a);  // stores 2 blocks
  admit(2, b);  // evicts both, stores 2
  return bm.take_events();
}

TEST(KvEventWire, ExactBytesInVllmShape) {
  KvEventBatch b;
  b.ts = 1.5;
  KvEvent s;
  s.block_hashes = {1};
  s.token_ids = {5, 6};
  s.block_size = 2;
  KvEvent r;
  r.kind = KvEventKind::BlockRemoved;
  r.block_hashes = {0xffffffffffffffffULL};
  KvEvent c;
  c.kind = KvEventKind::AllBlocksCleared;
  b.events = {s, r, c};
  // msgspec array_like + tag: [ts, [["BlockStored", [1], nil, [5, 6], 2, nil, "CPU"],
  //                                 ["BlockRemoved", [2^64 - 1], "CPU"], ["AllBlocksCleared"]]]
  const std::string want =
      bytes({0x92, 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0x93, 0x97, 0xab}) + "BlockStored" +
      bytes({0x91, 0x01, 0xc0, 0x92, 0x05, 0x06, 0x02, 0xc0, 0xa3}) + "CPU" + bytes({0x93, 0xac}) + "BlockRemoved" +
      bytes({0x91, 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xa3}) + "CPU" + bytes({0x91, 0xb0}) +
      "AllBlocksCleared";
  EXPECT_EQ(encode_kv_event_batch(b), want);
  EXPECT_EQ(decode_kv_event_batch(want), b);
}

TEST(KvEventWire, RecordedEventsRoundTrip) {
  const std::vector<KvEvent> ev = recorded_events();
  ASSERT_EQ(ev.size(), 6u);  // stored x2, removed x2, stored x2
  KvEventBatch b;
  b.ts = 1764633600.25;
  b.events = ev;
  b.data_parallel_rank = 3;
  EXPECT_EQ(decode_kv_event_batch(encode_kv_event_batch(b)), b);
  b.data_parallel_rank.reset();
  EXPECT_EQ(decode_kv_event_batch(encode_kv_event_batch(b)), b);
}

TEST(KvEventWire, VllmBytesHashesAndNilMedium) {
  // ["BlockRemoved", [b"\x01\x02"], nil] with an integer ts: what vLLM sends with bytes block hashes.
  const std::string p = bytes({0x92, 0x07, 0x91, 0x93, 0xac}) + "BlockRemoved" + bytes({0x91, 0xc4, 0x02, 0x01, 0x02, 0xc0});
  const KvEventBatch b = decode_kv_event_batch(p);
  EXPECT_EQ(b.ts, 7.0);
  ASSERT_EQ(b.events.size(), 1u);
  EXPECT_EQ(b.events[0].block_hashes, std::vector<uint64_t>{0x0102});
  EXPECT_EQ(b.events[0].medium, "");
}

TEST(KvEventWire, MalformedPayloadsAreNamed) {
  struct Case {
    std::string payload, message;
  };
  const std::vector<Case> cases = {
      {bytes({0xc1}), "not valid msgpack"},
      {bytes({0x01}), "batch: expected an array"},
      {bytes({0x92, 0x00, 0x91, 0x91, 0xa1}) + "X", "events[0][0]: unknown tag 'X'"},
      {bytes({0x92, 0x00, 0x91, 0x92, 0xac}) + "BlockRemoved" + bytes({0x05}), "events[0][1]: expected an array"},
      {bytes({0x92, 0x00, 0x91, 0x92, 0xab}) + "BlockStored" + bytes({0x90}), "BlockStored needs 5 elements"},
      {bytes({0x92, 0x00, 0x90, 0x00}), "1 trailing bytes"},
  };
  for (const Case& c : cases) {
    try {
      decode_kv_event_batch(c.payload);
      ADD_FAILURE() << c.message << ": no error";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(decode_kv_event_seq(encode_kv_event_seq(0x0102030405060708ULL)), 0x0102030405060708ULL);
  EXPECT_EQ(encode_kv_event_seq(1), bytes({0, 0, 0, 0, 0, 0, 0, 1}));
  EXPECT_THROW(decode_kv_event_seq("abc"), InputError);
}

TEST(KvEventPubSub, TcpRoundTripOnAFreePort) {
  KvEventPublisher pub("tcp://127.0.0.1:*", "kv");
  ASSERT_EQ(pub.endpoint().rfind("tcp://127.0.0.1:", 0), 0u) << pub.endpoint();
  EXPECT_EQ(pub.endpoint().find('*'), std::string::npos);
  KvEventSubscriber sub;
  sub.connect(7, pub.endpoint(), "kv");
  const std::vector<KvEvent> ev = recorded_events();
  // A SUB socket joins asynchronously: publish until the first batch arrives (bounded: 5 s).
  std::vector<ReceivedKvBatch> got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (got.empty() && std::chrono::steady_clock::now() < deadline) {
    pub.publish(ev);
    got = sub.poll(20);
  }
  ASSERT_FALSE(got.empty()) << "no batch within 5 s";
  EXPECT_EQ(got[0].key, 7);
  EXPECT_EQ(got[0].batch.events, ev);
  // Two more, in order, consecutive sequence numbers, no gap.
  const uint64_t last = got.back().seq;
  pub.publish(ev);
  pub.publish({ev[0]});
  pub.publish({});  // nothing is sent for no events
  std::vector<ReceivedKvBatch> more;
  while (more.size() < 2 && std::chrono::steady_clock::now() < deadline) {
    auto m = sub.poll(20);
    more.insert(more.end(), m.begin(), m.end());
  }
  ASSERT_EQ(more.size(), 2u);
  EXPECT_EQ(more[0].seq, last + 1);
  EXPECT_EQ(more[1].seq, last + 2);
  EXPECT_FALSE(more[1].gap);
  EXPECT_EQ(more[1].batch.events.size(), 1u);
  EXPECT_EQ(sub.n_malformed(), 0);
  EXPECT_THROW(KvEventPublisher("tcp://256.0.0.1:1", ""), InputError);
}

}  // namespace
}  // namespace tp

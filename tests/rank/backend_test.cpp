// The Backend seam (rank/backend.h): the CPU backend gives kernels/cpu's results bit for bit, memory and copies
// behave, device selection refuses what this build or host cannot give (naming model.device), the CUDA graph
// bucket choice, and the host-staging communicator's copies (with a fake device backend).
#include "rank/backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <unistd.h>
#include <random>

#include "common/error.h"
#include "kernels/cpu/ops.h"
#include "rank/backend_kv_memory.h"
#include "rank/cpu_backend.h"
#include "rank/cuda_backend.h"
#include "rank/cuda_graph_buckets.h"
#include "rank/llama_model.h"
#include "rank/sequence_runner.h"
#include "rank/synth.h"
#include "rank/staged_communicator.h"

namespace tp {
namespace {

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

void expect_bits_equal(const float* a, const float* b, size_t n) {
  ASSERT_EQ(std::memcmp(a, b, n * sizeof(float)), 0);
}

TEST(CpuBackend, OpsAreTheCpuKernelsBitForBit) {
  Backend& b = cpu_backend();
  EXPECT_EQ(b.name(), "cpu");
  EXPECT_TRUE(b.host_memory());
  EXPECT_EQ(b.stream(), nullptr);
  const int64_t n = 5, dim = 64, heads = 4, hd = 16;
  const auto x = random_vec(size_t(n * dim), 1), w = random_vec(size_t(dim), 2), y = random_vec(size_t(n * dim), 3);
  std::vector<float> a(x.size()), r(x.size());
  b.rmsnorm(x.data(), w.data(), n, dim, 1e-5f, a.data());
  cpu::rmsnorm(x.data(), w.data(), n, dim, 1e-5f, r.data());
  expect_bits_equal(a.data(), r.data(), a.size());

  a = x, r = x;
  b.add_inplace(a.data(), y.data(), n * dim);
  cpu::add_inplace(r.data(), y.data(), n * dim);
  expect_bits_equal(a.data(), r.data(), a.size());

  const std::vector<int32_t> pos = {0, 1, 7, 100, 4095};
  for (RopeStyle style : {RopeStyle::Interleaved, RopeStyle::Neox}) {
    a = x, r = x;
    b.rope(a.data(), n, heads, hd, pos.data(), 10000.0f, style);
    cpu::rope(r.data(), n, heads, hd, pos.data(), 10000.0f, style);
    expect_bits_equal(a.data(), r.data(), a.size());
  }

  std::vector<float> s(size_t(n * dim / 2)), t(s.size());
  b.silu_mul(x.data(), n, dim / 2, s.data());
  cpu::silu_mul(x.data(), n, dim / 2, t.data());
  expect_bits_equal(s.data(), t.data(), s.size());

  for (DType dt : {DType::F32, DType::BF16}) {
    const auto wm = random_vec(size_t(24 * dim), 4);
    const auto lw = b.upload(cpu::Weight(dt, 24, dim, DType::F32, wm.data(), dim * 4));
    const cpu::Weight ref(dt, 24, dim, DType::F32, wm.data(), dim * 4);
    EXPECT_EQ(lw->n_out(), 24);
    EXPECT_EQ(lw->n_in(), dim);
    EXPECT_EQ(lw->n_bytes(), ref.n_bytes());
    std::vector<float> o(size_t(n * 24)), p(o.size());
    b.linear(*lw, x.data(), n, o.data());
    cpu::linear(x.data(), n, ref, p.data());
    expect_bits_equal(o.data(), p.data(), o.size());
  }
}

TEST(CpuBackend, EmbeddingShardZeroesRowsOutsideIt) {
  Backend& b = cpu_backend();
  const int64_t vocab = 10, hidden = 8;
  const auto table = random_vec(size_t(vocab * hidden), 5);
  const std::vector<int32_t> ids = {0, 3, 9, 4, 5};
  const auto full = b.upload_embedding(table.data(), DType::F32, hidden * 4, hidden, {0, vocab});
  EXPECT_EQ(full->n_bytes(), vocab * hidden * 4);
  std::vector<float> x(ids.size() * size_t(hidden)), ref(x.size());
  b.embedding(*full, ids.data(), int64_t(ids.size()), false, x.data());
  cpu::embedding(table.data(), DType::F32, hidden * 4, hidden, ids.data(), int64_t(ids.size()), ref.data());
  expect_bits_equal(x.data(), ref.data(), x.size());

  const auto shard = b.upload_embedding(table.data(), DType::F32, hidden * 4, hidden, {3, 5});  // rows 3, 4
  EXPECT_EQ(shard->n_bytes(), 2 * hidden * 4);
  b.embedding(*shard, ids.data(), int64_t(ids.size()), true, x.data());
  for (size_t t = 0; t < ids.size(); ++t)
    for (int64_t j = 0; j < hidden; ++j)
      EXPECT_EQ(x[t * size_t(hidden) + size_t(j)], (ids[t] == 3 || ids[t] == 4) ? ref[t * size_t(hidden) + size_t(j)] : 0.0f);
}

TEST(CpuBackend, MemoryCopiesAndFill) {
  Backend& b = cpu_backend();
  DeviceBuffer buf(&b, 40 * sizeof(float));
  EXPECT_EQ(buf.bytes(), 160);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.data()) % 64, 0u);
  std::vector<float> h(40);
  for (int i = 0; i < 40; ++i) h[size_t(i)] = float(i);
  b.copy_to_device(buf.data(), h.data(), 160);
  // rows 0..3 of 10 floats: take columns [2, 5) into a [4, 3] block
  DeviceBuffer dst(&b, 12 * sizeof(float));
  b.copy_2d(dst.data(), 12, buf.as<float>() + 2, 40, 12, 4);
  std::vector<float> out(12);
  b.copy_to_host(out.data(), dst.data(), 48);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(out[size_t(r * 3 + c)], float(r * 10 + 2 + c));
  b.fill(dst.as<float>(), 12, -1.5f);
  b.copy_to_host(out.data(), dst.data(), 48);
  for (float v : out) EXPECT_EQ(v, -1.5f);
  DeviceBuffer moved = std::move(buf);
  EXPECT_EQ(buf.data(), nullptr);
  EXPECT_EQ(moved.bytes(), 160);
  DeviceBuffer grown;
  float* g = grow_buffer<float>(b, grown, 10);
  EXPECT_EQ(grown.bytes(), 40);
  EXPECT_EQ(grow_buffer<float>(b, grown, 5), g);  // big enough: kept
  EXPECT_EQ(b.upload(std::vector<float>{1, 2, 3}).bytes(), 12);
}

TEST(MakeBackend, CpuAndRefusals) {
  EXPECT_EQ(make_backend("cpu")->name(), "cpu");
  EXPECT_EQ(make_backend("cpu").get(), &cpu_backend());
  try {
    make_backend("tpu", 0, "cfg.yaml");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "cfg.yaml: model.device: 'tpu' is not one of: cpu, cuda");
  }
  // cuda: refused here (a build without the CUDA backend, or a host without a GPU), with one error naming the
  // setting; on a GPU host with the CUDA backend it is a backend.
  try {
    const auto b = make_backend("cuda", 0, "cfg.yaml");
    EXPECT_TRUE(cuda_backend_built());
    EXPECT_EQ(b->name().rfind("cuda:", 0), 0u);
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("cfg.yaml: model.device: cuda: ", 0), 0u) << what;
    if (!cuda_backend_built()) EXPECT_NE(what.find("built without the CUDA backend"), std::string::npos) << what;
    else EXPECT_NE(what.find("no CUDA device is visible"), std::string::npos) << what;
  }
}

TEST(CudaGraphBucket, SmallestBucketElseEager) {
  const std::vector<std::pair<int64_t, int64_t>> cases = {{0, 0},   {-1, 0},  {1, 1},    {2, 2},    {3, 4},
                                                          {4, 4},   {5, 8},   {9, 16},   {16, 16},  {17, 32},
                                                          {33, 64}, {64, 64}, {65, 128}, {128, 128}, {129, 0},
                                                          {1000, 0}};
  for (const auto& [n, want] : cases) EXPECT_EQ(cuda_graph_bucket(n), want) << n;
}

TEST(CudaGraphBucket, OnlyPureDecodeStepsReplayAGraph) {
  auto decode = [](int64_t id) {
    SeqPlan s;
    s.seq_id = id;
    s.tokens = {1};
    s.start_pos = 10;
    s.block_table = {0};
    s.want_logits = true;
    return s;
  };
  std::vector<SeqPlan> seqs;
  for (int i = 0; i < 3; ++i) seqs.push_back(decode(i));
  EXPECT_EQ(cuda_graph_bucket(seqs), 4);
  seqs[1].tokens = {1, 2, 3};  // a prefill chunk
  EXPECT_EQ(cuda_graph_bucket(seqs), 0);
  seqs[1] = decode(1);
  seqs[2].prompt_targets = {5};  // prompt logprobs
  seqs[2].tokens = {4, 5};
  EXPECT_EQ(cuda_graph_bucket(seqs), 0);
  EXPECT_EQ(cuda_graph_bucket(std::vector<SeqPlan>{}), 0);
  std::vector<SeqPlan> many;
  for (int i = 0; i < 129; ++i) many.push_back(decode(i));
  EXPECT_EQ(cuda_graph_bucket(many), 0);
  many.pop_back();
  EXPECT_EQ(cuda_graph_bucket(many), 128);
}

// A "device" whose memory is host memory it owns, counting the copies across the host boundary.
class FakeDevice final : public CpuBackend {
 public:
  bool host_memory() const override { return false; }
  void copy_to_device(void* dst, const void* src, int64_t bytes) override {
    ++to_device;
    CpuBackend::copy_to_device(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, int64_t bytes) override {
    ++to_host;
    CpuBackend::copy_to_host(dst, src, bytes);
  }
  int to_device = 0, to_host = 0;
};

// Two ranks' worth of a group in one process: rank `me` of 2, the other rank's contribution fixed.
class FakePair final : public Communicator {
 public:
  explicit FakePair(int me) : me_(me) {}
  int rank() const override { return me_; }
  int size() const override { return 2; }

 protected:
  void do_all_reduce_sum(float* d, size_t n, Stream) override {
    for (size_t i = 0; i < n; ++i) d[i] += 100.0f;
  }
  void do_all_reduce_sum_bf16(uint16_t*, size_t, Stream) override {}
  void do_all_gather(const void* s, size_t b, void* r, Stream) override {
    std::memcpy(static_cast<char*>(r) + size_t(me_) * b, s, b);
    std::memset(static_cast<char*>(r) + size_t(1 - me_) * b, 7, b);
  }
  void do_broadcast(void* buf, size_t b, int root, Stream) override {
    if (root != me_) std::memset(buf, 9, b);
  }
  void do_barrier() override {}

 private:
  int me_;
};

TEST(StagedCommunicator, CopiesThroughHostAroundEachCollective) {
  FakeDevice dev;
  FakePair host(1);
  StagedCommunicator c(host, dev);
  EXPECT_EQ(c.rank(), 1);
  EXPECT_EQ(c.size(), 2);
  DeviceBuffer d(&dev, 4 * sizeof(float));
  const std::vector<float> v = {1, 2, 3, 4};
  dev.copy_to_device(d.data(), v.data(), 16);
  dev.to_device = 0;
  c.all_reduce_sum(d.as<float>(), 4);
  EXPECT_EQ(dev.to_host, 1);
  EXPECT_EQ(dev.to_device, 1);
  std::vector<float> out(4);
  std::memcpy(out.data(), d.data(), 16);
  EXPECT_EQ(out, (std::vector<float>{101, 102, 103, 104}));

  DeviceBuffer g(&dev, 8);
  const char mine[4] = {1, 2, 3, 4};
  c.all_gather(mine, 4, g.data());
  const char* all = g.as<char>();
  EXPECT_EQ(all[0], 7);
  EXPECT_EQ(all[4], 1);
  EXPECT_EQ(all[7], 4);

  char buf[3] = {0, 0, 0};
  dev.to_host = dev.to_device = 0;
  c.broadcast(buf, 3, 0);  // not the root: receives, one copy in
  EXPECT_EQ(buf[2], 9);
  EXPECT_EQ(dev.to_host, 0);
  EXPECT_EQ(dev.to_device, 1);
  c.broadcast(buf, 3, 1);  // the root: one copy out
  EXPECT_EQ(dev.to_host, 1);
  EXPECT_EQ(dev.to_device, 1);
}

// The CPU backend counting the bytes it holds: the activation bytes a forward leaves allocated (its scratch
// only grows) are what LlamaModel::activation_bytes says, the start-up's activation peak on a GPU.
class CountingBackend final : public CpuBackend {
 public:
  void* allocate(int64_t bytes) override {
    void* p = CpuBackend::allocate(bytes);
    if (p) sizes[p] = bytes, live += bytes;
    return p;
  }
  void deallocate(void* p) noexcept override {
    if (p) live -= sizes[p], sizes.erase(p);
    CpuBackend::deallocate(p);
  }
  std::map<void*, int64_t> sizes;
  int64_t live = 0;
};

TEST(LlamaModelOnBackend, ActivationBytesAreWhatAForwardHolds) {
  SynthSpec spec;
  spec.n_layers = 2;
  spec.hidden = 64;
  spec.n_heads = 8;
  spec.n_kv_heads = 4;
  spec.intermediate = 96;
  spec.vocab = 300;
  spec.seed = 3;
  spec.dtype = DType::BF16;
  const std::string dir = testing::TempDir() + "/backend_synth." + std::to_string(::getpid());
  write_synthetic_model(dir, spec);
  const auto f = open_model(dir);
  for (const auto& [n_tok, want_logits] : std::vector<std::pair<int64_t, bool>>{{1, true}, {7, true}, {33, false}}) {
    CountingBackend b;
    LlamaModel m(*f, DType::F32, nullptr, {}, &b);
    EXPECT_EQ(&m.backend(), &b);
    const int64_t weights = b.live;
    EXPECT_GT(weights, 0);  // the norms (the linear weights are held as the loaders made them)
    KvPool pool(m.kv_shape(8, 16));
    SeqPlan s;
    for (int64_t i = 0; i < n_tok; ++i) s.tokens.push_back(int32_t(i + 1));
    s.block_table = {0, 1, 2};
    s.want_logits = want_logits;
    std::vector<float> logits;
    m.forward({s}, pool, logits);
    EXPECT_EQ(b.live - weights, m.activation_bytes(n_tok, want_logits ? 1 : 0)) << n_tok;
  }
}

// A step's attention in one call (paged_attention_batch, what the forward calls) is each sequence's
// paged_attention, bit for bit: sequences of different lengths (decode, a prefill chunk mid-block, a fresh
// prompt), each with its own scattered block table over one pool.
TEST(Backend, PagedAttentionBatchIsEachSequencesAttention) {
  Backend& b = cpu_backend();
  const int64_t n_heads = 6, n_kv = 2, hd = 16, bs = 4;
  KvPool pool(KvPoolShape{.n_layers = 1, .n_blocks = 12, .block_size = bs, .n_kv_heads = n_kv, .head_dim = hd,
                          .dtype = KvDType::BF16});
  struct Seq {
    int64_t start, n;
    std::vector<int32_t> table;
  };
  const std::vector<Seq> seqs = {{9, 1, {7, 2, 11}}, {5, 3, {0, 4}}, {0, 6, {9, 1}}};
  // Every position each sequence will see, written once.
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int64_t len = seqs[i].start + seqs[i].n;
    std::vector<int64_t> slots;
    for (int64_t p = 0; p < len; ++p) slots.push_back(int64_t(seqs[i].table[size_t(p / bs)]) * bs + p % bs);
    const auto k = random_vec(size_t(len * n_kv * hd), uint32_t(10 + i)), v = random_vec(k.size(), uint32_t(20 + i));
    b.write_kv(k.data(), v.data(), len, slots.data(), pool.k(0), pool.v(0));
  }
  int64_t n_tok = 0;
  std::vector<Backend::AttentionSeq> batch;
  for (const Seq& q : seqs) {
    batch.push_back({q.n, q.start, q.table.data()});
    n_tok += q.n;
  }
  const auto q = random_vec(size_t(n_tok * n_heads * hd), 5);
  std::vector<float> got(q.size(), -1.0f), want(q.size(), -2.0f);
  b.paged_attention_batch(q.data(), batch, n_heads, pool.k(0), pool.v(0), 0.25f, got.data());
  int64_t t0 = 0;
  for (const Seq& s : seqs) {
    b.paged_attention(q.data() + t0 * n_heads * hd, s.n, s.start, n_heads, pool.k(0), pool.v(0), s.table.data(), 0.25f,
                      want.data() + t0 * n_heads * hd);
    t0 += s.n;
  }
  expect_bits_equal(got.data(), want.data(), got.size());
}

// The KV pool of a device backend lives in the backend's memory: zeroed there, block copies through its
// copy_2d; on a host-memory backend kv_memory_for gives none (the pool's own host memory).
TEST(BackendKvMemory, PoolInDeviceMemory) {
  EXPECT_EQ(kv_memory_for(cpu_backend()), nullptr);
  FakeDevice dev;
  const auto mem = kv_memory_for(dev);
  ASSERT_NE(mem, nullptr);
  EXPECT_FALSE(mem->host());
  KvPool pool(KvPoolShape{.n_layers = 2, .n_blocks = 3, .block_size = 4, .n_kv_heads = 1, .head_dim = 8,
                          .dtype = KvDType::F32},
              {}, mem);
  EXPECT_FALSE(pool.host());
  const int64_t bb = pool.shape().layout().block_bytes();
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t i = 0; i < 3 * bb; ++i) ASSERT_EQ(pool.v(l).blocks[i], 0);
  std::memset(pool.v(1).block(0), 0x5A, size_t(bb));
  pool.copy_block(0, 2);
  EXPECT_EQ(pool.v(1).block(2)[bb - 1], 0x5A);
  EXPECT_EQ(pool.v(0).block(2)[0], 0);
}

// The whole forward on a backend whose memory is not host memory (ids, positions and slots staged to it,
// logits copied back, the KV pool in its memory): the same logits as the CPU backend, bit for bit, over a
// prefill and decode steps.
TEST(LlamaModelOnBackend, DeviceMemoryPathGivesTheCpuLogits) {
  SynthSpec spec;
  spec.n_layers = 2;
  spec.hidden = 64;
  spec.n_heads = 8;
  spec.n_kv_heads = 2;
  spec.intermediate = 96;
  spec.vocab = 300;
  spec.seed = 5;
  spec.dtype = DType::BF16;
  const std::string dir = testing::TempDir() + "/backend_synth_dev." + std::to_string(::getpid());
  write_synthetic_model(dir, spec);
  const auto f = open_model(dir);
  FakeDevice dev;
  LlamaModel on_cpu(*f, DType::BF16), on_dev(*f, DType::BF16, nullptr, {}, &dev);
  LocalRunner a(on_cpu, 64, 16, KvDType::BF16), b(on_dev, 64, 16, KvDType::BF16);
  EXPECT_TRUE(a.pool.host());
  EXPECT_FALSE(b.pool.host());
  std::vector<int32_t> toks = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26, 43, 38, 32, 79, 50, 28};
  for (int step = 0; step < 4; ++step) {
    const std::vector<float> want = a.seq.feed(toks), got = b.seq.feed(toks);
    ASSERT_EQ(got.size(), size_t(spec.vocab));
    expect_bits_equal(got.data(), want.data(), got.size());
    toks = {int32_t(std::max_element(want.begin(), want.end()) - want.begin())};
  }
  EXPECT_GT(dev.to_host, 0);
  EXPECT_GT(dev.to_device, 0);
}

// A device with "graphs" the way CUDA has them: between begin_capture and end_capture every op is recorded, not
// run; replay runs the recorded ops on the buffers' contents at that time; attention reads the metadata
// prepare_attention staged (a GPU reads its device copy). Host copies, synchronize and allocation while
// capturing fail the test (CUDA forbids them in a capture).
class GraphDevice final : public CpuBackend {
 public:
  bool host_memory() const override { return false; }
  bool supports_graphs() const override { return true; }
  int64_t allocation_epoch() const override { return allocations; }
  void* allocate(int64_t bytes) override {
    EXPECT_FALSE(capturing) << "allocation in a capture";
    ++allocations;
    return CpuBackend::allocate(bytes);
  }
  void copy_to_device(void* d, const void* s, int64_t n) override {
    EXPECT_FALSE(capturing) << "host copy in a capture";
    CpuBackend::copy_to_device(d, s, n);
  }
  void copy_to_host(void* d, const void* s, int64_t n) override {
    EXPECT_FALSE(capturing) << "host copy in a capture";
    CpuBackend::copy_to_host(d, s, n);
  }
  void synchronize() override { EXPECT_FALSE(capturing) << "synchronize in a capture"; }
  void begin_capture() override {
    ASSERT_FALSE(capturing);
    capturing = true;
    graphs.emplace_back();
  }
  int64_t end_capture() override {
    capturing = false;
    return int64_t(graphs.size()) - 1;
  }
  void abort_capture() noexcept override { capturing = false; }
  void replay(int64_t g) override {
    ++replays;
    for (auto& op : graphs.at(size_t(g))) op();
  }
  void drop_graphs() override { graphs.clear(); }
  void prepare_attention(const std::vector<AttentionSeq>& seqs, int64_t bs, int64_t /*fixed*/) override {
    staged_tables.clear();
    for (const AttentionSeq& a : seqs)
      staged_tables.emplace_back(a.block_table, a.block_table + (a.start_pos + a.n_tokens + bs - 1) / bs);
    staged = seqs;
    for (size_t i = 0; i < staged.size(); ++i) staged[i].block_table = staged_tables[i].data();
  }
  void paged_attention_batch(const float* q, const std::vector<AttentionSeq>& seqs, int64_t n_heads,
                             const KvTensorView& k, const KvTensorView& v, float scale, float* out,
                             int64_t fixed) override {
    if (fixed > 0) {
      for (const AttentionSeq& a : seqs) EXPECT_LE(a.start_pos + a.n_tokens, fixed);
    }
    if (!capturing) prepare_attention(seqs, k.layout.block_size, fixed);
    run([=, this] { CpuBackend::paged_attention_batch(q, staged, n_heads, k, v, scale, out, fixed); });
  }
  void embedding(const EmbeddingTable& t, const int32_t* ids, int64_t n, bool z, float* x) override {
    run([=, &t, this] { CpuBackend::embedding(t, ids, n, z, x); });
  }
  void rmsnorm(const float* x, const float* w, int64_t n, int64_t d, float eps, float* o) override {
    run([=, this] { CpuBackend::rmsnorm(x, w, n, d, eps, o); });
  }
  void add_inplace(float* x, const float* y, int64_t n) override { run([=, this] { CpuBackend::add_inplace(x, y, n); }); }
  void add_rmsnorm(float* x, const float* y, const float* w, int64_t n, int64_t d, float eps, float* o) override {
    run([=, this] { CpuBackend::add_rmsnorm(x, y, w, n, d, eps, o); });
  }
  void rope(float* x, int64_t n, int64_t h, int64_t d, const int32_t* p, float base, RopeStyle st) override {
    run([=, this] { CpuBackend::rope(x, n, h, d, p, base, st); });
  }
  void silu_mul(const float* g, int64_t n, int64_t d, float* o) override {
    run([=, this] { CpuBackend::silu_mul(g, n, d, o); });
  }
  void linear(const LinearWeight& w, const float* x, int64_t m, float* y) override {
    run([=, &w, this] { CpuBackend::linear(w, x, m, y); });
  }
  void write_kv(const float* k, const float* v, int64_t n, const int64_t* slots, const KvTensorView& kp,
                const KvTensorView& vp) override {
    run([=, this] { CpuBackend::write_kv(k, v, n, slots, kp, vp); });
  }
  void copy_2d(void* d, int64_t dp, const void* s, int64_t sp, int64_t rb, int64_t rows) override {
    run([=, this] { CpuBackend::copy_2d(d, dp, s, sp, rb, rows); });
  }
  void fill(float* x, int64_t n, float value) override { run([=, this] { CpuBackend::fill(x, n, value); }); }
  void zero(void* p, int64_t n) override { run([=, this] { CpuBackend::zero(p, n); }); }

  bool capturing = false;
  int64_t allocations = 0, replays = 0;
  std::vector<std::vector<std::function<void()>>> graphs;
  std::vector<AttentionSeq> staged;
  std::vector<std::vector<int32_t>> staged_tables;

 private:
  void run(std::function<void()> op) {
    if (capturing)
      graphs.back().push_back(std::move(op));
    else
      op();
  }
};

// Decode graphs: a batch of 3 (bucket 4, one padding sequence that writes nothing) and then of 2 (bucket 2),
// contexts crossing 256 (a new context class): every step's logits equal the eager CPU forward's bit for bit,
// graphs are captured once per (bucket, context class) and replayed after, a prefill step in between runs
// eagerly, and padding never writes the pool.
TEST(LlamaModelOnBackend, DecodeGraphsReplayTheEagerForward) {
  SynthSpec spec;
  spec.n_layers = 2;
  spec.hidden = 64;
  spec.n_heads = 4;
  spec.n_kv_heads = 2;
  spec.intermediate = 96;
  spec.vocab = 300;
  spec.seed = 9;
  spec.dtype = DType::BF16;
  const std::string dir = testing::TempDir() + "/backend_synth_graph." + std::to_string(::getpid());
  write_synthetic_model(dir, spec);
  const auto f = open_model(dir);
  GraphDevice dev;
  LlamaModel eager(*f, DType::BF16), graphed(*f, DType::BF16, nullptr, {}, &dev);
  const KvPoolShape shape = eager.kv_shape(64, 16, KvDType::BF16);
  KvPool eager_pool(shape), graph_pool(shape, {}, kv_memory_for(dev));
  const int64_t block_bytes = shape.layout().block_bytes();
  auto seq = [](int64_t id, int64_t start, int64_t n, int32_t first_block) {
    SeqPlan s;
    s.seq_id = id;
    s.start_pos = start;
    for (int64_t i = 0; i < n; ++i) s.tokens.push_back(int32_t((id * 37 + start + i * 11) % 300));
    for (int64_t b = 0; b < (start + n + 15) / 16; ++b) s.block_table.push_back(first_block + int32_t(b));
    s.want_logits = true;
    return s;
  };
  auto step = [&](const std::vector<SeqPlan>& seqs) {
    std::vector<float> want, got;
    eager.forward(seqs, eager_pool, want);
    graphed.forward(seqs, graph_pool, got);
    ASSERT_EQ(got.size(), want.size());
    expect_bits_equal(got.data(), want.data(), got.size());
  };
  // Block 0 (where padding sequences point) holds no sequence here: it must stay zero.
  step({seq(0, 0, 250, 1), seq(1, 0, 7, 20), seq(2, 0, 40, 30)});  // prefill: eager
  EXPECT_EQ(graphed.n_graphs(), 0);
  for (int64_t i = 0; i < 10; ++i)  // positions 250..259 of seq 0: context classes 256 and 512
    step({seq(0, 250 + i, 1, 1), seq(1, 7 + i, 1, 20), seq(2, 40 + i, 1, 30)});
  EXPECT_EQ(graphed.n_graphs(), 2);  // bucket 4 at 256 and at 512
  EXPECT_EQ(dev.replays, 10 - 2);    // the first step of each class captures (and runs eagerly)
  for (int64_t i = 0; i < 3; ++i) step({seq(1, 17 + i, 1, 20), seq(2, 50 + i, 1, 30)});
  EXPECT_EQ(graphed.n_graphs(), 3);  // bucket 2 at 256
  step({seq(3, 0, 30, 40)});         // a prefill: eager, grows nothing graphs hold... or drops them
  for (int64_t i = 0; i < 2; ++i) step({seq(1, 20 + i, 1, 20), seq(3, 30 + i, 1, 40)});
  for (int64_t l = 0; l < shape.n_layers; ++l)
    for (int64_t i = 0; i < block_bytes; ++i) ASSERT_EQ(graph_pool.k(l).block(0)[i], 0) << "padding wrote block 0";
  EXPECT_GT(dev.replays, 8);
}

}  // namespace
}  // namespace tp

#include "parallel/step_plan.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "common/error.h"
#include "parallel/communicator.h"

namespace tp {

static_assert(std::endian::native == std::endian::little, "the StepPlan wire format assumes a little-endian host");

namespace {

// ------------------------------------------------------------------------------------------- wire records

struct PlanHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t kind;
  uint64_t step_id;
  uint32_t n_seqs;
  uint32_t n_block_copies;
  uint64_t total_bytes;
  uint32_t checksum;
  uint32_t reserved;  // 0
};
static_assert(sizeof(PlanHeader) == 40 && std::is_trivially_copyable_v<PlanHeader>);

struct SeqHeader {
  int64_t seq_id;
  int64_t start_pos;
  uint32_t n_tokens;
  uint32_t n_blocks;
  uint32_t n_history;
  uint32_t n_history_prompt;
  float temperature;
  float top_p;
  float min_p;
  int32_t top_k;
  uint64_t seed;
  float presence_penalty;
  float frequency_penalty;
  float repetition_penalty;
  int32_t logprobs;
  uint8_t want_logits;  // 0 or 1
  uint8_t pad[3];       // 0
  int32_t prompt_logprobs;
  uint32_t n_prompt_targets;
  uint32_t n_logit_bias;
  uint32_t n_token_bitmask;
  uint32_t reserved;  // 0
};
static_assert(sizeof(SeqHeader) == 96 && std::is_trivially_copyable_v<SeqHeader>);
static_assert(sizeof(LogitBias) == 8 && std::is_trivially_copyable_v<LogitBias>);

struct ResultHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t has_logprobs;  // 0 or 1: the per-entry logprobs section follows the tokens (n > 0 then)
  uint64_t step_id;
  uint64_t n;
  uint64_t total_bytes;
  uint32_t checksum;   // at byte 32, as in the plan header
  uint32_t reserved2;  // 0
  uint64_t n_prompt_logprobs;
};
static_assert(sizeof(ResultHeader) == 48 && std::is_trivially_copyable_v<ResultHeader>);

// FNV-1a 32 over `bytes`, skipping [skip, skip + 4) (the checksum field).
uint32_t checksum(std::span<const uint8_t> bytes, size_t skip) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (i >= skip && i < skip + 4) continue;
    h = (h ^ bytes[i]) * 16777619u;
  }
  return h;
}

[[noreturn]] void malformed(const char* what, const std::string& why) {
  throw Error(std::string("malformed ") + what + ": " + why);
}

// Bounds-checked sequential reads from a byte span.
class Reader {
 public:
  Reader(std::span<const uint8_t> b, const char* what) : b_(b), what_(what) {}
  template <class T>
  T read(const char* field) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (b_.size() - off_ < sizeof(T)) malformed(what_, std::string(field) + " runs past the end of the buffer");
    T v;
    std::memcpy(&v, b_.data() + off_, sizeof(T));
    off_ += sizeof(T);
    return v;
  }
  template <class T>
  std::vector<T> read_array(uint64_t n, const char* field) {
    if (n > (b_.size() - off_) / sizeof(T))
      malformed(what_, std::string(field) + ": " + std::to_string(n) + " elements run past the end of the buffer");
    std::vector<T> v(n);
    if (n) std::memcpy(v.data(), b_.data() + off_, n * sizeof(T));
    off_ += n * sizeof(T);
    return v;
  }
  size_t remaining() const { return b_.size() - off_; }

 private:
  std::span<const uint8_t> b_;
  const char* what_;
  size_t off_ = 0;
};

class Writer {
 public:
  explicit Writer(size_t reserve) { b_.reserve(reserve); }
  template <class T>
  void write(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b_.insert(b_.end(), p, p + sizeof(T));
  }
  template <class T>
  void write_array(const std::vector<T>& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    b_.insert(b_.end(), p, p + v.size() * sizeof(T));
  }
  std::vector<uint8_t>& bytes() { return b_; }

 private:
  std::vector<uint8_t> b_;
};

void check_count(size_t n, const char* what, const char* field) {
  if (n > std::numeric_limits<uint32_t>::max())
    malformed(what, std::string(field) + " count " + std::to_string(n) + " exceeds 2^32 - 1");
}

// Value checks shared by serialize and deserialize. `what` is "StepPlan".
void validate(const StepPlan& p) {
  const char* w = "StepPlan";
  if (p.kind != StepKind::Run && p.kind != StepKind::Shutdown && p.kind != StepKind::FetchKv)
    malformed(w, "kind " + std::to_string(unsigned(p.kind)) + " is not Run (0), Shutdown (1) or FetchKv (2)");
  if (p.kind == StepKind::Shutdown && !p.seqs.empty()) malformed(w, "a Shutdown plan carries sequences");
  if (p.kind == StepKind::FetchKv && !p.seqs.empty()) malformed(w, "a FetchKv plan carries sequences");
  check_count(p.seqs.size(), w, "sequence");
  check_count(p.block_copies.size(), w, "block copy");
  std::vector<int64_t> ids;
  ids.reserve(p.seqs.size());
  for (size_t i = 0; i < p.seqs.size(); ++i) {
    const SeqPlan& s = p.seqs[i];
    const std::string at = "seq[" + std::to_string(i) + "] ";
    if (s.seq_id < 0) malformed(w, at + "seq_id " + std::to_string(s.seq_id) + " < 0");
    if (s.start_pos < 0) malformed(w, at + "start_pos " + std::to_string(s.start_pos) + " < 0");
    check_count(s.tokens.size(), w, "token");
    check_count(s.block_table.size(), w, "block table");
    if (std::any_of(s.tokens.begin(), s.tokens.end(), [](int32_t t) { return t < 0; }))
      malformed(w, at + "has a negative token id");
    if (std::any_of(s.block_table.begin(), s.block_table.end(), [](int32_t b) { return b < 0; }))
      malformed(w, at + "has a negative block id");
    if (auto bad = check_sampling(s.sampling)) malformed(w, at + bad->message);
    check_count(s.history.size(), w, "history");
    if (std::any_of(s.history.begin(), s.history.end(), [](int32_t t) { return t < 0; }))
      malformed(w, at + "history has a negative token id");
    if (s.n_history_prompt < 0 || uint64_t(s.n_history_prompt) > s.history.size())
      malformed(w, at + "n_history_prompt " + std::to_string(s.n_history_prompt) + " is not in [0, " +
                       std::to_string(s.history.size()) + "] (the history size)");
    if (!s.history.empty() && !s.want_logits) malformed(w, at + "history is sent without want_logits");
    check_count(s.logit_bias.size(), w, "logit_bias");
    if (!s.logit_bias.empty() && !s.want_logits) malformed(w, at + "logit_bias is sent without want_logits");
    for (const LogitBias& b : s.logit_bias) {
      if (b.token < 0) malformed(w, at + "logit_bias has a negative token id");
      if (auto bad = check_sampling_value(kLogitBiasRange, b.bias)) malformed(w, at + bad->message);
    }
    if (s.prompt_logprobs < -1 || s.prompt_logprobs > kMaxLogprobs)
      malformed(w, at + "prompt_logprobs " + std::to_string(s.prompt_logprobs) + " is not in [-1, " +
                       std::to_string(kMaxLogprobs) + "]");
    if (!s.prompt_targets.empty() && s.prompt_logprobs < 0)
      malformed(w, at + "prompt_targets are sent without prompt_logprobs");
    if (s.prompt_targets.size() + (s.want_logits ? 1 : 0) > s.tokens.size())
      malformed(w, at + std::to_string(s.prompt_targets.size()) + " prompt_targets for " +
                       std::to_string(s.tokens.size()) + " tokens" + (s.want_logits ? " and a sampling row" : ""));
    if (std::any_of(s.prompt_targets.begin(), s.prompt_targets.end(), [](int32_t t) { return t < 0; }))
      malformed(w, at + "prompt_targets has a negative token id");
    check_count(s.token_bitmask.size(), w, "token_bitmask");
    if (!s.token_bitmask.empty() && !s.want_logits) malformed(w, at + "token_bitmask is sent without want_logits");
    ids.push_back(s.seq_id);
  }
  std::sort(ids.begin(), ids.end());
  if (std::adjacent_find(ids.begin(), ids.end()) != ids.end()) malformed(w, "a seq_id appears twice");
  for (const BlockCopy& c : p.block_copies)
    if (c.src < 0 || c.dst < 0) malformed(w, "block copy with a negative block id");
}

// A reported logprob: finite and <= 0 (a rounding slack of 1e-6 accepted), or -inf (probability 0).
bool valid_logprob(float v) { return v == -std::numeric_limits<float>::infinity() || (std::isfinite(v) && v <= 1e-6f); }

void validate(const TokenLogprobs& lp, const std::string& at) {
  const char* w = "StepResult";
  if (lp.top_ids.size() != lp.top_logprobs.size())
    malformed(w, at + std::to_string(lp.top_ids.size()) + " top_ids but " + std::to_string(lp.top_logprobs.size()) +
                     " top_logprobs");
  if (lp.top_ids.size() > size_t(kMaxLogprobs))
    malformed(w, at + "k " + std::to_string(lp.top_ids.size()) + " is not in [0, " + std::to_string(kMaxLogprobs) +
                     "]");
  if (!valid_logprob(lp.logprob))
    malformed(w, at + "logprob " + std::to_string(lp.logprob) + " is not -inf or a finite value <= 0");
  if (lp.rank < 1) malformed(w, at + "rank " + std::to_string(lp.rank) + " < 1");
  if (std::any_of(lp.top_ids.begin(), lp.top_ids.end(), [](int32_t t) { return t < 0; }))
    malformed(w, at + "top_ids has a negative token id");
  if (!std::all_of(lp.top_logprobs.begin(), lp.top_logprobs.end(), valid_logprob))
    malformed(w, at + "top_logprobs has a value that is not -inf or a finite value <= 0");
}

void validate(const StepResult& r) {
  const char* w = "StepResult";
  if (r.seq_ids.size() != r.tokens.size())
    malformed(w, std::to_string(r.seq_ids.size()) + " seq_ids but " + std::to_string(r.tokens.size()) + " tokens");
  if (std::any_of(r.tokens.begin(), r.tokens.end(), [](int32_t t) { return t < 0; }))
    malformed(w, "negative token id");
  if (!r.logprobs.empty() && r.logprobs.size() != r.tokens.size())
    malformed(w, std::to_string(r.logprobs.size()) + " logprobs entries for " + std::to_string(r.tokens.size()) +
                     " tokens (expected 0 or one per token)");
  for (size_t i = 0; i < r.logprobs.size(); ++i) {
    if (!r.logprobs[i]) continue;
    validate(*r.logprobs[i], "logprobs[" + std::to_string(i) + "] ");
  }
  for (size_t i = 0; i < r.prompt_logprobs.size(); ++i) {
    const PromptLogprobs& p = r.prompt_logprobs[i];
    const std::string at = "prompt_logprobs[" + std::to_string(i) + "] ";
    if (p.seq_id < 0) malformed(w, at + "seq_id " + std::to_string(p.seq_id) + " < 0");
    if (p.first_position < 1) malformed(w, at + "first_position " + std::to_string(p.first_position) + " < 1");
    for (size_t j = 0; j < p.entries.size(); ++j) validate(p.entries[j], at + "entry " + std::to_string(j) + " ");
  }
}

// Checks magic, version, the total size and the checksum common to both messages.
template <class H>
H read_frame(std::span<const uint8_t> bytes, uint32_t magic, const char* what) {
  if (bytes.size() < sizeof(H))
    malformed(what, std::to_string(bytes.size()) + " bytes is shorter than the " + std::to_string(sizeof(H)) +
                        "-byte header");
  H h;
  std::memcpy(&h, bytes.data(), sizeof(H));
  if (h.magic != magic) malformed(what, "bad magic");
  if (h.version != kStepPlanVersion)
    malformed(what, "version " + std::to_string(h.version) + " (expected " + std::to_string(kStepPlanVersion) + ")");
  if (h.total_bytes != bytes.size())
    malformed(what, "header says " + std::to_string(h.total_bytes) + " bytes, buffer has " +
                        std::to_string(bytes.size()));
  if (h.checksum != checksum(bytes, offsetof(H, checksum))) malformed(what, "checksum mismatch");
  return h;
}

template <class H>
void seal(std::vector<uint8_t>& b) {
  const uint64_t total = b.size();
  std::memcpy(b.data() + offsetof(H, total_bytes), &total, sizeof(total));
  const uint32_t sum = checksum(b, offsetof(H, checksum));
  std::memcpy(b.data() + offsetof(H, checksum), &sum, sizeof(sum));
}

}  // namespace

int64_t StepPlan::n_tokens() const {
  int64_t n = 0;
  for (const SeqPlan& s : seqs) n += int64_t(s.tokens.size());
  return n;
}

// --------------------------------------------------------------------------------------------- StepPlan

std::vector<uint8_t> serialize(const StepPlan& plan) {
  validate(plan);
  size_t total = sizeof(PlanHeader) + plan.seqs.size() * sizeof(SeqHeader) + plan.block_copies.size() * 8;
  for (const SeqPlan& s : plan.seqs)
    total += (s.tokens.size() + s.block_table.size() + s.history.size() + s.prompt_targets.size()) * sizeof(int32_t) +
             s.logit_bias.size() * sizeof(LogitBias) + s.token_bitmask.size() * sizeof(int32_t);

  Writer w(total);
  PlanHeader h{};
  h.magic = kStepPlanMagic;
  h.version = kStepPlanVersion;
  h.kind = uint16_t(plan.kind);
  h.step_id = plan.step_id;
  h.n_seqs = uint32_t(plan.seqs.size());
  h.n_block_copies = uint32_t(plan.block_copies.size());
  w.write(h);
  for (const SeqPlan& s : plan.seqs) {
    SeqHeader sh{};
    sh.seq_id = s.seq_id;
    sh.start_pos = s.start_pos;
    sh.n_tokens = uint32_t(s.tokens.size());
    sh.n_blocks = uint32_t(s.block_table.size());
    sh.n_history = uint32_t(s.history.size());
    sh.n_history_prompt = uint32_t(s.n_history_prompt);  // validated: <= n_history
    sh.temperature = s.sampling.temperature;
    sh.top_p = s.sampling.top_p;
    sh.min_p = s.sampling.min_p;
    sh.top_k = s.sampling.top_k;
    sh.seed = s.sampling.seed;
    sh.presence_penalty = s.sampling.presence_penalty;
    sh.frequency_penalty = s.sampling.frequency_penalty;
    sh.repetition_penalty = s.sampling.repetition_penalty;
    sh.logprobs = s.sampling.logprobs;
    sh.want_logits = s.want_logits ? 1 : 0;
    sh.prompt_logprobs = s.prompt_logprobs;
    sh.n_prompt_targets = uint32_t(s.prompt_targets.size());
    sh.n_logit_bias = uint32_t(s.logit_bias.size());
    sh.n_token_bitmask = uint32_t(s.token_bitmask.size());
    w.write(sh);
  }
  for (const SeqPlan& s : plan.seqs) {
    w.write_array(s.tokens);
    w.write_array(s.block_table);
    w.write_array(s.history);
    w.write_array(s.prompt_targets);
    w.write_array(s.logit_bias);
    w.write_array(s.token_bitmask);
  }
  for (const BlockCopy& c : plan.block_copies) {
    w.write(c.src);
    w.write(c.dst);
  }
  if (w.bytes().size() > kMaxStepPlanBytes) malformed("StepPlan", "exceeds kMaxStepPlanBytes");
  seal<PlanHeader>(w.bytes());
  return std::move(w.bytes());
}

StepPlan deserialize_step_plan(std::span<const uint8_t> bytes) {
  const char* what = "StepPlan";
  const PlanHeader h = read_frame<PlanHeader>(bytes, kStepPlanMagic, what);
  if (h.reserved != 0) malformed(what, "reserved header field is not 0");
  if (h.kind > uint16_t(StepKind::FetchKv)) malformed(what, "kind " + std::to_string(h.kind) + " is unknown");
  Reader r(bytes.subspan(sizeof(PlanHeader)), what);
  if (h.n_seqs > r.remaining() / sizeof(SeqHeader))
    malformed(what, std::to_string(h.n_seqs) + " sequence headers run past the end of the buffer");

  std::vector<SeqHeader> heads = r.read_array<SeqHeader>(h.n_seqs, "sequence headers");
  StepPlan plan;
  plan.step_id = h.step_id;
  plan.kind = StepKind(h.kind);
  plan.seqs.resize(heads.size());
  for (size_t i = 0; i < heads.size(); ++i) {
    const SeqHeader& sh = heads[i];
    if (sh.want_logits > 1) malformed(what, "seq[" + std::to_string(i) + "] want_logits is not 0 or 1");
    if (std::any_of(std::begin(sh.pad), std::end(sh.pad), [](uint8_t b) { return b != 0; }))
      malformed(what, "seq[" + std::to_string(i) + "] padding is not 0");
    if (sh.reserved != 0) malformed(what, "seq[" + std::to_string(i) + "] reserved field is not 0");
    SeqPlan& s = plan.seqs[i];
    s.seq_id = sh.seq_id;
    s.start_pos = sh.start_pos;
    s.want_logits = sh.want_logits == 1;
    s.sampling.temperature = sh.temperature;
    s.sampling.top_p = sh.top_p;
    s.sampling.top_k = sh.top_k;
    s.sampling.min_p = sh.min_p;
    s.sampling.seed = sh.seed;
    s.sampling.presence_penalty = sh.presence_penalty;
    s.sampling.frequency_penalty = sh.frequency_penalty;
    s.sampling.repetition_penalty = sh.repetition_penalty;
    s.sampling.logprobs = sh.logprobs;
    s.n_history_prompt = sh.n_history_prompt;
    s.tokens = r.read_array<int32_t>(sh.n_tokens, "tokens");
    s.block_table = r.read_array<int32_t>(sh.n_blocks, "block table");
    s.history = r.read_array<int32_t>(sh.n_history, "history");
    s.prompt_logprobs = sh.prompt_logprobs;
    s.prompt_targets = r.read_array<int32_t>(sh.n_prompt_targets, "prompt targets");
    s.logit_bias = r.read_array<LogitBias>(sh.n_logit_bias, "logit bias");
    s.token_bitmask = r.read_array<int32_t>(sh.n_token_bitmask, "token bitmask");
  }
  if (h.n_block_copies > r.remaining() / sizeof(BlockCopy))
    malformed(what, std::to_string(h.n_block_copies) + " block copies run past the end of the buffer");
  plan.block_copies.resize(h.n_block_copies);
  for (BlockCopy& c : plan.block_copies) {
    c.src = r.read<int32_t>("block copy src");
    c.dst = r.read<int32_t>("block copy dst");
  }
  if (r.remaining() != 0) malformed(what, std::to_string(r.remaining()) + " trailing bytes");
  validate(plan);
  return plan;
}

void broadcast_plan(Communicator& comm, StepPlan& plan, int root) {
  std::vector<uint8_t> bytes;
  uint64_t size = 0;
  if (comm.rank() == root) {
    bytes = serialize(plan);
    size = bytes.size();
  }
  comm.broadcast(&size, sizeof(size), root);
  if (comm.rank() == root) {
    comm.broadcast(bytes.data(), bytes.size(), root);
    return;
  }
  if (size < sizeof(PlanHeader) || size > kMaxStepPlanBytes)
    throw Error("rank " + std::to_string(comm.rank()) + ": broadcast_plan: root announced " + std::to_string(size) +
                " bytes");
  bytes.resize(size);
  comm.broadcast(bytes.data(), bytes.size(), root);
  plan = deserialize_step_plan(bytes);
}

// ------------------------------------------------------------------------------------------- StepResult

namespace {

void write_logprobs(Writer& w, const TokenLogprobs& lp) {
  w.write(int32_t(lp.top_ids.size()));
  w.write(lp.logprob);
  w.write(lp.rank);
  w.write_array(lp.top_ids);
  w.write_array(lp.top_logprobs);
}

// A logprobs record whose k was already read (and checked to be in [0, kMaxLogprobs]).
TokenLogprobs read_logprobs(Reader& r, int32_t k) {
  TokenLogprobs lp;
  lp.logprob = r.read<float>("logprobs logprob");
  lp.rank = r.read<int32_t>("logprobs rank");
  lp.top_ids = r.read_array<int32_t>(uint64_t(k), "logprobs top_ids");
  lp.top_logprobs = r.read_array<float>(uint64_t(k), "logprobs top_logprobs");
  return lp;
}

int32_t read_k(Reader& r, const std::string& at, bool allow_none) {
  const int32_t k = r.read<int32_t>("logprobs k");
  if ((k == -1 && allow_none) || (k >= 0 && k <= kMaxLogprobs)) return k;
  malformed("StepResult", at + " k " + std::to_string(k) + " is not in [" + (allow_none ? "-1" : "0") + ", " +
                              std::to_string(kMaxLogprobs) + "]");
}

size_t logprobs_bytes(const TokenLogprobs& lp) {
  return sizeof(int32_t) * 2 + sizeof(float) + lp.top_ids.size() * (sizeof(int32_t) + sizeof(float));
}

}  // namespace

std::vector<uint8_t> serialize(const StepResult& result) {
  validate(result);
  size_t total = sizeof(ResultHeader) + result.seq_ids.size() * (sizeof(int64_t) + sizeof(int32_t));
  for (const auto& lp : result.logprobs) total += lp ? logprobs_bytes(*lp) : sizeof(int32_t);
  for (const PromptLogprobs& p : result.prompt_logprobs) {
    total += 2 * sizeof(int64_t) + sizeof(uint32_t);
    for (const TokenLogprobs& lp : p.entries) total += logprobs_bytes(lp);
    check_count(p.entries.size(), "StepResult", "prompt logprobs entry");
  }
  Writer w(total);
  ResultHeader h{};
  h.magic = kStepResultMagic;
  h.version = kStepPlanVersion;
  h.has_logprobs = result.logprobs.empty() ? 0 : 1;
  h.step_id = result.step_id;
  h.n = result.seq_ids.size();
  h.n_prompt_logprobs = result.prompt_logprobs.size();
  w.write(h);
  w.write_array(result.seq_ids);
  w.write_array(result.tokens);
  for (const auto& lp : result.logprobs) {
    if (lp)
      write_logprobs(w, *lp);
    else
      w.write(int32_t(-1));  // nothing else follows for this entry
  }
  for (const PromptLogprobs& p : result.prompt_logprobs) {
    w.write(p.seq_id);
    w.write(p.first_position);
    w.write(uint32_t(p.entries.size()));
    for (const TokenLogprobs& lp : p.entries) write_logprobs(w, lp);
  }
  seal<ResultHeader>(w.bytes());
  return std::move(w.bytes());
}

StepResult deserialize_step_result(std::span<const uint8_t> bytes) {
  const char* what = "StepResult";
  const ResultHeader h = read_frame<ResultHeader>(bytes, kStepResultMagic, what);
  if (h.reserved2 != 0) malformed(what, "reserved header field is not 0");
  if (h.has_logprobs > 1) malformed(what, "has_logprobs " + std::to_string(h.has_logprobs) + " is not 0 or 1");
  if (h.has_logprobs == 1 && h.n == 0) malformed(what, "has_logprobs is 1 with no tokens");
  Reader r(bytes.subspan(sizeof(ResultHeader)), what);
  StepResult out;
  out.step_id = h.step_id;
  out.seq_ids = r.read_array<int64_t>(h.n, "seq_ids");
  out.tokens = r.read_array<int32_t>(h.n, "tokens");
  if (h.has_logprobs == 1) {
    out.logprobs.resize(h.n);  // h.n is bounded by the buffer: the two arrays above fit in it
    for (size_t i = 0; i < out.logprobs.size(); ++i) {
      const int32_t k = read_k(r, "logprobs[" + std::to_string(i) + "]", true);
      if (k >= 0) out.logprobs[i] = read_logprobs(r, k);
    }
  }
  // Each entry takes at least 20 bytes: a count past that cannot fit in what is left.
  if (h.n_prompt_logprobs > r.remaining() / 20)
    malformed(what, std::to_string(h.n_prompt_logprobs) + " prompt logprobs entries run past the end of the buffer");
  out.prompt_logprobs.resize(h.n_prompt_logprobs);
  for (size_t i = 0; i < out.prompt_logprobs.size(); ++i) {
    PromptLogprobs& p = out.prompt_logprobs[i];
    p.seq_id = r.read<int64_t>("prompt logprobs seq_id");
    p.first_position = r.read<int64_t>("prompt logprobs first_position");
    const uint32_t n = r.read<uint32_t>("prompt logprobs entries");
    if (n > r.remaining() / 12) malformed(what, std::to_string(n) + " prompt logprobs entries run past the end of the buffer");
    p.entries.reserve(n);
    for (uint32_t j = 0; j < n; ++j)
      p.entries.push_back(read_logprobs(r, read_k(r, "prompt_logprobs[" + std::to_string(i) + "]", false)));
  }
  if (r.remaining() != 0) malformed(what, std::to_string(r.remaining()) + " trailing bytes");
  validate(out);
  return out;
}

}  // namespace tp

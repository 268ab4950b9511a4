#include "parallel/tp_layout.h"

#include <algorithm>
#include <string>

#include "common/error.h"

namespace tp {
namespace {

std::string join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

void check_shape(const TpShape& s) {
  auto positive = [](int64_t v, const char* what) {
    if (v <= 0) throw InputError(std::string("tensor-parallel layout: ") + what + " = " + std::to_string(v) +
                                 " must be > 0");
  };
  positive(s.n_heads, "n_heads");
  positive(s.n_kv_heads, "n_kv_heads");
  positive(s.intermediate, "intermediate");
  positive(s.vocab, "vocab");
  if (s.n_layers < 0 || s.head_dim < 0 || s.hidden < 0)
    throw InputError("tensor-parallel layout: n_layers, head_dim and hidden must be >= 0");
  if (s.n_heads % s.n_kv_heads != 0)
    throw InputError("tensor-parallel layout: " + std::to_string(s.n_kv_heads) + " KV heads do not divide " +
                     std::to_string(s.n_heads) + " attention heads");
}

// Empty when valid, else the reason (without the model name suffix and the valid list).
std::string tp_problem(const TpShape& s, int64_t tp) {
  if (tp < 1) return "tp=" + std::to_string(tp) + " is not >= 1";
  const std::string t = "tp=" + std::to_string(tp);
  if (s.n_heads % tp != 0) return t + " does not divide the " + std::to_string(s.n_heads) + " attention heads";
  if (s.n_kv_heads % tp != 0 && tp % s.n_kv_heads != 0)
    return t + " neither divides nor is a multiple of the " + std::to_string(s.n_kv_heads) + " KV heads";
  if (s.intermediate % tp != 0)
    return t + " does not divide the intermediate size " + std::to_string(s.intermediate);
  return {};
}

}  // namespace

int64_t TpLayout::local_real_vocab_rows() const {
  return std::clamp<int64_t>(vocab - vocab_rows.begin, 0, vocab_rows.size());
}

int64_t TpLayout::local_kv_head_of_q(int64_t q, int64_t n_heads, int64_t n_kv_heads) const {
  const int64_t group = n_heads / n_kv_heads;
  return q / group - kv_heads.begin;
}

std::vector<int> valid_tp_degrees(const TpShape& shape) {
  check_shape(shape);
  std::vector<int> out;
  for (int64_t t = 1; t <= shape.n_heads; ++t)
    if (tp_problem(shape, t).empty()) out.push_back(int(t));
  return out;
}

void validate_tp(const TpShape& shape, int tp, std::string_view model_name) {
  check_shape(shape);
  const std::string problem = tp_problem(shape, tp);
  if (problem.empty()) return;
  throw InputError(problem + (tp < 1 ? " for " : " of ") + std::string(model_name) + "; valid: " + join(valid_tp_degrees(shape)));
}

TpLayout make_tp_layout(const TpShape& shape, int tp, int rank, std::string_view model_name) {
  validate_tp(shape, tp, model_name);
  if (rank < 0 || rank >= tp)
    throw InputError("tensor-parallel rank " + std::to_string(rank) + " is not in [0, " + std::to_string(tp) +
                     ") for " + std::string(model_name));
  TpLayout l;
  l.tp = tp;
  l.rank = rank;
  l.head_dim = shape.head_dim;

  const int64_t q_per = shape.n_heads / tp;
  l.q_heads = {rank * q_per, (rank + 1) * q_per};

  if (shape.n_kv_heads % tp == 0) {
    const int64_t kv_per = shape.n_kv_heads / tp;
    l.kv_heads = {rank * kv_per, (rank + 1) * kv_per};
  } else {  // tp is a multiple of n_kv_heads: tp / n_kv_heads ranks share each KV head
    const int64_t kv = int64_t(rank) * shape.n_kv_heads / tp;
    l.kv_heads = {kv, kv + 1};
    l.kv_replicated = true;
  }

  const int64_t i_per = shape.intermediate / tp;
  l.intermediate = {rank * i_per, (rank + 1) * i_per};

  l.vocab = shape.vocab;
  l.vocab_padded = (shape.vocab + tp - 1) / tp * tp;
  const int64_t v_per = l.vocab_padded / tp;
  l.vocab_rows = {rank * v_per, (rank + 1) * v_per};
  return l;
}

int64_t kv_bytes_per_token(int64_t n_layers, int64_t local_kv_heads, int64_t head_dim, int64_t dtype_bytes) {
  return 2 * n_layers * local_kv_heads * head_dim * dtype_bytes;
}

}  // namespace tp

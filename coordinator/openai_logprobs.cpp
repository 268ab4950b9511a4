#include "coordinator/openai_logprobs.h"

#include <algorithm>
#include <cmath>

namespace tp {

using json = nlohmann::json;

namespace {

double reported(float lp) { return std::isfinite(lp) ? double(lp) : kMinReportedLogprob; }

json byte_list(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

}  // namespace

json empty_logprobs(bool chat) {
  if (chat) return {{"content", json::array()}};
  return {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
          {"text_offset", json::array()}};
}

void append_logprobs(json& lp, bool chat, const TokenPiece& piece, int32_t id, const TokenLogprobs& l,
                     int64_t text_offset, int32_t k_max) {
  if (lp.is_null()) lp = empty_logprobs(chat);
  const std::string text = piece(id);
  const size_t n_top = k_max < 0 ? l.top_ids.size() : std::min(l.top_ids.size(), size_t(k_max));
  if (chat) {
    json top = json::array();
    for (size_t k = 0; k < n_top; ++k) {
      const std::string t = piece(l.top_ids[k]);
      top.push_back({{"token", t}, {"logprob", reported(l.top_logprobs[k])}, {"bytes", byte_list(t)}});
    }
    lp["content"].push_back(
        {{"token", text}, {"logprob", reported(l.logprob)}, {"bytes", byte_list(text)}, {"top_logprobs", top}});
    return;
  }
  json top = json::object();
  for (size_t k = 0; k < n_top; ++k) top[piece(l.top_ids[k])] = reported(l.top_logprobs[k]);
  if (!top.contains(text)) top[text] = reported(l.logprob);
  lp["tokens"].push_back(text);
  lp["token_logprobs"].push_back(reported(l.logprob));
  lp["top_logprobs"].push_back(top);
  lp["text_offset"].push_back(text_offset);
}

void append_prompt_logprobs(json& lp, const TokenPiece& piece, const std::vector<int32_t>& prompt,
                            const std::vector<TokenLogprobs>& prompt_lp, int32_t k) {
  if (lp.is_null()) lp = empty_logprobs(false);
  int64_t offset = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (i == 0 || i >= prompt_lp.size()) {
      const std::string text = piece(prompt[i]);
      lp["tokens"].push_back(text);
      lp["token_logprobs"].push_back(nullptr);
      lp["top_logprobs"].push_back(nullptr);
      lp["text_offset"].push_back(offset);
      offset += utf8_chars(text);
      continue;
    }
    append_logprobs(lp, false, piece, prompt[i], prompt_lp[i], offset, k);
    offset += utf8_chars(piece(prompt[i]));
  }
}

json vllm_prompt_logprobs(const TokenPiece& piece, const std::vector<int32_t>& prompt,
                          const std::vector<TokenLogprobs>& prompt_lp, int32_t k) {
  json out = json::array();
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (i == 0 || i >= prompt_lp.size()) {
      out.push_back(nullptr);
      continue;
    }
    const TokenLogprobs& l = prompt_lp[i];
    json d = json::object();
    const size_t n_top = std::min(l.top_ids.size(), size_t(std::max(k, 0)));
    for (size_t j = 0; j < n_top; ++j)
      d[std::to_string(l.top_ids[j])] = {{"logprob", reported(l.top_logprobs[j])}, {"rank", int64_t(j) + 1},
                                         {"decoded_token", piece(l.top_ids[j])}};
    d[std::to_string(prompt[i])] = {{"logprob", reported(l.logprob)}, {"rank", l.rank}, {"decoded_token", piece(prompt[i])}};
    out.push_back(std::move(d));
  }
  return out;
}

void extend_logprobs(json& into, const json& from) {
  if (from.is_null()) return;
  if (into.is_null()) {
    into = from;
    return;
  }
  for (auto it = from.begin(); it != from.end(); ++it)
    if (it->is_array())
      for (const json& e : *it) into[it.key()].push_back(e);
}

int64_t utf8_chars(std::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace tp

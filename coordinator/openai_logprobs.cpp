#include "coordinator/openai_logprobs.h"

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
                     int64_t text_offset) {
  if (lp.is_null()) lp = empty_logprobs(chat);
  const std::string text = piece(id);
  if (chat) {
    json top = json::array();
    for (size_t k = 0; k < l.top_ids.size(); ++k) {
      const std::string t = piece(l.top_ids[k]);
      top.push_back({{"token", t}, {"logprob", reported(l.top_logprobs[k])}, {"bytes", byte_list(t)}});
    }
    lp["content"].push_back(
        {{"token", text}, {"logprob", reported(l.logprob)}, {"bytes", byte_list(text)}, {"top_logprobs", top}});
    return;
  }
  json top = json::object();
  for (size_t k = 0; k < l.top_ids.size(); ++k) top[piece(l.top_ids[k])] = reported(l.top_logprobs[k]);
  if (!top.contains(text)) top[text] = reported(l.logprob);
  lp["tokens"].push_back(text);
  lp["token_logprobs"].push_back(reported(l.logprob));
  lp["top_logprobs"].push_back(top);
  lp["text_offset"].push_back(text_offset);
}

int64_t utf8_chars(std::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace tp

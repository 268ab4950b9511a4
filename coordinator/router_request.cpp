#include "coordinator/router_request.h"

#include <random>
#include <span>

#include "coordinator/generation_job.h"
#include "coordinator/openai_request.h"
#include "kvstore/block_manager.h"

namespace tp {

using json = nlohmann::json;

std::vector<uint64_t> block_chain(const std::vector<int32_t>& tokens, int64_t block_size) {
  std::vector<uint64_t> chain;
  uint64_t h = kRootHash;
  for (size_t b = 0; block_size > 0 && (b + 1) * size_t(block_size) <= tokens.size(); ++b) {
    h = default_block_hash(h, std::span<const int32_t>(tokens.data() + b * size_t(block_size), size_t(block_size)));
    chain.push_back(h);
  }
  return chain;
}

RouteInfo route_info(const json& body, bool chat, const Tokenizer& tok, const ChatTemplate& tmpl, int64_t max_context,
                     int64_t block_size) {
  RouteInfo info;
  info.chat = chat;
  if (body.is_object()) {
    if (auto it = body.find("stream"); it != body.end() && it->is_boolean()) info.stream = it->get<bool>();
    if (auto it = body.find("return_token_ids"); it != body.end() && it->is_boolean())
      info.client_wants_token_ids = it->get<bool>();
  }
  try {
    GenerationJob job = chat ? chat_job(parse_chat_completion_request(body), tok, tmpl, max_context)
                             : completion_job(parse_completion_request(body), tok, max_context);
    info.tokenized = true;
    info.prompt = job.prompts.at(0).tokens;
    if (job.params.max_tokens) info.max_tokens = *job.params.max_tokens;
    // The first feature a resumption (one prompt + the tokens already sent, one continuation) cannot carry.
    const std::pair<bool, const char*> blockers[] = {
        {job.params.continuation || job.params.resumed_output_tokens > 0, "its own continuation"},
    };
    for (const auto& [blocks, what] : blockers)
      if (blocks && info.not_replayable.empty()) info.not_replayable = what;
    info.replayable = info.not_replayable.empty();
    info.n_choices = job.params.n;
    info.n_prompts = int32_t(job.prompts.size());
    for (const JobPrompt& jp : job.prompts) {
      info.prompt_sizes.push_back(int64_t(jp.tokens.size()));
      info.prompt_echo_bytes.push_back(int64_t(jp.echo.size()));
      info.prompt_echo_logprobs.push_back(job.echo_logprobs >= 0 ? int64_t(jp.tokens.size()) : 0);
    }
    info.include_usage = job.params.include_usage;
    info.prompt_logprobs = job.params.prompt_logprobs.has_value();
    info.ignore_eos = job.params.ignore_eos;
    info.echo_bytes = int64_t(job.prompts.at(0).echo.size());
    if (job.echo_logprobs >= 0) info.echo_logprobs = int64_t(info.prompt.size());
    if (info.stream && info.replayable && !job.params.seed) {
      static thread_local std::mt19937_64 rng{std::random_device{}()};
      info.seed = rng() >> 1;  // a non-negative JSON integer
    }
  } catch (const std::exception&) {
    info.tokenized = false;  // the replica will say what is wrong
    info.replayable = false;
    info.not_replayable = "a body the router could not parse";
  }
  info.chain = block_chain(info.prompt, block_size);
  info.load_tokens = int64_t(info.prompt.size()) + (info.max_tokens >= 0 ? info.max_tokens : kDefaultLoadTokens);
  return info;
}

namespace {

json forwarded(json body, const RouteInfo& info, const std::string& fetch_from) {
  if (info.stream && info.replayable) body["return_token_ids"] = true;
  if (info.seed) body["seed"] = *info.seed;
  if (!fetch_from.empty()) body["kv_transfer_params"] = {{"fetch_from", fetch_from}};
  return body;
}

}  // namespace

std::string forward_body(json body, const RouteInfo& info, const std::string& fetch_from) {
  return forwarded(std::move(body), info, fetch_from).dump();
}

std::string replay_body(const json& original, const RouteInfo& info, int32_t choice, const std::vector<int32_t>& output,
                        bool from_start) {
  json b = forwarded(original, info, "");
  if (!from_start) {
    b["tpserve_continuation"] = output;
    b.erase("prompt_logprobs");  // the client has them (router_stream.h: else the replay is from the start)
  }
  if (info.n_prompts > 1) {  // prompt j alone
    const json& prompts = original.at("prompt");
    b["prompt"] = prompts.at(size_t(choice / std::max(info.n_choices, 1)));
  }
  if (info.n_choices > 1 || info.n_prompts > 1) {  // choice i alone, sampled as the engine samples choice i of n: seed + i
    choice %= std::max(info.n_choices, 1);
    b.erase("n");
    b.erase("best_of");
    if (auto s = b.find("seed"); s != b.end() && s->is_number()) {  // route_info parsed it: an integer
      const uint64_t seed = s->is_number_unsigned() ? s->get<uint64_t>()
                            : s->is_number_integer() ? uint64_t(s->get<int64_t>())
                                                     : uint64_t(int64_t(s->get<double>()));
      *s = int64_t(seed + uint64_t(choice));  // the bits, as the replica reads a negative seed
    }
  }
  return b.dump();
}

}  // namespace tp

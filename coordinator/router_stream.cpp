#include "coordinator/router_stream.h"

#include <algorithm>

#include "coordinator/http_server.h"

namespace tp {

using json = nlohmann::json;

std::vector<std::string> SseSplitter::feed(std::string_view bytes) {
  buf_.append(bytes);
  std::vector<std::string> out;
  for (;;) {
    const size_t end = buf_.find("\n\n");
    if (end == std::string::npos) break;
    const std::string ev = buf_.substr(0, end);
    buf_.erase(0, end + 2);
    std::string data;
    size_t pos = 0;
    while (pos <= ev.size()) {
      size_t nl = ev.find('\n', pos);
      if (nl == std::string::npos) nl = ev.size();
      std::string_view line(ev.data() + pos, nl - pos);
      if (line.rfind("data:", 0) == 0) {
        line.remove_prefix(5);
        if (!line.empty() && line[0] == ' ') line.remove_prefix(1);
        if (!data.empty()) data += '\n';
        data.append(line);
      }
      pos = nl + 1;
    }
    if (!data.empty()) out.push_back(std::move(data));
  }
  return out;
}

namespace {

// The entries of a choice's logprobs object: chat's content[], completions' tokens[]; 0 for null.
int64_t n_logprob_entries(const json& lp) {
  if (!lp.is_object()) return 0;
  for (const char* k : {"content", "tokens"})
    if (auto it = lp.find(k); it != lp.end() && it->is_array()) return int64_t(it->size());
  return 0;
}

// Removes the first n entries of every array of a logprobs object (completions' arrays run in parallel).
void drop_logprob_entries(json& lp, int64_t n) {
  if (!lp.is_object() || n <= 0) return;
  for (auto& [key, arr] : lp.items())
    if (arr.is_array()) arr.erase(arr.begin(), arr.begin() + std::min<int64_t>(n, int64_t(arr.size())));
}

}  // namespace

StreamTracker::StreamTracker(bool chat, bool client_wants_token_ids, int32_t n_choices, int64_t echo_bytes,
                             int64_t echo_logprobs, bool include_usage, int64_t n_prompt_tokens,
                             bool prompt_logprobs)
    : chat_(chat),
      keep_ids_(client_wants_token_ids),
      choices_(size_t(std::max(n_choices, 1))),
      include_usage_(include_usage),
      prompt_logprobs_(prompt_logprobs),
      n_prompt_tokens_(n_prompt_tokens) {
  for (Choice& c : choices_) {
    c.echo_left = echo_bytes;
    c.echo_lp_left = echo_logprobs;
  }
}

void StreamTracker::begin_replay(const Tokenizer& tok, bool ignore_eos) {
  for (Choice& ch : choices_) {
    if (ch.finished) continue;
    IncrementalDecoder dec(tok, false);
    int64_t len = 0, len_k = 0, lp = 0, lp_k = 0;
    size_t k = 0;
    for (size_t i = 0; i < ch.tokens.size(); ++i) {
      const int32_t t = ch.tokens[i];
      if (t < 0 || t >= tok.vocab_size()) break;  // not the replicas' vocabulary: resume before it
      if (!ignore_eos && tok.is_eog(t)) break;     // it ended the generation: generated again (a continuation holds none)
      len += int64_t(dec.push(t).size());
      ++lp;  // each token that is text has a logprobs entry (when asked for)
      if (len > ch.text_bytes) break;  // token i's text is not all with the client
      if (dec.n_pending() == 0) {
        k = i + 1;
        len_k = len;
        lp_k = lp;
      }
    }
    ch.tokens.resize(k);
    ch.skip_bytes = ch.text_bytes - len_k;
    ch.skip_ids = ch.ids_sent - int64_t(k);
    ch.skip_lp = std::max<int64_t>(0, ch.lp_sent - lp_k);  // 0 when no logprobs were asked for
    ch.tool_skip = ch.tool_args;  // the continuation sends every call again: the client has these
  }
}

void StreamTracker::set_prompts(int32_t n_per_prompt, const std::vector<int64_t>& echo_bytes,
                                const std::vector<int64_t>& echo_logprobs) {
  several_prompts_ = echo_bytes.size() > 1;
  for (size_t k = 0; k < choices_.size(); ++k) {
    const size_t j = k / size_t(std::max(n_per_prompt, 1));
    if (j < echo_bytes.size()) choices_[k].echo_left = echo_bytes[j];
    if (j < echo_logprobs.size()) choices_[k].echo_lp_left = echo_logprobs[j];
  }
}

int32_t StreamTracker::next_choice() const {
  for (size_t i = 0; i < choices_.size(); ++i)
    if (!choices_[i].finished) return int32_t(i);
  return -1;
}

void StreamTracker::continue_choice(int32_t i) {
  current_ = i;
  segment_done_ = false;
}

StreamEvent StreamTracker::on_event(const std::string& data) {
  StreamEvent ev;
  if (data == "[DONE]") {
    segment_done_ = true;
    ev.kind = StreamEvent::Kind::Done;
    if (current_ < 0) {
      done_ = true;
      ev.out = sse_event("[DONE]");
    } else if (finished()) {  // a continuation's [DONE] while other choices still owe text: not yet
      ev.out = close();
    }
    return ev;
  }
  json j = json::parse(data, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {  // not ours to judge: pass it on
    ev.out = sse_event(data);
    return ev;
  }
  if (j.contains("error")) {
    ev.kind = StreamEvent::Kind::Error;
    ev.out = sse_event(data);
    return ev;
  }
  ++n_chunks_;
  if (auto ch = j.find("choices"); ch != j.end() && ch->is_array() && ch->empty() && j.contains("usage"))
    return on_usage(j);
  if (current_ < 0 && id_.is_null()) {
    id_ = j.value("id", json());
    created_ = j.value("created", json());
    model_ = j.value("model", json());
  }
  bool output = false;
  const auto top_lp = j.find("prompt_logprobs");  // chat's, beside the choice's first output
  const bool chat_prompt_lp = top_lp != j.end() && !top_lp->is_null();
  if (auto ch = j.find("choices"); ch != j.end() && ch->is_array()) {
    for (json& c : *ch) {
      if (!c.is_object()) continue;
      int64_t index = c.value("index", int64_t(0));
      if (current_ >= 0 && index == 0) c["index"] = index = current_;  // an n = 1 continuation of choice current_
      if (index >= 0 && index < int64_t(choices_.size())) {
        if (chat_prompt_lp) choices_[size_t(index)].prompt_lp_sent = true;
        if (!on_choice(choices_[size_t(index)], c, output)) return ev;
      }
      if (!keep_ids_) c.erase("token_ids");
    }
  }
  n_output_chunks_ += output;
  if (current_ >= 0) {
    j["id"] = id_;
    j["created"] = created_;
    j["model"] = model_;
  }
  ev.out = sse_event(j.dump());
  return ev;
}

StreamEvent StreamTracker::on_usage(json& j) {
  StreamEvent ev;
  if (current_ < 0) {  // the unbroken response's own
    usage_sent_ = true;
    ev.out = sse_event(j.dump());
    return ev;
  }
  const json& u = j["usage"];
  if (u.is_object()) {
    if (auto p = u.find("prompt_tokens"); p != u.end() && p->is_number_integer()) usage_prompt_ = p->get<int64_t>();
    if (auto c = u.find("completion_tokens"); c != u.end() && c->is_number_integer())
      choices_.at(size_t(current_)).usage_completion = c->get<int64_t>();
  }
  return ev;  // one usage chunk for all the choices, at the end (close())
}

std::string StreamTracker::close() {
  std::string out;
  if (include_usage_ && !usage_sent_) {
    int64_t completion = 0;
    for (const Choice& ch : choices_)
      completion += ch.usage_completion >= 0 ? ch.usage_completion : int64_t(ch.tokens.size());
    const int64_t prompt = usage_prompt_ >= 0 && !several_prompts_ ? usage_prompt_ : n_prompt_tokens_;
    const json u = {{"id", id_},
                    {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
                    {"created", created_},
                    {"model", model_},
                    {"choices", json::array()},
                    {"usage", {{"prompt_tokens", prompt}, {"completion_tokens", completion},
                               {"total_tokens", prompt + completion}}}};
    out = sse_event(u.dump());
    usage_sent_ = true;
  }
  done_ = true;
  return out + sse_event("[DONE]");
}

bool StreamTracker::on_choice(Choice& ch, json& c, bool& output) {
  if (auto d = c.find("delta"); chat_ && d != c.end() && d->is_object() && d->contains("role")) {
    if (ch.role_sent) return false;  // the role chunk that opens a chat choice: once for the client
    ch.role_sent = true;
  }
  if (auto t = c.find("token_ids"); t != c.end() && t->is_array()) {
    output = output || !t->empty();
    json kept = json::array();
    for (const json& id : *t) {
      ch.tokens.push_back(id.get<int32_t>());
      if (ch.skip_ids > 0) {
        --ch.skip_ids;  // the client has it from before the replay
      } else {
        kept.push_back(id);
        ++ch.ids_sent;
      }
    }
    *t = std::move(kept);
  }
  if (auto p = c.find("prompt_logprobs"); p != c.end() && !p->is_null()) ch.prompt_lp_sent = true;  // completions'
  if (auto lp = c.find("logprobs"); lp != c.end() && lp->is_object()) {
    // The prompt's entries lead a stream's first chunk (echo); a continuation's first ones the client may
    // have already. Never both: a replay that still owes the echo starts over (replay_from_start).
    const int64_t n = n_logprob_entries(*lp);
    const int64_t echo = std::min(ch.echo_lp_left, n);
    ch.echo_lp_left -= echo;
    const int64_t drop = std::min(ch.skip_lp, n - echo);
    drop_logprob_entries(*lp, drop);
    ch.skip_lp -= drop;
    ch.lp_sent += n - echo - drop;
  }
  // The chunk's text: a chat chunk's delta.content, a completions chunk's text.
  json* text = nullptr;
  if (chat_) {
    if (auto d = c.find("delta"); d != c.end() && d->is_object())
      if (auto s = d->find("content"); s != d->end() && s->is_string()) text = &*s;
  } else if (auto s = c.find("text"); s != c.end() && s->is_string()) {
    text = &*s;
  }
  if (text) {
    std::string s = text->get<std::string>();
    if (ch.skip_bytes > 0) {
      const int64_t drop = std::min<int64_t>(ch.skip_bytes, int64_t(s.size()));
      s.erase(0, size_t(drop));
      ch.skip_bytes -= drop;
      *text = s;
    }
    const int64_t echo = std::min<int64_t>(ch.echo_left, int64_t(s.size()));
    ch.echo_left -= echo;
    ch.text_bytes += int64_t(s.size()) - echo;
    output = output || int64_t(s.size()) > echo;
  }
  if (auto f = c.find("finish_reason"); f != c.end() && !f->is_null()) ch.finished = output = true;
  if (auto d = c.find("delta"); chat_ && d != c.end() && d->is_object() && on_tool_calls(ch, *d)) {
    output = true;
    // A chunk of calls the client has entirely: nothing to send.
    const auto ids = c.find("token_ids");
    if (!d->contains("tool_calls") && !d->contains("role") && !text && c.value("finish_reason", json()).is_null() &&
        (ids == c.end() || !ids->is_array() || ids->empty()))
      return false;
  }
  return true;
}

bool StreamTracker::on_tool_calls(Choice& ch, json& delta) {
  const auto tc = delta.find("tool_calls");
  if (tc == delta.end() || !tc->is_array()) return false;
  json kept = json::array();
  for (json& call : *tc) {
    const auto idx = call.is_object() ? call.find("index") : call.end();
    if (!call.is_object() || idx == call.end() || !idx->is_number_unsigned() || idx->get<uint64_t>() > 4096) {
      kept.push_back(std::move(call));  // not a replica's shape: not ours to judge
      continue;
    }
    const size_t k = idx->get<size_t>();
    const bool seen = k < ch.tool_skip.size();  // the client has its header (from before a replay)
    bool stripped = false;
    json* fn = nullptr;
    if (auto f = call.find("function"); f != call.end() && f->is_object()) fn = &*f;
    if (call.contains("id") || (fn && fn->contains("name"))) {  // the header
      if (seen) {
        call.erase("id");
        call.erase("type");
        if (fn) fn->erase("name");
        stripped = true;
      } else if (k >= ch.tool_args.size()) {
        ch.tool_args.resize(k + 1, 0);
      }
    }
    if (auto a = fn ? fn->find("arguments") : call.end(); fn && a != fn->end() && a->is_string()) {
      std::string s = a->get<std::string>();
      if (seen && ch.tool_skip[k] > 0) {
        const int64_t drop = std::min<int64_t>(ch.tool_skip[k], int64_t(s.size()));
        s.erase(0, size_t(drop));
        ch.tool_skip[k] -= drop;
        *a = s;
        stripped = true;
      }
      if (k < ch.tool_args.size()) ch.tool_args[k] += int64_t(s.size());
    }
    // What is left of a call the client has: its arguments' new bytes, if any.
    const auto a = fn ? fn->find("arguments") : call.end();
    if (stripped && (!fn || a == fn->end() || (a->is_string() && a->get_ref<const std::string&>().empty()))) continue;
    kept.push_back(std::move(call));
  }
  if (kept.empty()) delta.erase("tool_calls");
  else *tc = std::move(kept);
  return true;
}

}  // namespace tp

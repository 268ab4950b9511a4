#include "coordinator/router_stream.h"

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

StreamEvent StreamTracker::on_event(const std::string& data) {
  StreamEvent ev;
  if (data == "[DONE]") {
    done_ = true;
    ev.kind = StreamEvent::Kind::Done;
    ev.out = sse_event("[DONE]");
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
  if (!replaying_ && id_.is_null()) {
    id_ = j.value("id", json());
    created_ = j.value("created", json());
    model_ = j.value("model", json());
  }
  if (auto ch = j.find("choices"); ch != j.end() && ch->is_array()) {
    for (json& c : *ch) {
      const int64_t index = c.value("index", int64_t(0));
      if (index == 0) {
        if (auto t = c.find("token_ids"); t != c.end() && t->is_array())
          for (const json& id : *t) tokens_.push_back(id.get<int32_t>());
        if (auto f = c.find("finish_reason"); f != c.end() && !f->is_null()) finished_ = true;
      }
      if (!keep_ids_) c.erase("token_ids");
      if (replaying_ && chat_) {  // a completions chunk back into a chat chunk
        std::string text = c.value("text", std::string());
        c.erase("text");
        c["delta"] = text.empty() ? json::object() : json{{"content", text}};
      }
    }
  }
  if (replaying_) {
    j["id"] = id_;
    j["created"] = created_;
    j["model"] = model_;
    j["object"] = chat_ ? "chat.completion.chunk" : "text_completion";
  }
  ev.out = sse_event(j.dump());
  return ev;
}

}  // namespace tp

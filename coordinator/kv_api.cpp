// ApiHandlers: the HTTP side of the KV block exchange between replicas (issue 15, deliverable 3). See
// api_handlers.h and kv_fetch_client.h for the wire shapes.
#include <chrono>

#include <nlohmann/json.hpp>

#include "common/token_ids.h"
#include "coordinator/api_handlers.h"
#include "coordinator/openai_error.h"
#include "coordinator/openai_request.h"

namespace tp {

using json = nlohmann::json;

namespace {

HttpResponse kv_json(const json& j, int status = 200) { return HttpResponse{status, "application/json", j.dump(), {}}; }

}  // namespace

HttpResponse ApiHandlers::kv_export(const HttpRequest& req) {
  check_auth(req);
  const json body = parse_json_body(req.body);
  if (cfg_.kv_addresses.empty())
    throw ApiException(service_unavailable("KV transfer is not available on this replica (UCX did not start)"));
  const auto it = body.find("prompt_token_ids");
  if (it == body.end() || !it->is_array() || it->empty())
    throw ApiException(bad_request("prompt_token_ids must be a non-empty list of token ids", "prompt_token_ids"));
  std::vector<int32_t> ids;
  for (const json& t : *it) {
    if (!t.is_number_integer()) throw ApiException(bad_request("prompt_token_ids holds a non-integer", "prompt_token_ids"));
    const int64_t v = t.get<int64_t>();
    if (v < 0 || v >= tok_.vocab_size())
      throw ApiException(bad_request("prompt_token_ids holds " + std::to_string(v) + ", outside the vocabulary",
                                     "prompt_token_ids"));
    ids.push_back(int32_t(v));
  }
  const KvExport e = engine_.export_kv(std::move(ids), std::chrono::milliseconds(cfg_.kv_pin_ms),
                                       std::chrono::milliseconds(10000));
  json ranks = json::array();
  for (size_t r = 0; r < cfg_.kv_addresses.size(); ++r) ranks.push_back({{"tp_rank", r}, {"ucx_address", cfg_.kv_addresses[r]}});
  return kv_json({{"pin_id", e.pin_id},
                  {"pin_ms", cfg_.kv_pin_ms},
                  {"block_size", e.block_size},
                  {"tp", cfg_.kv_addresses.size()},
                  {"blocks", e.blocks},
                  {"block_hashes", e.block_hashes},
                  {"ranks", ranks}});
}

HttpResponse ApiHandlers::kv_release(const HttpRequest& req) {
  check_auth(req);
  const json body = parse_json_body(req.body);
  const auto it = body.find("pin_id");
  if (it == body.end() || !it->is_number_unsigned())
    throw ApiException(bad_request("pin_id must be a non-negative integer", "pin_id"));
  engine_.release_kv_pin(it->get<uint64_t>());
  return kv_json({{"released", true}});
}

void ApiHandlers::attach_kv_imports(const std::string& body_text, GenerationJob& job) {
  if (body_text.find("kv_transfer_params") == std::string::npos) return;  // the common case: no second parse
  const json body = parse_json_body(body_text);
  const auto it = body.find("kv_transfer_params");
  if (it == body.end() || it->is_null()) return;
  if (!it->is_object()) throw FieldError("kv_transfer_params", "kv_transfer_params must be an object");
  const auto from = it->find("fetch_from");
  if (from == it->end() || from->is_null()) return;
  if (!from->is_string()) throw FieldError("kv_transfer_params.fetch_from", "kv_transfer_params.fetch_from must be a URL string");
  const std::string url = from->get<std::string>();
  job.kv_imports.clear();
  for (const JobPrompt& p : job.prompts) {
    if (!cfg_.kv_fetch) {
      auto im = std::make_shared<KvImport>();
      im->holder = url;
      im->error = "this replica cannot fetch KV blocks (UCX did not start)";
      job.kv_imports.push_back(std::move(im));
      continue;
    }
    try {
      job.kv_imports.push_back(cfg_.kv_fetch->prepare(url, p.tokens));
    } catch (const InputError& e) {
      throw FieldError("kv_transfer_params.fetch_from", e.what());
    }
  }
}

}  // namespace tp

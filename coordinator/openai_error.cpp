// OpenAI-style error bodies and the per-status constructors.
#include "coordinator/openai_error.h"

#include <nlohmann/json.hpp>

namespace tp {

std::string to_json(const ApiError& e) {
  nlohmann::json err = {{"message", e.message},
                        {"type", e.type},
                        {"param", e.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.param)},
                        {"code", e.code.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.code)}};
  // Invalid UTF-8 in a message (it may quote client input) is replaced, never thrown.
  return nlohmann::json{{"error", std::move(err)}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

ApiError bad_request(std::string message, std::string param, std::string code) {
  if (code.empty() && !param.empty()) code = "invalid_value";
  return {400, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}

ApiError unauthorized(std::string message) {
  return {401, std::move(message), "authentication_error", {}, "invalid_api_key"};
}

ApiError not_found(std::string message, std::string param, std::string code) {
  return {404, std::move(message), "not_found_error", std::move(param), std::move(code)};
}

ApiError model_not_found(const std::string& name) {
  return not_found("The model `" + name + "` does not exist.", "model", "model_not_found");
}

ApiError payload_too_large(std::string message) {
  return {413, std::move(message), "invalid_request_error", {}, "payload_too_large"};
}

ApiError rate_limited(std::string message) {
  return {429, std::move(message), "rate_limit_exceeded", {}, "rate_limit_exceeded"};
}

ApiError internal_error(std::string message) {
  return {500, std::move(message), "internal_server_error", {}, {}};
}

ApiError service_unavailable(std::string message) {
  return {503, std::move(message), "service_unavailable", {}, {}};
}

}  // namespace tp

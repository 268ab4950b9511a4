// OpenAI-style API errors: what the HTTP layer sends when a request cannot be served.
// Wire format (exactly OpenAI's):
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "temperature", "code": null}}
// param and code are JSON null when empty. ApiError is also thrown (as ApiException) by the request parsers
// so the server translates every failure at one edge: catch ApiException -> status + to_json().
#pragma once
#include <string>
#include <utility>

#include "common/error.h"

namespace tp {

struct ApiError {
  int status = 500;        // HTTP status code
  std::string message;     // human-readable; names the field and the offending value
  std::string type;        // OpenAI error type, e.g. "invalid_request_error"
  std::string param;       // the request field at fault; empty -> null
  std::string code;        // machine-readable code; empty -> null
  bool operator==(const ApiError&) const = default;
};

// The response body: {"error": {"message", "type", "param", "code"}}, compact JSON text.
std::string to_json(const ApiError& e);

// The error as an exception; an InputError so generic catch sites still print something readable.
struct ApiException : InputError {
  explicit ApiException(ApiError e) : InputError(e.message), error(std::move(e)) {}
  ApiError error;
};

// Constructors for the statuses the server sends. type follows OpenAI / vLLM usage.
// 400 invalid_request_error; param/code as given (code defaults to "invalid_value" when param is set).
ApiError bad_request(std::string message, std::string param = {}, std::string code = {});
ApiError unauthorized(std::string message = "Invalid API key");                     // 401 authentication_error
ApiError not_found(std::string message, std::string param = {}, std::string code = {});  // 404 not_found_error
// 404 "The model `name` does not exist.", param "model", code "model_not_found".
ApiError model_not_found(const std::string& name);
ApiError payload_too_large(std::string message);                                    // 413 invalid_request_error
ApiError rate_limited(std::string message);                                         // 429 rate_limit_exceeded
ApiError internal_error(std::string message);                                       // 500 internal_server_error
ApiError service_unavailable(std::string message);                                  // 503 service_unavailable

}  // namespace tp

// Typed errors. Thrown inside the library, translated at the edge (CLI: one line + non-zero exit;
// HTTP: status + OpenAI-style JSON). Every message names what was wrong and where.
#pragma once
#include <stdexcept>
#include <utility>
#include <string>

namespace tp {

// Base of every tpserve error.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Bad input from outside: a file, a config, a command line, a request.
struct InputError : Error {
  using Error::Error;
};

// Bad input in one named field of a request (an HTTP body, a Request): `field` is the parameter as the
// client named it ("max_tokens", "prompt[3]", "logit_bias"), `code` an OpenAI error code
// ("invalid_value", "context_length_exceeded"). The HTTP edge maps it to 400 without reading the message.
struct FieldError : InputError {
  FieldError(std::string field_name, const std::string& message, std::string error_code = "invalid_value")
      : InputError(message), field(std::move(field_name)), code(std::move(error_code)) {}
  std::string field;
  std::string code;
};

// A model file that is truncated, corrupt or unsupported. what() = "<file>: <field>: <reason>".
struct FormatError : InputError {
  FormatError(const std::string& file, const std::string& field, const std::string& reason)
      : InputError(file + ": " + field + ": " + reason) {}
};

// A config file with an unknown key, a wrong type or an out-of-range value.
// what() = "<file>: <key>: <reason>".
struct ConfigError : InputError {
  ConfigError(const std::string& file, const std::string& key, const std::string& reason)
      : InputError(file + ": " + key + ": " + reason) {}
};

// A command line that cannot be run.
struct UsageError : InputError {
  using InputError::InputError;
};

}  // namespace tp

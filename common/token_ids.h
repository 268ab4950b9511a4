// Token ids against a vocabulary: the one statement of the rule, id in [0, vocab).
#pragma once
#include <cstdint>
#include <span>
#include <string>

namespace tp {

// Throws FieldError(field = `what` + "[i]") for the first id outside [0, vocab):
// "prompt[3] is token id 50000, outside the vocabulary [0, 49152)". vocab <= 0: only ids < 0 are refused.
void check_token_ids(std::span<const int32_t> ids, int64_t vocab, const std::string& what);

}  // namespace tp

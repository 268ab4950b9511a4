#include "common/token_ids.h"

#include "common/error.h"

namespace tp {

void check_token_ids(std::span<const int32_t> ids, int64_t vocab, const std::string& what) {
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t t = ids[i];
    if (t >= 0 && (vocab <= 0 || t < vocab)) continue;
    const std::string at = what + "[" + std::to_string(i) + "]";
    throw FieldError(at, at + " is token id " + std::to_string(t) + ", outside the vocabulary [0, " +
                             (vocab > 0 ? std::to_string(vocab) : std::string("...")) + ")");
  }
}

}  // namespace tp

#include "common/unicode_bytes.h"

#include <array>

namespace tp {
namespace {

constexpr uint32_t kNumAlphabetCpts = 256 + 68;  // byte-level code points are < U+0144

struct ByteLevelTables {
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, kNumAlphabetCpts> cpt_to_byte{};  // -1: not in the alphabet

  ByteLevelTables() {
    cpt_to_byte.fill(-1);
    auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    uint32_t n_shifted = 0;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cpt = printable(b) ? static_cast<uint32_t>(b) : 256 + n_shifted++;
      append_utf8(byte_to_utf8[b], cpt);
      cpt_to_byte[cpt] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTables& tables() {
  static const ByteLevelTables t;
  return t;
}

bool is_cont(uint8_t b) { return (b & 0xC0) == 0x80; }

// Strict decode of one sequence at s[i]; returns its length, or 0 when ill-formed (or truncated).
size_t strict_seq_len(std::string_view s, size_t i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) return 1;
  size_t len = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  const auto b1 = static_cast<uint8_t>(s[i + 1]);
  if (b1 < lo || b1 > hi) return 0;
  for (size_t k = 2; k < len; ++k)
    if (!is_cont(static_cast<uint8_t>(s[i + k]))) return 0;
  return len;
}

}  // namespace

std::string_view byte_to_unicode(uint8_t b) { return tables().byte_to_utf8[b]; }

void append_byte_level(std::string& out, std::string_view bytes) {
  const auto& t = tables();
  for (char c : bytes) out += t.byte_to_utf8[static_cast<uint8_t>(c)];
}

std::string byte_level_to_bytes(std::string_view text) {
  const auto& t = tables();
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto b0 = static_cast<uint8_t>(text[i]);
    size_t len = strict_seq_len(text, i);
    if (len == 0) {  // not UTF-8: copy the byte through
      out += static_cast<char>(b0);
      ++i;
      continue;
    }
    uint32_t cpt = b0;
    if (len == 2) cpt = ((b0 & 0x1Fu) << 6) | (static_cast<uint8_t>(text[i + 1]) & 0x3Fu);
    if (len <= 2 && cpt < kNumAlphabetCpts && t.cpt_to_byte[cpt] >= 0) {
      out += static_cast<char>(t.cpt_to_byte[cpt]);
    } else {
      out.append(text.substr(i, len));
    }
    i += len;
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cpt) {
  if (cpt < 0x80) {
    out += static_cast<char>(cpt);
  } else if (cpt < 0x800) {
    out += static_cast<char>(0xC0 | (cpt >> 6));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  } else if (cpt < 0x10000) {
    out += static_cast<char>(0xE0 | (cpt >> 12));
    out += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | ((cpt >> 18) & 0x07));
    out += static_cast<char>(0x80 | ((cpt >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  }
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t len = strict_seq_len(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

void sanitize_like_llama(std::string_view s, std::string& out, std::string& out_for_regex) {
  out.clear();
  out_for_regex.clear();
  out.reserve(s.size() + 8);
  out_for_regex.reserve(s.size() + 8);
  auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t b0 = byte(i);
    uint32_t cpt = kReplacementChar;
    size_t len = 1;
    if (b0 < 0x80) {
      cpt = b0;
    } else if ((b0 & 0x40) == 0) {
      // stray continuation byte
    } else if ((b0 & 0x20) == 0) {
      if (i + 1 < s.size() && is_cont(byte(i + 1))) {
        cpt = ((b0 & 0x1Fu) << 6) | (byte(i + 1) & 0x3Fu);
        len = 2;
      }
    } else if ((b0 & 0x10) == 0) {
      if (i + 2 < s.size() && is_cont(byte(i + 1)) && is_cont(byte(i + 2))) {
        cpt = ((b0 & 0x0Fu) << 12) | ((byte(i + 1) & 0x3Fu) << 6) | (byte(i + 2) & 0x3Fu);
        len = 3;
      }
    } else if ((b0 & 0x08) == 0) {
      if (i + 3 < s.size() && is_cont(byte(i + 1)) && is_cont(byte(i + 2)) && is_cont(byte(i + 3))) {
        cpt = ((b0 & 0x07u) << 18) | ((byte(i + 1) & 0x3Fu) << 12) | ((byte(i + 2) & 0x3Fu) << 6) |
              (byte(i + 3) & 0x3Fu);
        len = 4;
      }
    }
    i += len;
    if (cpt > 0x10FFFF) cpt = kReplacementChar;
    append_utf8(out, cpt);
    append_utf8(out_for_regex, (cpt >= 0xD800 && cpt <= 0xDFFF) ? kReplacementChar : cpt);
  }
}

size_t utf8_complete_prefix_len(std::string_view s) {
  const size_t n = s.size();
  // Find the start of the last sequence: at most 3 continuation bytes back.
  size_t i = n;
  for (size_t k = 0; k < 4 && i > 0; ++k) {
    --i;
    const auto b = static_cast<uint8_t>(s[i]);
    if (!is_cont(b)) {
      size_t need = 0;
      uint8_t lo = 0x80, hi = 0xBF;
      if (b >= 0xC2 && b <= 0xDF) {
        need = 2;
      } else if (b >= 0xE0 && b <= 0xEF) {
        need = 3;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F;
      } else if (b >= 0xF0 && b <= 0xF4) {
        need = 4;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
      } else {
        return n;  // ASCII or a byte that can never start a sequence
      }
      const size_t have = n - i;
      if (have >= need) return n;  // complete (or ill-formed: nothing to wait for)
      if (have >= 2) {
        const auto b1 = static_cast<uint8_t>(s[i + 1]);
        if (b1 < lo || b1 > hi) return n;
      }
      return i;  // a proper prefix of a sequence that may still complete
    }
  }
  return n;
}

void append_utf8_replacing_invalid(std::string& out, std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t len = strict_seq_len(s, i);
    if (len == 0) {
      append_utf8(out, kReplacementChar);
      ++i;
    } else {
      out.append(s.substr(i, len));
      i += len;
    }
  }
}

}  // namespace tp

// UTF-8 utilities and the GPT-2 byte-level alphabet used by byte-level BPE tokenizers.
//
// Byte-level alphabet (GPT-2 `bytes_to_unicode`): every byte 0..255 maps to one printable code point —
// the printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') map to themselves, the other 68 bytes map to
// U+0100.. in byte order. Token texts of a byte-level vocabulary are strings over this alphabet.
//
// Lenient decoding follows llama.cpp (unicode.cpp) so that token ids match it on any input: a lead byte
// followed by enough continuation bytes is accepted without overlong / surrogate checks; any other byte
// becomes U+FFFD and decoding resumes at the next byte.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tp {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// UTF-8 of byte `b` in the byte-level alphabet (1 or 2 bytes).
std::string_view byte_to_unicode(uint8_t b);

// Appends the byte-level encoding of every byte of `bytes` to `out`.
void append_byte_level(std::string& out, std::string_view bytes);

// Maps a byte-level string back to bytes. Code points outside the alphabet are copied through as their
// UTF-8 (a vocabulary may hold such tokens; llama.cpp would print them as "[UNK_BYTE_..]").
std::string byte_level_to_bytes(std::string_view text);

// Appends the UTF-8 encoding of `cpt` (no validity checks; `cpt` <= 0x10FFFF, surrogates are encoded).
void append_utf8(std::string& out, uint32_t cpt);

// True when `s` is well-formed UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
bool is_valid_utf8(std::string_view s);

// Re-encodes `s` the way llama.cpp sees it: decoded leniently (see above), each code point re-encoded.
// `out` gets the bytes llama.cpp byte-encodes; `out_for_regex` is the same text with each code point that
// a strict UTF-8 regex engine rejects (surrogates) replaced by U+FFFD — same length, same character class
// ([^\s\p{L}\p{N}]), so byte offsets found in `out_for_regex` apply to `out`. Code points above U+10FFFF
// (which llama.cpp cannot re-encode) become U+FFFD in both.
void sanitize_like_llama(std::string_view s, std::string& out, std::string& out_for_regex);

// Length of the longest prefix of `s` that does not end inside a multi-byte sequence that could still be
// completed by more bytes. Bytes that can never become valid count as complete (they are errors now).
size_t utf8_complete_prefix_len(std::string_view s);

// Appends `s` to `out` with every ill-formed byte replaced by U+FFFD, so `out` stays valid UTF-8.
void append_utf8_replacing_invalid(std::string& out, std::string_view s);

}  // namespace tp

// The one ggml symbol llama.cpp's common/json.cpp needs (its JSON_ASSERT is GGML_ASSERT -> ggml_abort). We link
// no ggml, so this stands in for it: print the failed assertion and abort, as ggml does.
#include <cstdarg>
#include <cstdio>
#include <cstdlib>

extern "C" [[noreturn]] void ggml_abort(const char* file, int line, const char* fmt, ...) {
  std::fprintf(stderr, "%s:%d: ", file, line);
  va_list args;
  va_start(args, fmt);
  std::vfprintf(stderr, fmt, args);
  va_end(args);
  std::fputc('\n', stderr);
  std::abort();
}

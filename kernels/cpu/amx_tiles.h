// Private to kernels/cpu: the AMX tile configuration of our AMX kernels (paged_attention_amx.cpp,
// gemm_bf16_amx.cpp): palette 1, all eight tiles 16 rows × 64 bytes. The calling thread must hold the tile
// state (attention_has_amx() asks the kernel for it once) and releases the tiles (_tile_release) when done.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace tp::cpu::detail {

struct alignas(64) AmxTileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

__attribute__((target("amx-tile"))) inline void configure_amx_tiles() {
  AmxTileConfig cfg;
  for (int i = 0; i < 8; ++i) {
    cfg.colsb[i] = 64;
    cfg.rows[i] = 16;
  }
  // GCC 12's _tile_loadconfig tells the compiler it reads 8 bytes of the config, so the stores of the rest could be
  // dropped as dead (a small test program built with -O2 did: SIGILL at the next tile instruction): make them land.
  __asm__ __volatile__("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

}  // namespace tp::cpu::detail

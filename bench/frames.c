/* Atari-like frames for the storage benches (frames.h). */
#include "frames.h"

#include <stdlib.h>
#include <string.h>

#define SIDE CHIME__BENCH_FRAME_SIDE
#define H 210
#define W 160

static void rect(uint8_t *s, int y, int x, int h, int w, uint8_t v) {
  for (int r = y < 0 ? 0 : y; r < y + h && r < H; r++)
    for (int c = x < 0 ? 0 : x; c < x + w && c < W; c++)
      s[r * W + c] = v;
}

/* Screen k of a game: Pong for even games, Breakout for odd (a game is
 * 500 frames), the ball and paddles moving with k. */
static void render(uint8_t *s, uint32_t k) {
  uint32_t game = k / 500, t = k % 500;
  int bx = (int)((t * 3) % (2 * (W - 8))), by = (int)((t * 2) % (2 * 150));
  bx = bx < W - 8 ? bx : 2 * (W - 8) - bx;
  by = by < 150 ? by : 300 - by;
  if (game % 2 == 0) { /* Pong */
    memset(s, 72, (size_t)H * W);
    rect(s, 24, 0, 10, W, 236);                        /* top wall */
    rect(s, 194, 0, 16, W, 236);                       /* bottom wall */
    rect(s, 2, 30 + (int)(game % 7) * 6, 14, 12, 180); /* scores */
    rect(s, 2, 110, 14, 12, 180);
    rect(s, 34 + by / 2, 16, 16, 4, 148); /* left paddle */
    rect(s, 34 + (150 - by) / 2, 140, 16, 4, 148);
    rect(s, 34 + by, bx, 4, 2, 236); /* ball */
  } else {                           /* Breakout */
    memset(s, 0, (size_t)H * W);
    rect(s, 17, 0, 10, W, 142);
    for (int row = 0; row < 6; row++)
      for (int col = 0; col < 18; col++)
        if ((uint32_t)(row * 18 + col) * 7 % 100 > t / 6) /* bricks go */
          rect(s, 57 + row * 6, 8 + col * 8, 6, 8, (uint8_t)(60 + row * 30));
    rect(s, 189, 8 + bx * 3 / 4, 4, 16, 200); /* paddle */
    rect(s, 100 + by / 2, bx, 4, 2, 200);     /* ball */
  }
}

/* 210x160 to 84x84 by area (DQN's resize, on the grey screen). */
static void shrink(const uint8_t *s, uint8_t *f) {
  for (int y = 0; y < SIDE; y++)
    for (int x = 0; x < SIDE; x++) {
      int y0 = y * H / SIDE, y1 = (y + 1) * H / SIDE;
      int x0 = x * W / SIDE, x1 = (x + 1) * W / SIDE;
      unsigned sum = 0, n = 0;
      for (int r = y0; r < y1; r++)
        for (int c = x0; c < x1; c++, n++)
          sum += s[r * W + c];
      f[y * SIDE + x] = (uint8_t)(sum / n);
    }
}

void chime__bench_frames(uint8_t *frames, uint32_t n) {
  uint8_t *screen = malloc((size_t)H * W);
  if (screen == NULL)
    abort();
  for (uint32_t k = 0; k < n; k++) {
    render(screen, k);
    shrink(screen, frames + (size_t)k * CHIME__BENCH_FRAME);
  }
  free(screen);
}

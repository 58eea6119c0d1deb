/* chime-bench's Atari-like frames (bench/storage.c, bench/zwriter.c): 84x84
 * u8, rendered here, not read from the Arcade Learning Environment:
 * Pong- and Breakout-like 210x160 screens (paddles, a ball, a score bar,
 * rows of bricks that go as the ball hits them; a game is 500 frames),
 * grey, and shrunk to 84x84 as DQN's preprocessing does. They compress
 * about as real Atari frames do (design.md: 27-47x a frame at zstd level
 * 3), not identically. */
#ifndef CHIME_BENCH_FRAMES_H
#define CHIME_BENCH_FRAMES_H

#include <stdint.h>

#define CHIME__BENCH_FRAME_SIDE 84
#define CHIME__BENCH_FRAME (CHIME__BENCH_FRAME_SIDE * CHIME__BENCH_FRAME_SIDE)

/* Frames 0..n-1, each CHIME__BENCH_FRAME bytes, into frames. */
void chime__bench_frames(uint8_t *frames, uint32_t n);

#endif

"""CartPole-v1, the classic cart-pole dynamics of Barto, Sutton and
Anderson (1983) as gym / gymnasium's CartPole-v1 has them, for n
environments at once in numpy arrays, so that the example needs no gym.

The same constants, Euler integration, start state (each of the four
variables uniform in [-0.05, 0.05]), termination (|x| > 2.4 or |theta| >
12 degrees) and reward (1 for every step, the terminating one included);
the 500-step limit of v1's TimeLimit is a truncation, told apart from a
termination because a truncated state is not terminal for the learner's
bootstrapped target.
"""
import math

import numpy as np

GRAVITY = 9.8
MASSCART = 1.0
MASSPOLE = 0.1
TOTAL_MASS = MASSCART + MASSPOLE
LENGTH = 0.5  # half the pole's length
POLEMASS_LENGTH = MASSPOLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02  # seconds between state updates
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4
MAX_STEPS = 500  # CartPole-v1's TimeLimit
OBS = 4
ACTIONS = 2  # push left, push right
# CartPole-v1's reward threshold: solved at a mean return of 475 over 100
# consecutive episodes.
SOLVED = 475.0


class CartPole:
    """n independent CartPole-v1 environments. state: float64 [n, 4] (x,
    x_dot, theta, theta_dot); obs() is that as float32."""

    def __init__(self, n=1, seed=None):
        self.n = n
        self.rng = np.random.default_rng(seed)
        self.state = np.empty((n, OBS))
        self.steps = np.zeros(n, np.int64)
        self.reset(np.ones(n, bool))

    def obs(self):
        return self.state.astype(np.float32)

    def reset(self, which):
        """Starts the environments where `which` is true afresh."""
        k = int(np.count_nonzero(which))
        if k:
            self.state[which] = self.rng.uniform(-0.05, 0.05, (k, OBS))
            self.steps[which] = 0

    def step(self, action):
        """Applies one action per environment (0: push left, 1: push right).
        Returns (reward, terminated, truncated) arrays; the caller reads the
        new observation with obs() and resets the finished ones."""
        s = self.state
        x, x_dot, theta, theta_dot = s[:, 0], s[:, 1], s[:, 2], s[:, 3]
        force = np.where(np.asarray(action) == 1, FORCE_MAG, -FORCE_MAG)
        costheta = np.cos(theta)
        sintheta = np.sin(theta)
        temp = (force + POLEMASS_LENGTH * theta_dot**2 * sintheta) / TOTAL_MASS
        thetaacc = (GRAVITY * sintheta - costheta * temp) / (
            LENGTH * (4.0 / 3.0 - MASSPOLE * costheta**2 / TOTAL_MASS))
        xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
        # Euler, in gym's order: positions from the old velocities.
        self.state = np.stack([x + TAU * x_dot, x_dot + TAU * xacc,
                               theta + TAU * theta_dot,
                               theta_dot + TAU * thetaacc], axis=1)
        self.steps += 1
        x, theta = self.state[:, 0], self.state[:, 2]
        terminated = (np.abs(x) > X_THRESHOLD) | (np.abs(theta) >
                                                   THETA_THRESHOLD)
        truncated = ~terminated & (self.steps >= MAX_STEPS)
        return np.ones(self.n, np.float32), terminated, truncated

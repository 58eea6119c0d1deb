"""A DQN actor: steps CartPole environments with an epsilon-greedy policy
whose Q-network weights it reads in place from chime's weights table (as
torch tensors over the ring), and inserts its transitions into the replay
table with a chime writer.

Started by dqn.py (multiprocessing, spawn); `run` is the process's body.
"""
import collections
import os
import time

import numpy as np
import torch

import chime
import qnet
from cartpole import ACTIONS, CartPole

TRANSITIONS = "transitions"
WEIGHTS = "weights"
TRANSITION_SPEC = ("obs:f32[4], action:i64[], reward:f32[], "
                   "next_obs:f32[4], discount:f32[]")


class Weights:
    """The newest weights the learner published, read in place.

    The weights table holds one item (capacity 1, lifo sampler, a new
    publication evicts the old one), and this actor's stream of it has two
    slots: one batch leased here, whose arrays the policy uses as they lie
    in the ring (torch.from_dlpack: tensors over the server's mapping in
    shm mode, no copy), and one the server filled ahead. That one was
    sampled when the previous batch was taken, so refresh() takes it and
    then the next: the server fills the slot the first gave back with the
    table's item as it is now."""

    def __init__(self, client, timeout):
        self.stream = client.stream(WEIGHTS, batch_size=1, slots=2,
                                    timeout=timeout)
        self.timeout = timeout
        self.params = None
        self.version = -1
        self.max_priority = 1.0
        self.refresh(wait=True)

    def refresh(self, wait=False):
        # Every view of the held batch goes first: a batch whose arrays
        # or tensors are alive keeps its slot, and with two slots the
        # stream then has none to lend.
        self.params = None
        try:
            self.stream.next(timeout=0)  # filled ahead: stale
        except chime.TimeoutError:
            pass
        b = self.stream.next(timeout=self.timeout if wait else 1.0)
        self.version = int(b["version"][0])
        self.max_priority = float(b["max_priority"][0])
        self.params = {k: torch.from_dlpack(b[k][0]) for k in b.keys()
                       if k not in ("version", "max_priority")}

    def close(self):
        self.params = None
        self.stream.close()


class NStep:
    """Turns each environment's steps into n-step transitions: (obs,
    action, reward = the discounted sum of the next k <= n rewards,
    next_obs = the observation k steps on, discount = gamma^k, or 0 when
    the episode terminated within them). The learner's target is then
    reward + discount x max Q(next_obs): a failure reaches the states that
    led to it n times as fast as with one-step transitions. A truncated
    episode (v1's 500-step limit) bootstraps from its last observation."""

    def __init__(self, n_envs, n, gamma):
        self.n, self.gamma = n, gamma
        self.held = [collections.deque() for _ in range(n_envs)]
        self.rows = {k: [] for k in ("obs", "action", "reward", "next_obs",
                                     "discount")}

    def _emit(self, q, nxt, terminated):
        o, a, _ = q[0]
        ret = 0.0
        for i, (_, _, r) in enumerate(q):
            ret += self.gamma**i * r
        rows = self.rows
        rows["obs"].append(o)
        rows["action"].append(a)
        rows["reward"].append(ret)
        rows["next_obs"].append(nxt)
        rows["discount"].append(0.0 if terminated else self.gamma**len(q))
        q.popleft()

    def add(self, obs, action, reward, nxt, terminated, truncated):
        """One step of every environment (arrays over them)."""
        for e, q in enumerate(self.held):
            q.append((obs[e], int(action[e]), float(reward[e])))
            if terminated[e] or truncated[e]:
                while q:
                    self._emit(q, nxt[e], terminated[e])
            elif len(q) == self.n:
                self._emit(q, nxt[e], False)

    def finish(self, nxt):
        """The steps still held, as shorter transitions that bootstrap from
        nxt (the observation now), as a truncated episode's do: so every
        env step makes one transition."""
        for e, q in enumerate(self.held):
            while q:
                self._emit(q, nxt[e], False)

    def __len__(self):
        return len(self.rows["obs"])

    def take(self):
        """The transitions made so far, as arrays for Writer.extend."""
        out = {k: np.array(v) for k, v in self.rows.items()}
        for v in self.rows.values():
            v.clear()
        return out


def epsilon(step, args):
    """Linear decay from eps_start to eps_end over eps_steps env steps (all
    actors' steps together, estimated from this actor's)."""
    frac = min(1.0, step * args["actors"] / args["eps_steps"])
    return args["eps_start"] + frac * (args["eps_end"] - args["eps_start"])


def run(actor_id, address, args, stop, results):
    """One actor process: args is a dict of dqn.py's options; stop an Event
    the learner sets; results a Queue that receives ("episode", actor_id,
    return, length, steps so far) per finished episode and ("done",
    actor_id, steps, seconds) at the end."""
    torch.set_num_threads(args["threads"])
    rng = np.random.default_rng([args["seed"], actor_id])
    n = args["envs"]
    env = CartPole(n, seed=[args["seed"], actor_id, 1])
    budget = args["env_steps"] // args["actors"] if args["env_steps"] else 0
    learner = os.getppid()
    nstep = NStep(n, args["n_step"], args["gamma"])
    steps = 0
    returns = np.zeros(n)
    t0 = time.monotonic()
    with chime.Client(address) as client:
        weights = Weights(client, timeout=args["open_timeout"])
        with client.writer(TRANSITIONS) as writer:

            def insert():
                # New transitions get the largest priority the learner has
                # set (it publishes it with the weights), so each is likely
                # to be sampled at least once (Schaul et al.).
                rows = nstep.take()
                writer.extend(rows, priorities=np.full(
                    len(rows["obs"]), weights.max_priority))

            obs = env.obs()
            while not stop.is_set() and (not budget or steps < budget):
                if rng.random() < epsilon(steps, args):
                    action = rng.integers(0, ACTIONS, n)
                else:
                    q = qnet.forward(weights.params, torch.from_numpy(obs))
                    action = q.argmax(dim=1).numpy()
                reward, terminated, truncated = env.step(action)
                nxt = env.obs()
                nstep.add(obs, action, reward, nxt, terminated, truncated)
                steps += n
                returns += reward
                done = terminated | truncated
                if done.any():
                    for i in np.flatnonzero(done):
                        results.put(("episode", actor_id, float(returns[i]),
                                     int(env.steps[i]), steps))
                    returns[done] = 0.0
                    env.reset(done)
                    nxt = env.obs()
                obs = nxt
                if len(nstep) >= args["insert_chunk"]:
                    insert()
                if steps % args["weights_every"] < n:
                    if os.getppid() != learner:
                        break  # the learner is gone (killed): so is the run
                    weights.refresh()
            nstep.finish(obs)
            if len(nstep):
                insert()
        weights.close()
    results.put(("done", actor_id, steps, time.monotonic() - t0))

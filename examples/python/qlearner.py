"""What learner_torch.py and learner_cuda.py share: their arguments, the
actor processes they start, the Q-network and one Q-learning update. Each
learner keeps what differs: where batches land (the ring or a device
buffer) and when it reads the loss back."""
import argparse
import contextlib
import pathlib
import subprocess
import sys

import torch

from common import ACTIONS, OBS, add_server_args

HERE = pathlib.Path(__file__).resolve().parent


def parser(doc):
    """The learners' command line: the server, the actors, the updates."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    add_server_args(ap)
    ap.add_argument("--actors", type=int, default=1)
    ap.add_argument("--actor-steps", type=int, default=1000000)
    ap.add_argument("--updates", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--mode", default="auto", choices=("auto", "shm",
                                                       "stream"))
    ap.add_argument("--gamma", type=float, default=0.9)
    ap.add_argument("--log-every", type=int, default=100)
    return ap


@contextlib.contextmanager
def actors(args):
    """--actors processes of actor.py on the learner's server (start the
    server first, so that they find it), stopped on the way out."""
    argv = [sys.executable, str(HERE / "actor.py"), "--steps",
            str(args.actor_steps)]
    if args.server:
        argv += ["--server", args.server]
    else:
        argv += ["--name", args.name]
        if args.run_dir:
            argv += ["--run-dir", args.run_dir]
    procs = [subprocess.Popen(argv + ["--seed", str(i)],
                              stdout=subprocess.DEVNULL)
             for i in range(args.actors)]
    try:
        yield procs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()


class QLearner:
    """A small Q-network, its target network (synced every `sync`
    updates) and Adam, on `device`."""

    def __init__(self, gamma, device=None, sync=100):
        torch.manual_seed(0)
        self.gamma, self.sync, self.updates = gamma, sync, 0
        self.q, self.target = self._net(device), self._net(device)
        self.target.load_state_dict(self.q.state_dict())
        self.opt = torch.optim.Adam(self.q.parameters(), lr=1e-3)

    @staticmethod
    def _net(device):
        return torch.nn.Sequential(
            torch.nn.Linear(OBS, 64), torch.nn.ReLU(),
            torch.nn.Linear(64, ACTIONS)).to(device)

    def update(self, b):
        """One-step Q-learning on batch b, its leaves read as tensors with
        no copy (torch.from_dlpack: over the ring in host memory, over the
        device buffer on a device stream, where torch's current stream
        waits for the batch's copy). Returns the loss, detached: read it
        with .item() (on a GPU that waits for the step). The tensors are
        gone when this returns, so b can be released."""
        obs = torch.from_dlpack(b["obs"])
        nxt = torch.from_dlpack(b["next_obs"])
        act = torch.from_dlpack(b["action"])
        rew = torch.from_dlpack(b["reward"])
        done = torch.from_dlpack(b["done"])
        with torch.no_grad():
            y = rew + self.gamma * (1 - done) * \
                self.target(nxt).max(dim=1).values
        pred = self.q(obs).gather(1, act.long().unsqueeze(1)).squeeze(1)
        loss = torch.nn.functional.mse_loss(pred, y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.updates += 1
        if self.updates % self.sync == 0:
            self.target.load_state_dict(self.q.state_dict())
        return loss.detach()

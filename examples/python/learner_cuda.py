#!/usr/bin/env python3
"""A learner on a GPU: the same Q-network as learner_torch.py, trained on
batches chime copies to the GPU ahead of it (a device stream:
docs/python.md, Device streams), so no copy sits on the training step.

    PYTHONPATH=build/python python3 examples/python/learner_cuda.py \\
        --actors 2 --updates 500 --device cuda:0

torch.from_dlpack(b["obs"]) is a CUDA tensor over the batch's device
buffer, no copy: torch hands its current stream to __dlpack__, and chime
makes that stream wait for the batch's copy (no host wait, no device-wide
synchronisation). When the batch is released (here at the end of each
step, the tensors gone), chime records the release point on that stream,
so the buffer is refilled only after the step's kernels that read it.
--prefetch batches are copied ahead. Needs torch with CUDA and a GPU; not
run in CI (no GPU there), and not yet run on a GPU at all: see
docs/pinning.md. Prints a JSON line at the end like learner_torch.py.
"""
import json
import sys
import time

import torch

from common import TABLE, connect
from qlearner import QLearner, actors, parser


def main():
    ap = parser(__doc__)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--prefetch", type=int, default=2)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("learner_cuda.py: torch sees no CUDA device", file=sys.stderr)
        return 77
    dev = torch.device(args.device)
    learner = QLearner(args.gamma, device=dev)
    c = connect(args)
    losses = []
    try:
        with actors(args), c.stream(TABLE, batch_size=args.batch_size,
                                    mode=args.mode, device=dev,
                                    prefetch=args.prefetch,
                                    timeout=30.0) as s:
            t0 = time.monotonic()
            for step, b in enumerate(s):
                # CUDA tensors over the batch's device buffer; the current
                # stream waits for the copy.
                loss = learner.update(b)
                b.release()  # the release point goes on torch's stream
                if (step + 1) % args.log_every == 0:
                    # .item() waits for the step: only now and then.
                    losses.append(loss.item())
                    print(f"update {step + 1}: loss {losses[-1]:.4f} "
                          f"({s.mode}, {dev})", file=sys.stderr, flush=True)
                if step + 1 == args.updates:
                    break
            torch.cuda.synchronize(dev)
            dt = time.monotonic() - t0
            mode, stats = s.mode, s.stats()
        print(json.dumps({
            "updates": args.updates, "mode": mode, "device": str(dev),
            "loss_first": losses[0] if losses else None,
            "loss_last": losses[-1] if losses else None,
            "samples_per_s": round(args.updates * args.batch_size / dt),
            "device_copies": stats["device_copies"],
            "device_max_slots_held": stats["device_max_slots_held"]}),
            flush=True)
    finally:
        c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

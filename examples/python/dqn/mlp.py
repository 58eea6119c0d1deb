"""A small multi-layer perceptron in numpy, written out by hand (forward,
backward, Adam), for the DQN example's Q-network: no torch needed.

Parameters are a dict of float32 arrays named w1, b1, w2, b2, ... in
layer order; the same names are the leaves of the weights table, so a
batch of that table (read in place from the ring) is a parameter dict as
it stands.
"""
import numpy as np


def dot(a, b):
    """a @ b. Debian's numpy links the reference BLAS (libblas3), whose
    sgemm took 2.4x as long as numpy's own einsum loop on these sizes (64 x
    64 x 64: 352 against 149 us on the loaded dev VM); with OpenBLAS
    installed, `a @ b` would be the faster one."""
    return np.einsum("ij,jk->ik", a, b)


def init(sizes, rng):
    """Layers sizes[0] -> sizes[1] -> ... (ReLU between, linear output),
    initialised as torch.nn.Linear is: uniform in +-1/sqrt(fan_in)."""
    params = {}
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:]), 1):
        bound = 1.0 / np.sqrt(fan_in)
        params[f"w{i}"] = rng.uniform(-bound, bound,
                                      (fan_in, fan_out)).astype(np.float32)
        params[f"b{i}"] = rng.uniform(-bound, bound,
                                      fan_out).astype(np.float32)
    return params


def spec(sizes):
    """The weights table's leaves for these sizes, as a chime spec string."""
    leaves = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:]), 1):
        leaves += [f"w{i}:f32[{fan_in},{fan_out}]", f"b{i}:f32[{fan_out}]"]
    return ", ".join(leaves)


def layers(params):
    return len(params) // 2


def forward(params, x):
    """Q-values [n, actions] of x [n, inputs]."""
    h = x
    n = layers(params)
    for i in range(1, n + 1):
        h = dot(h, params[f"w{i}"]) + params[f"b{i}"]
        if i < n:
            h = np.maximum(h, 0.0)
    return h


def forward_cached(params, x):
    """forward() that also returns what backward() needs: each layer's
    input (the ReLU masks follow from them)."""
    inputs = []
    h = x
    n = layers(params)
    for i in range(1, n + 1):
        inputs.append(h)
        h = dot(h, params[f"w{i}"]) + params[f"b{i}"]
        if i < n:
            h = np.maximum(h, 0.0)
    return h, inputs


def backward(params, inputs, dout):
    """Gradients of the loss with respect to every parameter, given dout,
    the loss's gradient with respect to forward's output."""
    grads = {}
    g = dout
    for i in range(layers(params), 0, -1):
        h = inputs[i - 1]
        grads[f"w{i}"] = dot(h.T, g)
        grads[f"b{i}"] = g.sum(axis=0)
        if i > 1:
            # h is the ReLU output of the layer below: where it is 0 the
            # ReLU was off and passes no gradient.
            g = dot(g, params[f"w{i}"].T) * (h > 0)
    return grads


class Adam:
    """Adam (Kingma and Ba) with the usual defaults, updating the
    parameter arrays in place."""

    def __init__(self, params, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8):
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, params, grads):
        self.t += 1
        b1, b2 = self.beta1, self.beta2
        # The bias corrections folded into the step size.
        lr = self.lr * np.sqrt(1 - b2**self.t) / (1 - b1**self.t)
        for k, g in grads.items():
            m, v = self.m[k], self.v[k]
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * g * g
            params[k] -= (lr * m / (np.sqrt(v) + self.eps)).astype(np.float32)


def clip_by_global_norm(grads, max_norm):
    """Scales every gradient down so that their joint norm is at most
    max_norm (a bad batch cannot throw the network far)."""
    norm = np.sqrt(sum(float(np.vdot(g, g)) for g in grads.values()))
    if norm > max_norm:
        for g in grads.values():
            g *= max_norm / norm
    return norm

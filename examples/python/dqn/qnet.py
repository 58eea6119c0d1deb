"""The DQN example's Q-network, in torch, and its weights as chime leaves.

The learner trains a torch.nn.Sequential of Linear layers with ReLU
between them. It publishes the network's state_dict through the weights
table, one leaf per entry under the same name ("0.weight": f32[64,4],
"0.bias": f32[64], ...), and an actor runs the same layers with the
tensors of the batch it holds (torch.from_dlpack over chime's ring) as
their parameters: the weights are never copied out of the ring.
"""
import torch
import torch.nn.functional as F


def network(sizes):
    """Layers sizes[0] -> sizes[1] -> ..., ReLU between, linear output
    (torch.nn.Linear's own initialisation: seed torch first)."""
    layers = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        layers += [torch.nn.Linear(fan_in, fan_out), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def spec(net):
    """The weights table's leaves for net, as a chime spec string."""
    return ", ".join(f"{name}:f32[{','.join(map(str, t.shape))}]"
                     for name, t in net.state_dict().items())


def leaves(net):
    """net's parameters as numpy arrays (views of the tensors) for
    Writer.append, which packs them into its message before it returns."""
    return {name: t.numpy() for name, t in net.state_dict().items()}


@torch.no_grad()
def forward(params, x):
    """Q-values [n, actions] of x [n, inputs] through network()'s layers
    with `params` (state_dict names -> tensors) as their parameters.
    Written out with F.linear rather than through
    torch.nn.utils.stateless.functional_call, which took 14x as long for
    one observation (1.0 ms against 73 us) on the dev VM."""
    layers = sorted({int(name.split(".")[0]) for name in params})
    h = x
    for i, layer in enumerate(layers):
        h = F.linear(h, params[f"{layer}.weight"], params[f"{layer}.bias"])
        if i < len(layers) - 1:
            h = F.relu(h)
    return h

"""What examples/python/actor.py and the learners share: the table
they use and how they reach the server."""
import chime

TABLE = "transitions"
OBS = 8       # observation size
ACTIONS = 4   # discrete actions
SPEC = (f"obs:f32[{OBS}], action:i64[], reward:f32[], "
        f"next_obs:f32[{OBS}], done:f32[]")
CONFIG = {"tables": [{"name": TABLE, "spec": SPEC, "capacity": 100000,
                      "sampler": "uniform", "min_size": 1024}]}


def add_server_args(ap):
    ap.add_argument("--server", help="address of a running chimed "
                    "(host:port or unix:/path; its config needs the "
                    f"'{TABLE}' table, as in CONFIG here)")
    ap.add_argument("--name", default="chime-example",
                    help="else: chime.ensure_server(NAME), one chimed per "
                    "node started by whichever process comes first")
    ap.add_argument("--run-dir", help="ensure_server's run_dir")


def connect(args, mode="auto"):
    if args.server:
        return chime.Client(args.server)
    return chime.ensure_server(args.name, config=CONFIG, mode=mode,
                               run_dir=args.run_dir)

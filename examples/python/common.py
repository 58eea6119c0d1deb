"""What examples/python/actor.py and the learners share: the table
they use and how they reach the server; and how the loops that start
processes of their own (async_ppo.py, grpo.py) reach theirs."""
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


def add_loop_args(ap, name):
    """--server, --name and --run-dir of a loop that brings its own table
    (its config printed by --print-config)."""
    ap.add_argument("--server", help="use this chimed (its config must "
                    "have the table: --print-config); else "
                    "chime.ensure_server(--name)")
    ap.add_argument("--name", default=name)
    ap.add_argument("--run-dir", default=None)


def loop_client(args, config):
    """(client, address) of --server, or of the chimed ensure_server
    starts with config: the address is what the loop's own processes
    connect to."""
    if args.server:
        return chime.Client(args.server), args.server
    client = chime.ensure_server(args.name, config=config,
                                 run_dir=args.run_dir)
    return client, chime.server_state(args.name,
                                      run_dir=args.run_dir)["address"]

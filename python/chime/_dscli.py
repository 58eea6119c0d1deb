"""`chimectl import` and `chimectl export` (docs/tools.md): chimectl runs
``python3 -m chime.dataset`` with its arguments, since HDF5 goes through
h5py. Exit status 0, 1 for a failure (the message on stderr), 2 for bad
usage."""
import argparse
import sys

USAGE = """chimectl [CONN] import FILE TABLE TARGET [--map LEAF=NAME]...
                 [--priorities NAME] [--partial] [--format hdf5|npz]
       chimectl [CONN] export TABLE FILE TARGET [--format hdf5|npz]
CONN: --token-file PATH --tls-ca PATH --tls-cert PATH --tls-key PATH
FILE: HDF5 (Minari's episode groups or D4RL's flat datasets) or .npz."""


def _parser():
    p = argparse.ArgumentParser(prog="chimectl", usage=USAGE, add_help=True)
    p.add_argument("cmd", choices=["import", "export"])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("target")
    p.add_argument("--map", action="append", default=[], metavar="LEAF=NAME")
    p.add_argument("--priorities", metavar="NAME")
    p.add_argument("--partial", action="store_true")
    p.add_argument("--format", choices=["hdf5", "npz"])
    for opt in ("--token-file", "--tls-ca", "--tls-cert", "--tls-key"):
        p.add_argument(opt)
    p.add_argument("--timeout", type=float, default=60.0)
    return p


def _client(args):
    import chime
    token = None
    if args.token_file:
        with open(args.token_file) as f:
            token = f.read().strip()
    return chime.Client(args.target, timeout=args.timeout, token=token,
                        tls_ca=args.tls_ca, tls_cert=args.tls_cert,
                        tls_key=args.tls_key)


def _mapping(items):
    out = {}
    for m in items:
        leaf, sep, name = m.partition("=")
        if not sep or not leaf or not name:
            raise ValueError(f"--map {m}: say LEAF=NAME")
        out[leaf] = name
    return out


def main(argv):
    from . import dataset
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        c = _client(args)
        if args.cmd == "import":
            r = dataset.import_file(c, args.a, args.b, _mapping(args.map),
                                    args.priorities, args.partial, args.format)
            print(f"imported {r['rows']} rows ({r['episodes']} episodes) "
                  f"from {args.a} into '{args.b}' over {r['shards']} "
                  f"shard(s)")
        else:
            n = dataset.export_file(c, args.a, args.b, args.format)
            print(f"exported {n} items of '{args.a}' to {args.b}")
        return 0
    except (ImportError, ValueError, OSError) as e:
        print(f"chimectl {args.cmd}: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # chime's errors: say them, not a traceback
        print(f"chimectl {args.cmd}: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 1

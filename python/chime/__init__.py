"""chime: replay batches from chimed as zero-copy numpy views.

The client (Client, Writer, Stream, Batch, View and the exceptions) is the C
extension `chime._chime` over libchime; `ensure_server` starts or finds one
chimed per node for the ranks of a job (chime/_server.py). See
docs/python.md.
"""
try:
    from ._chime import *  # noqa: F401,F403
    from ._chime import __version__  # noqa: F401
except ModuleNotFoundError as e:
    if e.name != __name__ + "._chime":
        raise
    raise ImportError(
        f"{__file__}: chime's extension is not here (python/chime in the "
        f"source tree has only its Python half); import chime from a build "
        f"tree: PYTHONPATH=build/python") from None
from ._server import ensure_server, server_state, stop_server  # noqa: F401

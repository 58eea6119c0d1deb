"""Pacing producers (docs/replay.md, "Pacing producers") with real chimed
processes: examples/python/async_ppo.py's 8 writer processes outrun a
learner that spends 20 ms on each batch. Discard-only (a fifo table with
max_staleness, today's mode) the table fills ahead of the learner and
many samples leave as stale (removed_stale > 0, its count printed); with
--pace (pace_batch = the samples the learner draws per version) the
writers wait in the server instead, no sample is removed as stale, the
learner still gets every batch within max_staleness, and the producers'
idle time is reported (pace_wait_ns, paced_inserts in Stats)."""
import pathlib
import shutil
import tempfile

import chime
import conftest

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python"
TIMEOUT_S = 240
STALENESS = 4


def run_example(name, *extra):
    run_dir = tempfile.mkdtemp(prefix="chime-pace-")
    try:
        out = conftest.run_example(
            [EXAMPLE / "async_ppo.py", "--run-dir", run_dir, "--name", name,
             "--writers", "8", "--batches", "300", "--update-every", "3",
             "--max-staleness", str(STALENESS), "--train-ms", "20",
             "--flush-every", "8", *extra], TIMEOUT_S)
        assert chime.server_state(name, run_dir=run_dir) is None
        return out
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def test_pacing_removes_nothing_as_stale():
    base = run_example("chime-pace-base", "--sampler", "fifo")
    paced = run_example("chime-pace-on", "--pace")
    keys = ("rollouts_written", "inserts", "removed_stale", "pace_wait_s",
            "paced_inserts", "worst_lag_at_receipt", "seconds")
    print("discard-only:", {k: base[k] for k in keys})
    print("paced:       ", {k: paced[k] for k in keys})
    for out in (base, paced):
        assert out["violations"] == 0
        assert out["worst_lag_at_receipt"] <= STALENESS
        assert out["samples"] == 300 * 32
    # the writers outran the learner: without pacing, samples went stale
    assert base["removed_stale"] > 0
    assert base["paced_inserts"] == 0 and base["pace_wait_s"] == 0
    assert base["pace_batch"] == 0 and paced["pace_batch"] == 3 * 32
    # paced: none did, and the writers waited for the learner instead
    assert paced["removed_stale"] == 0
    assert paced["paced_inserts"] > 0
    assert paced["pace_wait_s"] > 0

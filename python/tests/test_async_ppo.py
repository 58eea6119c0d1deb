"""examples/python/async_ppo.py: 8 writer processes racing the learner's
version bumps, and no sample more than max_staleness versions behind the
learner's version at receipt ever reaching it (b.info["version"]); the
gate did remove items (removed_stale), so the check was not vacuous."""
import pathlib
import shutil
import tempfile

import chime
import conftest

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python"
TIMEOUT_S = 240


def test_async_ppo_never_too_stale():
    run_dir = tempfile.mkdtemp(prefix="chime-ppo-")
    try:
        out = conftest.run_example(
            [EXAMPLE / "async_ppo.py", "--run-dir", run_dir, "--writers", "8",
             "--batches", "300", "--update-every", "3", "--max-staleness",
             "2"], TIMEOUT_S)
        assert out["violations"] == 0
        assert out["worst_lag_at_receipt"] <= 2
        assert out["samples"] == 300 * 32
        assert out["learner_version"] == 1 + 300 // 3
        # the writers raced the bumps: some of what they sent arrived
        # too far behind and never went in, or left when a bump came
        assert out["removed_stale"] > 0
        assert out["rollouts_written"] >= out["inserts"] > 0
        assert chime.server_state("chime-async-ppo", run_dir=run_dir) is None
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)

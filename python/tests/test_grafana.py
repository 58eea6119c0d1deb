"""deploy/grafana/chime.json against a real chimed: every query names
metrics that chimed exports (the list read from its /metrics, with a table
written, a stream open and a checkpoint taken, so that every family has
samples), rate() and increase() take counters only, every selector filters
on the dashboard's shard variable, tables and streams are summed by table
(the shard label keeps many shards' series apart), and the dashboard's
variables and panels are well formed."""
import json
import re
import urllib.request

import numpy as np
import pytest

import conftest

DASHBOARD = conftest.ROOT / "deploy" / "grafana" / "chime.json"
METRIC = re.compile(r"\bchime_[a-z0-9_]+")
COUNTER_FN = re.compile(r"\b(?:rate|irate|increase)\(\s*(chime_[a-z0-9_]+)")


def panels(d):
    for p in d["panels"]:
        yield p
        yield from p.get("panels", [])  # a collapsed row holds its own


def exprs(d):
    for p in panels(d):
        for t in p.get("targets", []):
            yield p["title"], t["expr"]


@pytest.fixture(scope="module")
def dashboard():
    return json.loads(DASHBOARD.read_text())


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{metric name: type} from a live chimed's /metrics."""
    import chime
    tmp = tmp_path_factory.mktemp("grafana")
    tables = [{"name": "t", "spec": "x:u64[]", "capacity": 100,
               "sampler": "uniform", "min_size": 1,
               "samples_per_insert": 1.0, "error_buffer": 100}]
    extra = {"checkpoint": {"dir": str(tmp / "ckpt")}}
    with conftest.run_chimed(tmp, tables, extra,
                             args=("--metrics", "127.0.0.1:0")) as (_, addr):
        lines = (tmp / "stdout").read_text().splitlines()
        metrics = [ln.split()[-1] for ln in lines
                   if ln.startswith("metrics on ")]
        assert metrics, "chimed did not say 'metrics on'"
        with chime.Client(addr, timeout=30) as c:
            with c.writer("t") as w:
                w.extend({"x": np.arange(10, dtype=np.uint64)})
            c.checkpoint()
            with c.stream("t", batch_size=2) as s:
                with s.next(timeout=10):
                    url = f"http://{metrics[0]}/metrics"
                    with urllib.request.urlopen(url, timeout=10) as r:
                        text = r.read().decode()
    types, sampled = {}, set()
    for ln in text.splitlines():
        if ln.startswith("# TYPE "):
            _, _, name, kind = ln.split()
            types[name] = kind
        elif ln and not ln.startswith("#"):
            sampled.add(re.match(r"[a-z_0-9]+", ln).group(0))
    # Every family has a sample here: a metric without one would be a
    # panel that stays empty on a working server.
    assert set(types) == sampled
    assert "chime_stream_bytes_total" in sampled
    assert "chime_checkpoint_age_seconds" in sampled
    return types


def test_every_expr_names_exported_metrics(dashboard, exported):
    seen = set()
    for title, expr in exprs(dashboard):
        names = METRIC.findall(expr)
        assert names, f"{title}: no chime metric in {expr!r}"
        for n in names:
            assert n in exported, f"{title}: {n} is not exported by chimed"
            seen.add(n)
        for n in COUNTER_FN.findall(expr):
            assert exported[n] == "counter", f"{title}: rate() of gauge {n}"
        for n in set(names) - set(COUNTER_FN.findall(expr)):
            if exported[n] == "counter" and "/" not in expr:
                pytest.fail(f"{title}: counter {n} shown raw, not as a rate")
    # The panels an operator looks at first (issue 24).
    for n in ("chime_table_inserts_total", "chime_table_samples_total",
              "chime_table_size", "chime_table_rate_insert_wait_seconds_total",
              "chime_table_rate_sample_wait_seconds_total",
              "chime_stream_bytes_total", "chime_ring_bytes",
              "chime_pinned_bytes", "chime_staged_insert_bytes"):
        assert n in seen, f"no panel shows {n}"


def test_selectors_filter_on_shard_and_sum_by_table(dashboard):
    for title, expr in exprs(dashboard):
        for m in METRIC.finditer(expr):
            rest = expr[m.end():]
            assert rest.startswith("{") and 'shard=~"$shard"' in \
                rest[:rest.index("}")], f"{title}: {m.group(0)} not by $shard"
            if m.group(0).startswith(("chime_table_", "chime_stream_")):
                assert 'table=~"$table"' in rest[:rest.index("}")], title
        if re.search(r"chime_(table|stream)_", expr) and \
                expr.startswith("sum by"):
            assert expr.startswith("sum by (table"), f"{title}: {expr}"


def test_variables_and_layout(dashboard, exported):
    assert dashboard["uid"] and dashboard["title"] == "chime"
    var = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert var["datasource"]["type"] == "datasource"
    assert var["datasource"]["query"] == "prometheus"
    for name in ("shard", "table"):
        v = var[name]
        assert v["includeAll"] and v["multi"] and v["allValue"] == ".*"
        q = v["query"]["query"]
        assert q.startswith("label_values(") and q.endswith(f", {name})")
        assert all(n in exported for n in METRIC.findall(q))
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids))
    for p in panels(dashboard):
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}", p["title"]
            assert p["description"], p["title"]

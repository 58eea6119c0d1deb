"""deploy/kubernetes: the manifests parsed and checked against chimed itself
(no cluster here): ports, probes, socket path, shard derivation, the flags
they name (chimed --help) and the config (a real chimed started with it)."""
import json
import os
import pathlib
import re
import signal
import subprocess
import time

import pytest
import yaml  # python3-yaml (scripts/setup)

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
CHIMED = pathlib.Path(os.environ.get(
    "CHIMED", ROOT / "build" / "src" / "server" / "chimed"))
START_TIMEOUT_S = 20


def docs(layout):
    out = []
    for path in sorted((DEPLOY / layout).glob("*.yaml")):
        for d in yaml.safe_load_all(path.read_text()):
            if d is not None:
                out.append(d)
    return out


def one(ds, kind, name=None):
    found = [d for d in ds if d["kind"] == kind and
             (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name}: {len(found)} documents"
    return found[0]


def port_of(addr):
    m = re.fullmatch(r"(?:\[[^]]*\]|[^:]*):(\d+)", addr)
    assert m, f"not host:port: {addr!r}"
    return int(m.group(1))


def container(pod_spec, name):
    found = [c for c in pod_spec["containers"] if c["name"] == name]
    assert len(found) == 1, name
    return found[0]


def mount_path(c, volume):
    paths = [m["mountPath"] for m in c.get("volumeMounts", [])
             if m["name"] == volume]
    assert len(paths) == 1, f"{c['name']} mounts {volume} {len(paths)} times"
    return paths[0]


def config_of(ds, pod_spec, c):
    """The chimed.json of the ConfigMap chimed's config volume names."""
    vol = [v for v in pod_spec["volumes"] if v["name"] == "config"][0]
    cm = one(ds, "ConfigMap", vol["configMap"]["name"])
    assert mount_path(c, "config") == "/etc/chime"
    return cm, json.loads(cm["data"]["chimed.json"])


def chimed_flags():
    if not os.access(CHIMED, os.X_OK):
        pytest.fail(f"{CHIMED} is not built (set CHIMED)")
    r = subprocess.run([str(CHIMED), "--help"], capture_output=True,
                       text=True, timeout=10)
    return set(re.findall(r"--[a-z][a-z-]*", r.stdout + r.stderr))


LAYOUTS = [("statefulset", "StatefulSet", "chime", "chime"),
           ("daemonset", "DaemonSet", "chime-node", "chime-local")]


@pytest.mark.parametrize("layout,kind,name,service", LAYOUTS)
def test_ports_probes_and_service(layout, kind, name, service):
    ds = docs(layout)
    for d in ds:
        assert d.get("apiVersion") and d["metadata"].get("name"), d
    workload = one(ds, kind, name)
    tmpl = workload["spec"]["template"]
    pod = tmpl["spec"]
    c = container(pod, "chimed")
    _, cfg = config_of(ds, pod, c)
    listen, metrics = port_of(cfg["listen"]), port_of(cfg["metrics"])
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"grpc": listen, "metrics": metrics}
    if pod.get("hostNetwork"):
        assert all(p["hostPort"] == p["containerPort"] for p in c["ports"])
    ann = tmpl["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true"
    assert int(ann["prometheus.io/port"]) == metrics
    assert ann["prometheus.io/path"] == "/metrics"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        p = c[probe]
        assert set(p) & {"httpGet", "tcpSocket", "exec"} == set(), probe
        assert p["grpc"]["port"] == listen, probe
        # The health service answers "" and the chime service's name.
        assert p["grpc"].get("service", "") in ("", "chime.v1.Chime")
    assert c["readinessProbe"]["grpc"]["service"] == "chime.v1.Chime"
    sec = {**pod["securityContext"], **c["securityContext"]}
    assert sec["runAsNonRoot"] is True and sec["runAsUser"] > 0
    assert sec["readOnlyRootFilesystem"] is True
    assert sec["allowPrivilegeEscalation"] is False
    assert c["resources"]["requests"]["memory"]
    svc = one(ds, "Service", service)
    labels = tmpl["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
    grpc_port = [p for p in svc["spec"]["ports"] if p["name"] == "grpc"][0]
    assert grpc_port["port"] == listen
    assert grpc_port["targetPort"] in (listen, "grpc")
    if layout == "statefulset":
        assert svc["spec"]["clusterIP"] == "None"
        assert workload["spec"]["serviceName"] == service
    else:
        assert svc["spec"]["internalTrafficPolicy"] == "Local"


def test_statefulset_checkpoints_match():
    ds = docs("statefulset")
    sts = one(ds, "StatefulSet", "chime")
    c = container(sts["spec"]["template"]["spec"], "chimed")
    _, cfg = config_of(ds, sts["spec"]["template"]["spec"], c)
    env = {e["name"]: e.get("value") for e in c["env"]}
    claims = [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]]
    assert claims == ["checkpoints"]
    assert cfg["checkpoint"]["dir"] == env["CHIME_CHECKPOINT_DIR"]
    assert mount_path(c, "checkpoints") == env["CHIME_CHECKPOINT_DIR"]
    assert env["CHIME_CONFIG"] == mount_path(c, "config") + "/chimed.json"
    assert "shard" not in cfg  # start.sh gives each pod its own


def run_start_sh(tmp, script, env, pod_name):
    """Runs start.sh with a chimed on PATH that prints its arguments."""
    fake = tmp / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "chimed").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (fake / "chimed").chmod(0o755)
    (tmp / "start.sh").write_text(script)
    r = subprocess.run(
        ["/bin/sh", str(tmp / "start.sh")], capture_output=True, text=True,
        timeout=10, env={**env, "POD_NAME": pod_name,
                         "PATH": f"{fake}:/usr/bin:/bin"})
    return r.returncode, r.stdout.split("\n")[:-1], r.stderr


def test_statefulset_shards_are_ordinal_plus_one(tmp_path):
    ds = docs("statefulset")
    sts = one(ds, "StatefulSet", "chime")
    pod = sts["spec"]["template"]["spec"]
    c = container(pod, "chimed")
    cm, _ = config_of(ds, pod, c)
    assert c["command"] == ["/bin/sh", "/etc/chime/start.sh"]
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    downward = [e for e in c["env"] if e["name"] == "POD_NAME"][0]
    assert downward["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    env["CHIME_CHECKPOINT_DIR"] = str(ckpt)
    n = sts["spec"]["replicas"]
    assert n >= 2
    shards = []
    for k in range(n):
        rc, argv, err = run_start_sh(tmp_path, cm["data"]["start.sh"], env,
                                     f"chime-{k}")
        assert rc == 0, err
        assert argv[:2] == ["--config", env["CHIME_CONFIG"]]
        assert argv[2] == "--shard" and "--restore" not in argv
        shards.append(int(argv[3]))
    assert shards == list(range(1, n + 1))
    # A checkpoint chimed never finished (no DONE) is not restored from.
    (ckpt / "ckpt-0000000000000001").mkdir()
    rc, argv, _ = run_start_sh(tmp_path, cm["data"]["start.sh"], env,
                               "chime-1")
    assert rc == 0 and "--restore" not in argv
    (ckpt / "ckpt-0000000000000001" / "DONE").write_text("0\n")
    rc, argv, _ = run_start_sh(tmp_path, cm["data"]["start.sh"], env,
                               "chime-1")
    assert rc == 0 and argv[-2:] == ["--restore", "latest"]
    assert argv[argv.index("--shard") + 1] == "2"
    rc, argv, err = run_start_sh(tmp_path, cm["data"]["start.sh"], env,
                                 "chime")
    assert rc == 2 and argv == [] and "no ordinal" in err


def test_daemonset_socket_is_shared_with_the_learner():
    ds = docs("daemonset")
    dset = one(ds, "DaemonSet", "chime-node")
    pod = dset["spec"]["template"]["spec"]
    c = container(pod, "chimed")
    _, cfg = config_of(ds, pod, c)
    sock = cfg["handoff_socket"]
    assert sock.startswith("/"), "a filesystem socket, not an abstract one"
    sock_dir = os.path.dirname(sock)
    assert mount_path(c, "socket-dir") == sock_dir
    host_dir = [v for v in pod["volumes"] if v["name"] == "socket-dir"][0]
    host_path = host_dir["hostPath"]["path"]
    # shm needs the same hostname (hostNetwork) and chimed seeing the
    # learner's pid (hostPID): README.md.
    assert pod["hostNetwork"] is True and pod["hostPID"] is True
    uid = pod["securityContext"]["runAsUser"]
    init = pod["initContainers"][0]
    assert mount_path(init, "socket-dir") == sock_dir
    assert f"chown {uid}:" in " ".join(init["command"])

    learner = one(ds, "Pod", "chime-learner")
    lspec = learner["spec"]
    lc = lspec["containers"][0]
    lvol = [v for v in lspec["volumes"]
            if v["name"] == "socket-dir"][0]["hostPath"]["path"]
    assert lvol == host_path
    assert mount_path(lc, "socket-dir") == sock_dir
    assert lspec["hostNetwork"] is True
    luid = lspec["securityContext"]["runAsUser"]
    assert luid == uid or luid in cfg.get("allowed_uids", [])
    target = lc["command"][lc["command"].index("--server") + 1]
    svc = one(ds, "Service", "chime-local")
    assert target.split(".")[0] == svc["metadata"]["name"]
    assert port_of(target) == svc["spec"]["ports"][0]["port"]


def test_flags_named_exist():
    flags = chimed_flags()
    assert {"--config", "--shard", "--restore"} <= flags, flags
    named = set()
    for layout, kind, name, _ in LAYOUTS:
        ds = docs(layout)
        pod = one(ds, kind, name)["spec"]["template"]["spec"]
        c = container(pod, "chimed")
        cm, _ = config_of(ds, pod, c)
        words = " ".join(c["command"]) + " " + cm["data"].get("start.sh", "")
        named |= set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", words))
    assert named and named <= flags, named - flags


def test_learner_flags_exist():
    learner = CHIMED.parents[2] / "examples" / "chime-learner"
    if not os.access(learner, os.X_OK):
        pytest.skip(f"{learner} is not built")
    r = subprocess.run([str(learner), "--help"], capture_output=True,
                       text=True, timeout=10)
    flags = set(re.findall(r"--[a-z][a-z-]*", r.stdout + r.stderr))
    pod = one(docs("daemonset"), "Pod", "chime-learner")
    named = {w for w in pod["spec"]["containers"][0]["command"]
             if w.startswith("--")}
    assert named and named <= flags, named - flags


@pytest.mark.parametrize("layout,kind,name,service", LAYOUTS)
def test_config_starts_chimed(tmp_path, layout, kind, name, service):
    """The ConfigMap's chimed.json, with its paths moved under tmp_path and
    its ports to free ones, starts a real chimed, which stops cleanly."""
    ds = docs(layout)
    pod = one(ds, kind, name)["spec"]["template"]["spec"]
    _, cfg = config_of(ds, pod, container(pod, "chimed"))
    if cfg["handoff_socket"].startswith("/"):
        cfg["handoff_socket"] = str(tmp_path / "handoff.sock")
    if "checkpoint" in cfg:
        cfg["checkpoint"]["dir"] = str(tmp_path / "checkpoints")
    path = tmp_path / "chimed.json"
    path.write_text(json.dumps(cfg))
    if not os.access(CHIMED, os.X_OK):
        pytest.fail(f"{CHIMED} is not built (set CHIMED)")
    out = tmp_path / "stdout"
    with open(out, "wb") as f:
        proc = subprocess.Popen(
            [str(CHIMED), "--config", str(path), "--listen", "127.0.0.1:0",
             "--metrics", "127.0.0.1:0", "--shard", "1"],
            stdout=f, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while "metrics on " not in out.read_text():
            assert proc.poll() is None, f"chimed exited {proc.returncode}"
            assert time.monotonic() < deadline, "chimed did not start"
            time.sleep(0.05)
        if cfg["handoff_socket"].startswith("/"):
            assert os.path.exists(cfg["handoff_socket"])
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=START_TIMEOUT_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

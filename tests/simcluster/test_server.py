"""The server around the cluster: kubeconfig, ports, the command, the ticker, no Django."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from simcluster import SimCluster, SimServer, WallClock
from simcluster import run as run_module
from simcluster.__main__ import main
from tests.sim import EXAMPLE_CLUSTER
from tests.simcluster.manifests import gpu_job


def test_the_kubeconfig_loads_with_the_official_client(sim_cluster):
    configuration = client.Configuration()
    config.load_kube_config(
        config_file=str(sim_cluster.kubeconfig), client_configuration=configuration
    )

    assert configuration.host == sim_cluster.url
    assert sim_cluster.kubeconfig.stat().st_mode & 0o777 == 0o600
    with client.ApiClient(configuration) as api:
        assert len(client.CoreV1Api(api).list_node().items) == 18


def test_the_default_port_falls_back_to_a_free_one(tmp_path, monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(run_module, "DEFAULT_PORT", port)

        server, path = run_module.start_server(
            nodes=EXAMPLE_CLUSTER, host="127.0.0.1", port=port, speed=60, kubeconfig=tmp_path / "kc"
        )
    try:
        assert server.port != port
        assert yaml.safe_load(path.read_text())["clusters"][0]["cluster"]["server"] == server.url
        assert server.cluster.speed == 60
    finally:
        server.stop()


def test_the_command_line_passes_its_options_and_defaults_to_var_sim(monkeypatch):
    seen = {}
    monkeypatch.setattr("simcluster.__main__.run", lambda **options: seen.update(options) or 0)

    assert main(["--nodes", str(EXAMPLE_CLUSTER), "--speed", "60"]) == 0

    assert seen["kubeconfig"] == "var/sim/kubeconfig"
    assert (seen["port"], seen["speed"], Path(seen["nodes"])) == (6443, 60.0, EXAMPLE_CLUSTER)


def test_the_command_line_refuses_a_speed_that_is_not_positive(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--nodes", str(EXAMPLE_CLUSTER), "--speed", "0"])

    assert exit_.value.code == 2
    assert "--speed must be positive" in capsys.readouterr().err


def test_the_command_line_names_a_missing_cluster_file(tmp_path, capsys):
    assert main(["--nodes", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err


def test_the_simulation_imports_no_django():
    code = "import sys, simcluster; print(any(m.startswith('django') for m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=EXAMPLE_CLUSTER.parent.parent,
    )

    assert result.stdout.strip() == "False"


def test_the_real_servers_ticker_runs_pods_at_speed(tmp_path):
    cluster = SimCluster.from_file(EXAMPLE_CLUSTER, clock=WallClock(), speed=600)
    server = SimServer(cluster, tick_interval=0.02).start()
    api = config.new_client_from_config(config_file=str(server.write_kubeconfig(tmp_path / "kc")))
    try:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": "demo"}})
        client.BatchV1Api(api).create_namespaced_job("demo", gpu_job("quick", duration=60))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            job = client.BatchV1Api(api).read_namespaced_job("quick", "demo")
            if job.status.succeeded:
                break
            time.sleep(0.05)
        assert job.status.succeeded == 1  # 60 simulated seconds took a tenth of a real one
    finally:
        api.close()
        server.stop()


def test_one_kept_alive_connection_serves_request_after_request(sim_cluster):
    # The official client keeps its connections alive: every answer must be whole (headers and
    # body, one buffered write) so the next request on the same socket reads cleanly. How fast
    # that is (no wait for a delayed ACK) is measured by bench/bench_reconcile.py, not here.
    connection = http.client.HTTPConnection(sim_cluster.server.host, sim_cluster.server.port)
    headers = {"Authorization": f"Bearer {sim_cluster.server.token}"}
    names, sockets = [], set()
    try:
        for path in ("/api/v1/namespaces/default", "/api/v1/namespaces/missing") * 15:
            connection.request("GET", path, headers=headers)
            response = connection.getresponse()
            body = json.loads(response.read())
            names.append((response.status, body.get("metadata", {}).get("name") or body["reason"]))
            sockets.add(id(connection.sock))
    finally:
        connection.close()

    assert names == [(200, "default"), (404, "NotFound")] * 15
    # The same socket carried all thirty (http.client would reopen a closed one).
    assert len(sockets) == 1

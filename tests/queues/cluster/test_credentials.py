"""Credentials that rotate: the adapter loads them again when their files change or the API
answers 401, without a restart; a 401 that persists is ``ClusterUnreachable`` (wait), never a
rejection (fail).

The simulated API server checks the bearer token exactly as a real one does (a wrong one is
401), restarts wanting a new token, and serves HTTPS for the in-cluster client (a certificate
made by ``openssl`` for the test). Nothing is mocked."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from queues.cluster import adapter
from queues.cluster.adapter import (
    Cluster,
    ClusterRejected,
    ClusterUnreachable,
    InClusterSource,
    KubeconfigSource,
)
from queues.cluster.mirror import ClusterMirror
from simcluster import SimServer
from simcluster.kubeconfig import write_kubeconfig
from tests.faults.processes import wait_until


def node_count(cluster: Cluster) -> int:
    return len(cluster.list_nodes().items)


@pytest.fixture
def cluster(sim_cluster):
    connected = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig), timeout=(1, 5))
    yield connected
    connected.close()


def test_a_renewed_kubeconfig_is_read_before_the_next_request(sim_cluster, cluster):
    assert node_count(cluster) == 18

    sim_cluster.rotate_token("renewed-token-1")
    time.sleep(adapter.CREDENTIALS_CHECK_SECONDS)

    assert node_count(cluster) == 18
    assert cluster.reloads == 1
    # Read because the file changed, before any request was refused.
    assert cluster.errors_taken() == {}


def test_a_401_reloads_the_kubeconfig_and_retries_once(sim_cluster, cluster, monkeypatch):
    # The file is not looked at before requests here: only the 401 can tell.
    monkeypatch.setattr(adapter, "CREDENTIALS_CHECK_SECONDS", 3600.0)
    assert node_count(cluster) == 18

    sim_cluster.rotate_token("renewed-token-2")

    assert node_count(cluster) == 18
    assert cluster.reloads == 1
    assert cluster.errors_taken() == {"http_401": 1}


def test_a_401_that_persists_is_unreachable_not_a_rejection(sim_cluster, cluster, caplog):
    sim_cluster.rotate_token("a-token-the-portal-was-not-given", kubeconfig=False)

    with pytest.raises(ClusterUnreachable) as raised:
        cluster.list_nodes()
    with pytest.raises(ClusterUnreachable):
        cluster.create_job(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "x", "namespace": "team-vision", "labels": {}},
                "spec": {
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "main", "image": "busybox"}],
                        }
                    }
                },
            }
        )

    assert not isinstance(raised.value, ClusterRejected)
    assert str(raised.value) == (
        "HTTP 401: the cluster refused the portal's credentials (Unauthorized); loaded again "
        f"from the kubeconfig {sim_cluster.kubeconfig}"
    )
    # No token in what is logged or raised.
    assert "a-token-the-portal-was-not-given" not in caplog.text + str(raised.value)
    assert sim_cluster.server.token not in caplog.text

    # Once the kubeconfig is renewed, the next request goes through.
    sim_cluster.server.write_kubeconfig(sim_cluster.kubeconfig)
    assert node_count(cluster) == 18


def test_the_mirror_follows_again_after_the_api_server_restarts_with_a_new_token(
    sim_cluster, cluster
):
    mirror = ClusterMirror(cluster).start()
    try:
        assert mirror.wait_synced(10)
        sim_cluster.rotate_token("renewed-token-3")
        pod = sim_cluster.create_foreign_pod(gpus=1, node="h100-01", name="after-rotation")

        wait_until(
            lambda: any(
                p["metadata"]["name"] == pod["metadata"]["name"] for p in mirror.items("pods")
            ),
            seconds=20,
            what="the mirror sees a pod created after the rotation",
        )
        # Every watch follows again (a kind whose watch came back before the kubeconfig was
        # rewritten tries again after its backoff, with the file's new credentials).
        wait_until(lambda: mirror.error() == "", seconds=20, what="every watch following")
    finally:
        mirror.stop()


# --- In-cluster: the projected service-account token ---------------------------------------------


@pytest.fixture
def tls_files(tmp_path):
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make the test API server's certificate")
    cert, key = tmp_path / "ca.crt", tmp_path / "tls.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_in_cluster_the_rotated_service_account_token_is_read_again(
    sim_cluster, tls_files, tmp_path
):
    cert, key = tls_files
    server = SimServer(sim_cluster.cluster, tick_interval=None, token="sa-token-1", tls=(cert, key))
    server.start()
    token_file = tmp_path / "serviceaccount" / "token"
    token_file.parent.mkdir()
    token_file.write_text("sa-token-1")
    source = InClusterSource(
        token_file=str(token_file),
        ca_file=str(cert),
        environ={
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(server.port),
        },
    )
    cluster = Cluster.in_cluster(source)
    try:
        assert cluster.api_client.configuration.host == server.url
        assert node_count(cluster) == 18

        # The kubelet writes the new token; the API server stops taking the old one.
        server.token = "sa-token-2"
        token_file.write_text("sa-token-2")
        time.sleep(adapter.CREDENTIALS_CHECK_SECONDS)

        assert node_count(cluster) == 18
        assert cluster.reloads == 1
        assert cluster.errors_taken() == {}
    finally:
        cluster.close()
        server.stop()


def test_a_kubeconfig_that_cannot_be_read_is_unreachable_naming_it(tmp_path):
    missing = tmp_path / "no-kubeconfig"

    with pytest.raises(ClusterUnreachable) as raised:
        Cluster.from_kubeconfig(str(missing))

    assert str(raised.value).startswith(
        f"no usable cluster configuration in the kubeconfig {missing}: "
    )


def test_a_kubeconfig_source_follows_the_file(tmp_path):
    path = tmp_path / "kubeconfig"
    write_kubeconfig(path, "http://127.0.0.1:1", "one")
    source = KubeconfigSource(str(path))
    before = source.version()

    write_kubeconfig(path, "http://127.0.0.1:1", "two")

    assert source.version() != before

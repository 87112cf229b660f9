"""Reading what the kubelet says when a pod's Secret or key is missing."""

from __future__ import annotations

from queues.cluster.secrets import MissingSecret, missing_secret


def test_a_missing_secret_is_read_with_the_pods_namespace():
    assert missing_secret('secret "wandb" not found', namespace="team-nlp") == MissingSecret(
        "team-nlp", "wandb"
    )


def test_a_missing_key_names_its_namespace_and_secret():
    assert missing_secret(
        "couldn't find key api-key in Secret team-nlp/wandb", namespace="team-nlp"
    ) == MissingSecret("team-nlp", "wandb", "api-key")


def test_any_other_configuration_error_is_not_a_missing_secret():
    assert missing_secret('configmap "settings" not found', namespace="team-nlp") is None
    assert (
        missing_secret("container has runAsNonRoot and image will run as root", namespace="x")
        is None
    )

"""Label/field selectors and the three patch formats, without a server."""

from __future__ import annotations

import pytest

from simcluster.errors import ApiError
from simcluster.patch import apply_patch
from simcluster.selectors import labels_match, parse_field_selector, parse_label_selector

LABELS = {"team": "nlp", "gpu": "h100", "tier": "4"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("team=nlp", True),
        ("team==nlp,gpu=h100", True),
        ("team!=nlp", False),
        ("team in (nlp, vision)", True),
        ("team notin (nlp)", False),
        ("missing notin (x)", True),
        ("team", True),
        ("!team", False),
        ("!missing,gpu in (h100)", True),
        ("", True),
    ],
)
def test_label_selectors_match_like_the_api_server(selector, matches):
    assert labels_match(parse_label_selector(selector), LABELS) is matches


def test_an_unknown_field_is_a_bad_request():
    with pytest.raises(ApiError) as raised:
        parse_field_selector("pods", "spec.nodeName=a,status.hostIP=b")

    assert (raised.value.code, raised.value.message) == (
        400,
        "field label not supported: status.hostIP",
    )


NODE = {
    "metadata": {"name": "n", "labels": {"a": "1", "b": "2"}},
    "spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]},
    "status": {
        "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "GPUHealthy", "status": "True"},
        ]
    },
}


def test_a_merge_patch_replaces_lists_and_deletes_nulls():
    patched = apply_patch(
        NODE,
        {
            "metadata": {"labels": {"a": None, "c": "3"}},
            "status": {"conditions": [{"type": "GPUHealthy", "status": "False"}]},
        },
        "application/merge-patch+json",
    )

    assert patched["metadata"]["labels"] == {"b": "2", "c": "3"}
    assert patched["status"]["conditions"] == [{"type": "GPUHealthy", "status": "False"}]
    assert NODE["metadata"]["labels"] == {"a": "1", "b": "2"}  # the original is untouched


def test_a_strategic_merge_patch_merges_conditions_by_type():
    patched = apply_patch(
        NODE,
        {"status": {"conditions": [{"type": "GPUHealthy", "status": "False", "reason": "ECC"}]}},
        "application/strategic-merge-patch+json",
    )

    assert patched["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "GPUHealthy", "status": "False", "reason": "ECC"},
    ]


def test_a_strategic_merge_patch_honours_delete_and_replace_directives():
    patched = apply_patch(
        NODE,
        {
            "metadata": {"labels": {"$patch": "replace", "only": "this"}},
            "status": {"conditions": [{"type": "Ready", "$patch": "delete"}]},
        },
        "application/strategic-merge-patch+json",
    )

    assert patched["metadata"]["labels"] == {"only": "this"}
    assert [c["type"] for c in patched["status"]["conditions"]] == ["GPUHealthy"]


def test_a_json_patch_applies_operations_in_order_and_tests_values():
    patched = apply_patch(
        NODE,
        [
            {"op": "test", "path": "/metadata/labels/a", "value": "1"},
            {"op": "replace", "path": "/metadata/labels/a", "value": "9"},
            {"op": "add", "path": "/spec/taints/-", "value": {"key": "y", "effect": "NoExecute"}},
            {"op": "remove", "path": "/spec/taints/0"},
        ],
        "application/json-patch+json",
    )

    assert patched["metadata"]["labels"]["a"] == "9"
    assert patched["spec"]["taints"] == [{"key": "y", "effect": "NoExecute"}]
    with pytest.raises(ApiError) as failed:
        apply_patch(
            NODE,
            [{"op": "test", "path": "/metadata/labels/a", "value": "2"}],
            "application/json-patch+json",
        )
    assert failed.value.code == 422


def test_an_apply_patch_is_an_unsupported_media_type():
    with pytest.raises(ApiError) as raised:
        apply_patch(NODE, {}, "application/apply-patch+yaml")

    assert raised.value.code == 415

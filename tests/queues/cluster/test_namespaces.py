"""The adapter makes a team's namespace before its first Job: one list for all of them, then a
create for each missing one, never a read per team (a cycle that starts the first jobs of 2,000
teams made 4,000 calls one after another)."""

from __future__ import annotations

from queues.cluster.adapter import Cluster


def test_missing_namespaces_are_created_after_one_list_and_known_ones_cost_nothing(sim_cluster):
    core = sim_cluster.core()
    core.create_namespace({"metadata": {"name": "vision"}})
    adapter = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))
    before = adapter.calls

    for name in ("vision", "nlp", "search", "nlp", "vision"):
        adapter.ensure_namespace(name)

    assert adapter.calls - before == 3  # the list, then nlp and search created
    names = {n.metadata.name for n in core.list_namespace().items}
    assert {"vision", "nlp", "search"} <= names


def test_a_namespace_made_by_someone_else_since_the_list_is_taken_as_it_is(sim_cluster):
    core = sim_cluster.core()
    adapter = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))
    adapter.ensure_namespace("vision")  # lists (no "nlp" yet) and creates vision
    core.create_namespace({"metadata": {"name": "nlp"}})

    adapter.ensure_namespace("nlp")  # its create answers 409: there, as wanted

    assert "nlp" in {n.metadata.name for n in core.list_namespace().items}

"""A version folder is claimed in one place, ``claims.claim_version``, for merge and publish
alike: the manifest check, what the caller reads first, the conditional-write proof, the
claim, in that order; a version with a manifest is never claimed; and no stage claims or
proves by itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from recforge import claims, releases, storage
from recforge.errors import VersionExistsError
from recforge.format import names
from tests.common.sources import make_spec

STAGES = Path(claims.__file__).parent / "stages"


@pytest.fixture
def steps(monkeypatch) -> list:
    """The sequence's steps as they happen, over a store where nothing is published yet."""
    seen: list = []
    monkeypatch.setattr(releases, "read_manifest",
                        lambda target: seen.append(("manifest", target)))
    monkeypatch.setattr(storage, "prove_conditional_writes",
                        lambda root: seen.append(("prove", root)))
    monkeypatch.setattr(claims, "claim",
                        lambda run_id, target: seen.append(("claim", run_id, target)))
    return seen


def test_claim_version_checks_prepares_proves_then_claims(steps):
    spec = make_spec("bkt")
    target = releases.version_uri(spec, "v1")
    got = claims.claim_version("r1", spec, "v1", prepare=lambda: steps.append("prepare") or 7)
    assert got == (target, None, 7)
    assert steps == [("manifest", target), "prepare", ("prove", spec.publish.uri),
                     ("claim", "r1", target)]


def test_unchecked_conditional_writes_skip_the_proof_only(steps):
    spec = make_spec("bkt", publish={"uri": "s3://bkt/datasets", "conditional_writes": "unchecked"})
    claims.claim_version("r1", spec, "v1")
    assert [s[0] for s in steps] == ["manifest", "claim"]


@pytest.mark.parametrize("own_published", [False, True])
def test_a_version_with_a_manifest_is_never_claimed(monkeypatch, own_published):
    spec = make_spec("bkt")
    monkeypatch.setattr(releases, "read_manifest", lambda target: {"run_id": "other"})
    monkeypatch.setattr(claims, "claim", lambda *a: pytest.fail("claimed a published version"))
    with pytest.raises(VersionExistsError, match="was already published by run 'other'"):
        claims.claim_version("r1", spec, "v1", own_published=own_published,
                             prepare=lambda: pytest.fail("prepared for a published version"))


def test_this_runs_own_published_version_is_returned_only_where_asked(monkeypatch):
    spec = make_spec("bkt")
    mine = {"run_id": "r1", "published_at": "then"}
    monkeypatch.setattr(releases, "read_manifest", lambda target: mine)
    monkeypatch.setattr(claims, "claim", lambda *a: pytest.fail("claimed a published version"))
    got = claims.claim_version("r1", spec, "v1", own_published=True)
    assert got == (releases.version_uri(spec, "v1"), mine, None)
    with pytest.raises(VersionExistsError, match="by run 'r1'"):  # merge: never rewritten
        claims.claim_version("r1", spec, "v1")


def test_claim_version_on_the_store_claims_once_and_refuses_another_run(bucket):
    spec = make_spec(bucket)
    target = claims.claim_version("r1", spec, "v1").target
    assert storage.read_json(storage.join(target, names.CLAIM))["run_id"] == "r1"
    claims.claim_version("r1", spec, "v1")  # this run's own claim resumes
    with pytest.raises(VersionExistsError, match="is claimed"):
        claims.claim_version("r2", spec, "v1")


def _calls(path: Path) -> set[str]:
    """``module.function`` of every call in ``path``."""
    return {f"{node.func.value.id}.{node.func.attr}"
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)}


def test_no_stage_claims_or_proves_by_itself():
    """Merge and publish claim through ``claims.claim_version``; nothing else in a stage
    writes a claim or runs the proof (a second copy of the sequence drifts apart)."""
    modules = sorted(STAGES.glob("*.py"))
    offenders = {p.name: sorted(_calls(p) & {"claims.claim", "storage.prove_conditional_writes"})
                 for p in modules}
    assert {k: v for k, v in offenders.items() if v} == {}
    assert sorted(p.name for p in modules if "claims.claim_version" in _calls(p)) == [
        "merge.py", "publish.py"]

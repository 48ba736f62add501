"""Artifacts on the wire: Artifact, DependencyArtifact and the Watch event ArtifactAdded."""

from __future__ import annotations

from corral.v1 import corral_pb2 as pb

from ..model import ArtifactRecord


def artifact(record: ArtifactRecord) -> pb.Artifact:
    message = pb.Artifact(
        name=record.name, media_type=record.media_type, size=record.size, sha256=record.sha256, attempt=record.attempt
    )
    message.create_time.FromMilliseconds(record.create_ms)
    return message


def fill_dependency_artifacts(message: pb.Claim, found: tuple[tuple[str, ArtifactRecord], ...]) -> None:
    for task_id, record in found:
        message.dependency_artifacts.add(task_id=task_id, artifact=artifact(record))


def artifact_added(data: dict, time_ms: int) -> pb.ArtifactAdded:
    """The Watch event of an artifact_added entry of the log (store/artifacts.py writes it)."""
    record = ArtifactRecord(data["name"], data["media_type"], data["size"], data["sha256"], data["attempt"], time_ms)
    return pb.ArtifactAdded(task_id=data["task_id"], teammate=data["teammate"], artifact=artifact(record))

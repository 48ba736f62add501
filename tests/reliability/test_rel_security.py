"""Hostile clients and the state directory: credentials on every RPC, roles, claim-token misuse,
revocation, file permissions, symlinks, a second daemon, a taken port, tokens in logs
(design §2 invariants 3, 7, 8, 9; §3 state dir; §4 error table).
"""

from __future__ import annotations

import os
import re
import stat
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc
from tests.support import start_refused, wait_until

from .rel_harness import Lead, dur, first_claim, md, on_postgres, status_details

SERVICES = [pb.DESCRIPTOR.services_by_name[n] for n in ("LeadService", "TeammateService", "BoardService")]
METHODS = [(f"/{s.full_name}/{m.name}", s.name, m) for s in SERVICES for m in s.methods]


def _raw_call(channel, path: str, method, metadata, payload: bytes = b"") -> tuple[str, str]:
    try:
        if method.server_streaming:
            call = channel.unary_stream(path, request_serializer=lambda b: b, response_deserializer=lambda b: b)(
                payload, metadata=metadata, timeout=2
            )
            try:
                next(iter(call))
            finally:
                call.cancel()
        else:
            channel.unary_unary(path, request_serializer=lambda b: b, response_deserializer=lambda b: b)(
                payload, metadata=metadata, timeout=10
            )
        return "OK", ""
    except grpc.RpcError as error:
        if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            return "OK", "stream open"
        return error.code().name, status_details(error)[0]


# ---------------------------------------------------------------- credentials and roles


@pytest.mark.timeout(60)
def test_every_rpc_refuses_missing_malformed_wrong_and_revoked_credentials(daemon, figures):
    lead = Lead(daemon)
    revoked = lead.add_teammate("gone")
    teammate = lead.add_teammate("mate")
    lead.lead.RemoveTeammate(pb.RemoveTeammateRequest(name="gone"), metadata=lead.md)
    variants = {
        "none": (),
        "empty bearer": (("authorization", "Bearer"),),
        "bearer space": (("authorization", "Bearer "),),
        "basic scheme": (("authorization", f"Basic {lead.token}"),),
        "no scheme": (("authorization", lead.token),),
        "token plus junk": (("authorization", f"Bearer {lead.token} x"),),
        "other header": (("x-authorization", f"Bearer {lead.token}"),),
        "wrong": md("corral-lead-" + "A" * 43),
        "truncated lead token": md(lead.token[:-1]),
        "lead token plus a char": md(lead.token + "x"),
        "teammate token altered": md(teammate[:-2] + ("AA" if not teammate.endswith("AA") else "BB")),
        "revoked": md(revoked),
    }
    wrong: list[str] = []
    checked = 0
    for variant, metadata in variants.items():
        for path, _, method in METHODS:
            code, _ = _raw_call(lead.channel, path, method, metadata)
            checked += 1
            if code != "UNAUTHENTICATED":
                wrong.append(f"{path} with {variant}: {code}")
    # The revoked token stays refused after a restart.
    lead.close()
    daemon.stop()
    daemon.start()
    lead = Lead(daemon)
    for path, _, method in METHODS:
        code, _ = _raw_call(lead.channel, path, method, md(revoked))
        checked += 1
        if code != "UNAUTHENTICATED":
            wrong.append(f"{path} with revoked after restart: {code}")
    # Health answers without a credential; reflection needs one.
    health = health_pb2_grpc.HealthStub(lead.channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    reflection = reflection_pb2_grpc.ServerReflectionStub(lead.channel)

    def list_services(metadata):
        try:
            replies = reflection.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]), metadata=metadata, timeout=5
            )
            return "OK" if next(replies).list_services_response.service else "EMPTY"
        except grpc.RpcError as error:
            return error.code().name

    reflection_anonymous, reflection_lead = list_services(()), list_services(lead.md)
    lead.close()
    figures(
        calls_checked=checked,
        not_unauthenticated=len(wrong),
        health_without_credential=health.status,
        reflection_without_credential=reflection_anonymous,
        reflection_with_lead=reflection_lead,
    )
    assert not wrong, "\n".join(wrong[:20])
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    assert reflection_anonymous == "UNAUTHENTICATED" and reflection_lead == "OK"


@pytest.mark.timeout(60)
def test_roles_are_enforced_on_every_rpc(daemon, figures):
    """A teammate on each Lead RPC and the lead on each teammate RPC: PERMISSION_DENIED."""
    lead = Lead(daemon)
    teammate = lead.add_teammate("mate")
    wrong: list[str] = []
    checked = 0
    for path, service, method in METHODS:
        if service == "BoardService":
            continue
        caller = md(teammate) if service == "LeadService" else lead.md
        code, _ = _raw_call(lead.channel, path, method, caller)
        checked += 1
        if code != "PERMISSION_DENIED":
            wrong.append(f"{path} as {'teammate' if service == 'LeadService' else 'lead'}: {code}")
    # Nothing the teammate tried was done: it could neither add a teammate nor create a task.
    names = [t.name for t in lead.board.ListTeammates(pb.ListTeammatesRequest(), metadata=lead.md).teammates]
    tasks = lead.all_tasks()
    lead.close()
    figures(calls_checked=checked, not_permission_denied=len(wrong), teammates=names, tasks=len(tasks))
    assert not wrong, "\n".join(wrong)
    assert names == ["mate"] and not tasks


# ---------------------------------------------------------------- claim tokens


def _claim(stub, token: str) -> pb.Claim:
    return first_claim(stub, token, poll_ms=100, max_idle_polls=200)


def _try_all(stub, token: str, task_id: str, claim_token: str) -> dict[str, str]:
    """Renew, complete, fail and release with this credential and claim token: code/reason each."""
    calls = {
        "renew": lambda: stub.RenewLease(
            pb.RenewLeaseRequest(task_id=task_id, claim_token=claim_token), metadata=md(token), timeout=10
        ),
        "fail": lambda: stub.FailTask(
            pb.FailTaskRequest(task_id=task_id, claim_token=claim_token, error="x"), metadata=md(token), timeout=10
        ),
        "release": lambda: stub.ReleaseTask(
            pb.ReleaseTaskRequest(task_id=task_id, claim_token=claim_token), metadata=md(token), timeout=10
        ),
        "complete": lambda: stub.CompleteTask(
            pb.CompleteTaskRequest(task_id=task_id, claim_token=claim_token, result=b"forged"),
            metadata=md(token),
            timeout=10,
        ),
    }
    answers = {}
    for name, call in calls.items():
        try:
            reply = call()
            answers[name] = "OK" + (f" result={reply.task.result!r}" if name == "complete" else "")
        except grpc.RpcError as error:
            answers[name] = f"{error.code().name}/{status_details(error)[0]}"
    return answers


@pytest.mark.timeout(60)
def test_claim_tokens_are_refused_unless_live_and_owned(daemon, figures):
    lead = Lead(daemon)
    stub = pb_grpc.TeammateServiceStub(lead.channel)
    a, b, c = (lead.add_teammate(n) for n in ("a", "b", "c"))
    lead.create(
        [
            # No backoff: the expired k1 is claimed again at once, by whoever asks next.
            pb.TaskSpec(id=f"k{i}", title="k", lease_duration=dur(1000 if i == 1 else 60_000), retry_backoff=dur(0))
            for i in range(5)
        ],
        "tasks",
    )
    mismatch = "FAILED_PRECONDITION/CLAIM_TOKEN_MISMATCH"
    expired = "FAILED_PRECONDITION/LEASE_EXPIRED"
    canceled = "FAILED_PRECONDITION/TASK_CANCELED"
    results = {}

    # B (and the lead's board) using A's live claim token: refused; A's claim unaffected.
    claim = _claim(stub, a)
    results["foreign (B uses A's token)"] = _try_all(stub, b, claim.task.id, claim.claim_token)
    results["random token"] = _try_all(stub, a, claim.task.id, "corral-claim-never-issued")
    results["A's token on another task"] = _try_all(stub, a, "k4", claim.claim_token)
    done = stub.CompleteTask(
        pb.CompleteTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token, result=b"real"), metadata=md(a)
    ).task
    assert done.state == pb.TASK_STATE_COMPLETED and done.result == b"real"
    # After completion: the same token completes idempotently with the stored result; others refused.
    results["after completion"] = _try_all(stub, a, claim.task.id, claim.claim_token)
    results["after completion, by B"] = _try_all(stub, b, claim.task.id, claim.claim_token)

    # After expiry (lease 1 s, not renewed), then reclaimed by C.
    expiring = _claim(stub, a)
    assert expiring.task.lease_duration.seconds == 1
    wait_until(
        lambda: lead.get_task(expiring.task.id).state == pb.TASK_STATE_PENDING,
        5,
        what="the reaper to reclaim the expired lease",
    )
    results["after expiry"] = _try_all(stub, a, expiring.task.id, expiring.claim_token)
    reclaim = _claim(stub, c)
    assert reclaim.task.id == expiring.task.id and reclaim.claim_token != expiring.claim_token
    results["after reclaim by C"] = _try_all(stub, a, expiring.task.id, expiring.claim_token)
    assert (
        stub.CompleteTask(
            pb.CompleteTaskRequest(task_id=reclaim.task.id, claim_token=reclaim.claim_token), metadata=md(c)
        ).task.state
        == pb.TASK_STATE_COMPLETED
    )

    # After release and after cancellation.
    released = _claim(stub, b)
    stub.ReleaseTask(pb.ReleaseTaskRequest(task_id=released.task.id, claim_token=released.claim_token), metadata=md(b))
    results["after release"] = _try_all(stub, b, released.task.id, released.claim_token)
    victim = _claim(stub, c)
    lead.lead.CancelTasks(pb.CancelTasksRequest(ids=[victim.task.id]), metadata=lead.md)
    results["after cancellation"] = _try_all(stub, c, victim.task.id, victim.claim_token)
    with lead.daemon.channel() as channel:
        with daemon.board() as conn:
            completed = conn.execute("SELECT count(*) FROM claims WHERE outcome = 'completed'").fetchone()[0]
            forged = conn.execute("SELECT count(*) FROM tasks WHERE result = ?", (b"forged",)).fetchone()[0]
        del channel
    lead.close()
    figures(
        **{k.replace(" ", "_"): v for k, v in results.items()}, completed_claims=completed, forged_results_stored=forged
    )
    everything = {"renew": mismatch, "fail": mismatch, "release": mismatch, "complete": mismatch}
    assert results["foreign (B uses A's token)"] == everything
    assert results["random token"] == everything
    assert results["A's token on another task"] == everything
    assert results["after completion"] == {
        "renew": mismatch,
        "fail": mismatch,
        "release": mismatch,
        "complete": "OK result=b'real'",
    }
    assert results["after completion, by B"] == everything
    assert results["after expiry"] == {k: expired for k in everything}
    assert results["after reclaim by C"] == {k: expired for k in everything}
    assert results["after release"] == everything
    assert results["after cancellation"] == {k: canceled for k in everything}
    assert completed == 2 and forged == 0


@pytest.mark.timeout(30)
def test_revoked_teammate_stream_is_closed_by_the_removal(daemon, figures):
    """The stream polls every 60 s and its call has 20 s: ending at all, it was ended by the
    removal. (How soon is a figure here, not a bound.)"""
    lead = Lead(daemon)
    token = lead.add_teammate("doomed")
    lead.create([pb.TaskSpec(id="held", title="held")], "r")
    stub = pb_grpc.TeammateServiceStub(lead.channel)
    call = stub.Idle(pb.IdleRequest(poll_interval=dur(60_000)), metadata=md(token), timeout=20)
    first = next(call)
    assert first.HasField("claim")
    removed_at = time.monotonic()
    lead.lead.RemoveTeammate(pb.RemoveTeammateRequest(name="doomed"), metadata=lead.md)
    try:
        for _ in call:
            pass
        code = "OK"
    except grpc.RpcError as error:
        code = error.code().name
    closed_s = time.monotonic() - removed_at
    task = lead.get_task("held")
    after = _raw_call(
        lead.channel,
        "/corral.v1.BoardService/GetStats",
        pb.DESCRIPTOR.services_by_name["BoardService"].methods_by_name["GetStats"],
        md(token),
    )
    lead.close()
    figures(
        stream_closed_s=closed_s,
        stream_status=code,
        task_state=pb.TaskState.Name(task.state),
        token_after_revocation=after[0],
    )
    assert code == "UNAUTHENTICATED"
    assert task.state == pb.TASK_STATE_PENDING
    assert after[0] == "UNAUTHENTICATED"


# ---------------------------------------------------------------- the state directory


@pytest.mark.timeout(30)
def test_state_directory_permissions(daemon, figures):
    lead = Lead(daemon)
    lead.add_teammate("x")
    lead.create([pb.TaskSpec(id="t", title="t")], "r")
    lead.close()
    root = daemon.state_dir
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [root, *root.iterdir()]}
    modes = {name: oct(mode) for name, mode in modes.items()}
    figures(**modes)
    assert modes[root.name] == "0o700"
    board_file = () if on_postgres() else ("corral.sqlite3",)  # a PostgreSQL board has none
    for name in (*board_file, "corral.sock", "lead.token", "corrald.lock"):
        assert modes[name] == "0o600", name
    for name, mode in modes.items():
        if name.startswith("corral.sqlite3"):
            assert mode == "0o600", name


@pytest.mark.timeout(60)
def test_state_directory_refusals(tmp_path, figures):
    outcomes = {}

    def expect_refusal(label: str, state_dir, pattern: str, extra=()) -> None:
        code, err = start_refused(state_dir, extra)
        outcomes[label] = (code, err.strip().splitlines()[-1][:120] if err.strip() else "")
        assert code != 0, f"{label}: the daemon started"
        assert re.search(pattern, err, re.I), f"{label}: unclear message {err!r}"
        assert "Traceback" not in err, f"{label}: a traceback instead of a message"

    if not on_postgres():  # a SQLite board's file
        linked = tmp_path / "linked"
        linked.mkdir(mode=0o700)
        (tmp_path / "elsewhere.sqlite3").write_bytes(b"")
        os.symlink(tmp_path / "elsewhere.sqlite3", linked / "corral.sqlite3")
        expect_refusal("symlinked database", linked, r"symbolic link|symlink")
    # A symlinked lead token.
    token_link = tmp_path / "tokenlink"
    token_link.mkdir(mode=0o700)
    (tmp_path / "stolen.token").write_text("corral-lead-stolen")
    os.symlink(tmp_path / "stolen.token", token_link / "lead.token")
    expect_refusal("symlinked lead token", token_link, r"symbolic link|symlink")
    # A group- or world-writable state directory.
    for label, mode in (("group-writable directory", 0o770), ("world-writable directory", 0o707)):
        loose = tmp_path / label.replace(" ", "-")
        loose.mkdir()
        os.chmod(loose, mode)
        expect_refusal(label, loose, r"writable")
        assert stat.S_IMODE(loose.stat().st_mode) == mode, "the daemon changed the mode of a refused directory"
    # The state directory itself a symlink.
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    os.symlink(real, tmp_path / "dirlink")
    expect_refusal("symlinked state directory", tmp_path / "dirlink", r"not a plain directory|symbolic|symlink")
    # Non-loopback TCP without TLS.
    # (TEST-NET-1, never a local address: even a broken check could not open a public port.)
    expect_refusal("non-loopback without TLS", tmp_path / "tls", r"TLS|tls", extra=["--listen", "192.0.2.1:0"])
    figures(**{k.replace(" ", "_"): v for k, v in outcomes.items()})


@pytest.mark.timeout(60)
def test_second_daemon_and_second_bind_refused(daemons, figures):
    first = daemons("one", listen="127.0.0.1:0").start()
    port = first.address.rpartition(":")[2]
    same_dir = start_refused(first.state_dir)
    same_port = start_refused(first.state_dir.parent / "two", ["--listen", f"127.0.0.1:{port}"])
    still_serving = Lead(first).stats().writer.commits >= 1
    figures(
        second_daemon_same_dir=(same_dir[0], same_dir[1].strip()[-120:]),
        second_bind_same_port=(same_port[0], same_port[1].strip()[-120:]),
        first_still_serving=still_serving,
    )
    assert same_dir[0] != 0 and re.search(r"in use.*pid \d+", same_dir[1]), same_dir
    assert "Traceback" not in same_dir[1]
    assert same_port[0] != 0, "a second daemon bound the same TCP port"
    assert still_serving


@pytest.mark.timeout(60)
def test_second_bind_refused_with_a_clear_message(daemons, figures):
    first = daemons("one", listen="127.0.0.1:0").start()
    port = first.address.rpartition(":")[2]
    code, err = start_refused(first.state_dir.parent / "two", ["--listen", f"127.0.0.1:{port}"])
    figures(exit_code=code, last_line=err.strip().splitlines()[-1][:160] if err.strip() else "")
    assert code == 2
    assert "Traceback" not in err
    assert re.search(r"corrald: cannot listen on 127\.0\.0\.1:\d+", err)


@pytest.mark.timeout(60)
def test_tokens_never_in_logs(daemons, figures):
    daemon = daemons(log_level="debug").start()
    lead = Lead(daemon)
    secrets = {"lead": lead.token}
    for name in ("alpha", "beta", "gamma"):
        secrets[name] = lead.add_teammate(name, require_plan=(name == "gamma"))
    lead.create([pb.TaskSpec(id=f"t{i}", title="t", lease_duration=dur(1000)) for i in range(4)], "r")
    stub = pb_grpc.TeammateServiceStub(lead.channel)
    claims = [_claim(stub, secrets["alpha"]), _claim(stub, secrets["beta"])]
    # Exercise success and error paths with real and near-miss credentials and claim tokens.
    _try_all(stub, secrets["beta"], claims[0].task.id, claims[0].claim_token)
    _try_all(stub, secrets["alpha"], claims[0].task.id, claims[0].claim_token)
    for metadata in (md(lead.token + "x"), md(secrets["alpha"][:-1]), (("authorization", lead.token),)):
        _raw_call(
            lead.channel,
            "/corral.v1.LeadService/CreateTasks",
            pb.DESCRIPTOR.services_by_name["LeadService"].methods_by_name["CreateTasks"],
            metadata,
        )
    stub.SubmitPlan(pb.SubmitPlanRequest(plan="p"), metadata=md(secrets["gamma"]))
    lead.lead.RemoveTeammate(pb.RemoveTeammateRequest(name="beta"), metadata=lead.md)
    _raw_call(
        lead.channel,
        "/corral.v1.BoardService/GetStats",
        pb.DESCRIPTOR.services_by_name["BoardService"].methods_by_name["GetStats"],
        md(secrets["beta"]),
    )
    try:  # an error path that logs a traceback (see the known DecidePlan bug)
        lead.lead.DecidePlan(pb.DecidePlanRequest(plan_id="99999999999999999999"), metadata=lead.md, timeout=5)
    except grpc.RpcError:
        pass
    lead.close()
    daemon.stop()
    daemon.start()  # the start-up logs of a second life too
    daemon.stop()
    logs = daemon.all_logs()
    found = {name: secret in logs for name, secret in secrets.items()}
    found_near_miss = (lead.token + "x") in logs or secrets["alpha"][:-1] in logs
    claim_tokens_logged = sum(c.claim_token in logs for c in claims)
    figures(
        log_bytes=len(logs),
        debug_lines=logs.count(" DEBUG "),
        credentials_found=found,
        near_miss_credentials_found=found_near_miss,
        claim_tokens_found=claim_tokens_logged,
    )
    assert not any(found.values())
    assert not found_near_miss
    assert claim_tokens_logged == 0


@pytest.mark.timeout(60)
def test_unknown_fields_refused_on_every_rpc(daemon, figures):
    """A forged client adding fields the schema does not know (an `owner`, say) is refused with
    INVALID_ARGUMENT on every RPC, before anything happens."""
    lead = Lead(daemon)
    teammate = lead.add_teammate("mate")
    # Field 99, wire type 2 (length-delimited): "owner" = "lead"; and field 15, varint 1.
    forged_fields = (bytes([0x9A, 0x06, 4]) + b"lead", bytes([0x78, 0x01]))
    wrong = []
    checked = 0
    for path, service, method in METHODS:
        caller = lead.md if service != "TeammateService" else md(teammate)
        for forged in forged_fields:
            code, reason = _raw_call(lead.channel, path, method, caller, forged)
            checked += 1
            if code != "INVALID_ARGUMENT":
                wrong.append(f"{path}: {code} {reason}")
    stats = lead.stats()
    lead.close()
    figures(calls_checked=checked, not_invalid_argument=len(wrong), writer_commits_after=stats.writer.commits)
    assert not wrong, "\n".join(wrong)
